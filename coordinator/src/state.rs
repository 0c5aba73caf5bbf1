//! The coordinator's job state: every shard and its lease, kept in memory
//! for speed and written through to an embedded redb database on every
//! change, so that a coordinator restarted on the same file resumes where it
//! stopped (committed shards stay committed; leases of the dead coordinator
//! expire and are handed out again).
//!
//! Exactly-once commits rest on fencing tokens: each lease gets a token
//! larger than every earlier one, and a completion is accepted only from the
//! current lease of a shard that is not yet committed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use paraforge_core::layout::FileKind;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

pub use crate::shard::ShardSpec;
use crate::shard::{InputFingerprint, Plan};

const SHARDS: TableDefinition<u64, &[u8]> = TableDefinition::new("shards");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("job state {path}: {message}")]
    Store { path: String, message: String },
    #[error("job state {path} belongs to job {found:?}, not {wanted:?}: use another state file or the same config")]
    OtherJob {
        path: String,
        found: String,
        wanted: String,
    },
    #[error("unknown shard {0}")]
    UnknownShard(u64),
    /// redb's lock: another coordinator of this job is running.
    #[error("job state {path} is held by another coordinator of this job (a second `paraforge run` or `paraforge coordinator` of the same config?): wait for it to end, or stop it")]
    Busy { path: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
    pub kind: FileKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Pending,
    Leased {
        token: u64,
        worker: String,
        deadline_ms: u64,
        /// When the lease was granted, for the shard-duration histogram.
        /// Absent from files of older versions, whose leases a restart
        /// turns back into pending shards anyway.
        #[serde(default)]
        leased_ms: u64,
    },
    Committed {
        token: u64,
        files: Vec<OutputFile>,
        pairs: u64,
        rejects: u64,
        /// The rejects by reason code (malformed lines and `[filters]`), as
        /// the coordinator counted them in the committed rejects file.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        rejects_by_reason: BTreeMap<String, u64>,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub spec: ShardSpec,
    pub status: Status,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// Progress reported by the current lease's heartbeats.
    pub progress_pairs: u64,
    /// Every token this shard's leases were given, recorded (durably) as
    /// each is handed out: cleanup deletes only files with one of these.
    /// Absent in states written before, whose files cleanup leaves alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<u64>,
}

/// What a reported failure did to its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Back in the queue for another attempt.
    Retried,
    /// Failed for good: out of attempts, or not retryable.
    Failed,
    /// Nothing: the lease was no longer this worker's (expired, revoked or
    /// committed), so its failure does not count.
    Stale,
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub spec: ShardSpec,
    pub token: u64,
    pub deadline_ms: u64,
    pub attempt: u32,
}

/// Why a completion was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    AlreadyCommitted,
    /// The shard is leased to someone else now (the caller's lease is stale).
    Superseded,
    /// The shard is not leased (expired and back in the queue, or failed).
    NotLeased,
    UnknownShard,
    /// The caller is not the worker that holds the lease.
    NotHolder,
}

impl Refusal {
    /// A short fixed code, the metrics label of refused completions.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::AlreadyCommitted => "already_committed",
            Refusal::Superseded => "superseded",
            Refusal::NotLeased => "not_leased",
            Refusal::UnknownShard => "unknown_shard",
            Refusal::NotHolder => "not_holder",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::AlreadyCommitted => "the shard is already committed",
            Refusal::Superseded => "the lease is stale: the shard was leased again",
            Refusal::NotLeased => "the shard is not leased (the lease expired or the shard failed)",
            Refusal::UnknownShard => "no such shard",
            Refusal::NotHolder => "the shard is leased to another worker",
        })
    }
}

/// What a committed attempt wrote, as the coordinator checked it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub pairs: u64,
    pub rejects: u64,
    /// The rejects by reason code, counted in the rejects file.
    pub rejects_by_reason: BTreeMap<String, u64>,
}

impl Tally {
    /// Pairs and rejects, no reasons counted.
    pub fn counts(pairs: u64, rejects: u64) -> Tally {
        Tally {
            pairs,
            rejects,
            ..Tally::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub total: u64,
    pub pending: u64,
    pub leased: u64,
    pub committed: u64,
    pub failed: u64,
    pub pairs: u64,
    pub rejects: u64,
    /// Committed rejects by reason code.
    pub rejects_by_reason: BTreeMap<String, u64>,
    /// Lines in committed shards, and in all shards (for the ETA).
    pub lines_done: u64,
    pub lines_total: u64,
}

/// The durable job state.
pub struct JobState {
    db: Database,
    path: String,
    job_id: String,
    max_attempts: u32,
    shards: BTreeMap<u64, Shard>,
    pending: BTreeSet<u64>,
    /// Shards leased now: expiry looks at these only, not at every shard.
    leased: BTreeSet<u64>,
    next_token: u64,
    /// Tokens below this are durably reserved: the stored counter is always
    /// ahead of every token handed out, so tokens stay monotonic across a
    /// crash even though leases themselves are written without fsync.
    token_reserved: u64,
    run_id: String,
    inputs: Vec<InputFingerprint>,
    config_key: String,
    /// The job's model digest once fixed (paraforge_core::model_digest).
    model_sha256: Option<String>,
    created: bool,
    retried_failed: usize,
    /// Leases expired since this open (a metric; not stored).
    leases_expired: u64,
}

/// A run id unique to one state file: who created it, where and when.
fn new_run_id(job_id: &str, path: &Path) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = twox_hash::XxHash3_128::new();
    h.write(job_id.as_bytes());
    h.write(path.display().to_string().as_bytes());
    h.write(&now.to_le_bytes());
    h.write(&std::process::id().to_le_bytes());
    format!("{:032x}", h.finish_128())
}

/// Tokens reserved per durable write of the counter.
const TOKEN_BLOCK: u64 = 4096;

fn store_err(path: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Store {
        path: path.to_string(),
        message: e.to_string(),
    }
}

impl JobState {
    /// Opens the state file, creating the job with `plan` if the file is
    /// new; an existing file must hold the same job id.
    pub fn open(
        path: &Path,
        job_id: &str,
        max_attempts: u32,
        plan: impl FnOnce() -> Vec<ShardSpec>,
    ) -> Result<JobState, StateError> {
        JobState::open_planned(path, job_id, max_attempts, "", || Plan {
            shards: plan(),
            inputs: Vec::new(),
        })
    }

    /// Opens the state file, creating the job from `plan` (shards and input
    /// fingerprints) and `config_key` (what of the config decides the
    /// output) if the file is new. A reopened job retries its failed shards:
    /// a rerun is how a user asks for that.
    pub fn open_planned(
        path: &Path,
        job_id: &str,
        max_attempts: u32,
        config_key: &str,
        plan: impl FnOnce() -> Plan,
    ) -> Result<JobState, StateError> {
        let p = path.display().to_string();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| store_err(&p, e))?;
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StateError::Busy { path: p.clone() },
            e => store_err(&p, e),
        })?;
        let mut st = JobState {
            db,
            path: p.clone(),
            job_id: job_id.to_string(),
            max_attempts,
            shards: BTreeMap::new(),
            pending: BTreeSet::new(),
            leased: BTreeSet::new(),
            next_token: 1,
            token_reserved: 1,
            run_id: String::new(),
            inputs: Vec::new(),
            config_key: String::new(),
            model_sha256: None,
            created: false,
            retried_failed: 0,
            leases_expired: 0,
        };
        let found = st.read_meta("job_id")?;
        match found {
            Some(found) if found != job_id => {
                return Err(StateError::OtherJob {
                    path: p,
                    found,
                    wanted: job_id.to_string(),
                })
            }
            Some(_) => st.load()?,
            None => {
                let Plan {
                    shards: specs,
                    inputs,
                } = plan();
                st.created = true;
                st.run_id = new_run_id(job_id, path);
                st.inputs = inputs;
                st.config_key = config_key.to_string();
                let inputs_json = serde_json::to_vec(&st.inputs).map_err(|e| store_err(&p, e))?;
                let tx = st.db.begin_write().map_err(|e| store_err(&p, e))?;
                {
                    let mut t = tx.open_table(SHARDS).map_err(|e| store_err(&p, e))?;
                    for spec in specs {
                        let shard = Shard {
                            spec,
                            status: Status::Pending,
                            attempts: 0,
                            last_error: None,
                            progress_pairs: 0,
                            tokens: Vec::new(),
                        };
                        let bytes = serde_json::to_vec(&shard).map_err(|e| store_err(&p, e))?;
                        t.insert(shard.spec.shard_id, bytes.as_slice())
                            .map_err(|e| store_err(&p, e))?;
                        st.pending.insert(shard.spec.shard_id);
                        st.shards.insert(shard.spec.shard_id, shard);
                    }
                    let mut m = tx.open_table(META).map_err(|e| store_err(&p, e))?;
                    m.insert("job_id", job_id.as_bytes())
                        .map_err(|e| store_err(&p, e))?;
                    m.insert("next_token", 1u64.to_le_bytes().as_slice())
                        .map_err(|e| store_err(&p, e))?;
                    m.insert("run_id", st.run_id.as_bytes())
                        .map_err(|e| store_err(&p, e))?;
                    m.insert("inputs", inputs_json.as_slice())
                        .map_err(|e| store_err(&p, e))?;
                    m.insert("config", config_key.as_bytes())
                        .map_err(|e| store_err(&p, e))?;
                }
                tx.commit().map_err(|e| store_err(&p, e))?;
            }
        }
        Ok(st)
    }

    fn read_meta(&self, key: &str) -> Result<Option<String>, StateError> {
        let p = &self.path;
        let tx = self.db.begin_read().map_err(|e| store_err(p, e))?;
        let t = match tx.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(store_err(p, e)),
        };
        Ok(t.get(key)
            .map_err(|e| store_err(p, e))?
            .map(|v| String::from_utf8_lossy(v.value()).into_owned()))
    }

    fn load(&mut self) -> Result<(), StateError> {
        let p = self.path.clone();
        let tx = self.db.begin_read().map_err(|e| store_err(&p, e))?;
        let t = tx.open_table(SHARDS).map_err(|e| store_err(&p, e))?;
        for row in t.iter().map_err(|e| store_err(&p, e))? {
            let (_, v) = row.map_err(|e| store_err(&p, e))?;
            let mut shard: Shard =
                serde_json::from_slice(v.value()).map_err(|e| store_err(&p, e))?;
            // Leases do not survive a coordinator restart: their holders
            // re-lease, and fencing refuses their old tokens.
            if let Status::Leased { .. } = shard.status {
                shard.status = Status::Pending;
            }
            if let Status::Failed { reason } = &shard.status {
                shard.last_error = Some(reason.clone());
                shard.status = Status::Pending;
                shard.attempts = 0;
                self.retried_failed += 1;
            }
            if shard.status == Status::Pending {
                self.pending.insert(shard.spec.shard_id);
            }
            self.shards.insert(shard.spec.shard_id, shard);
        }
        let m = tx.open_table(META).map_err(|e| store_err(&p, e))?;
        if let Some(v) = m.get("next_token").map_err(|e| store_err(&p, e))? {
            let b: [u8; 8] = v.value().try_into().unwrap_or([0; 8]);
            self.next_token = u64::from_le_bytes(b).max(1);
            self.token_reserved = self.next_token;
        }
        let text = |k: &str| -> Result<Option<Vec<u8>>, StateError> {
            Ok(m.get(k)
                .map_err(|e| store_err(&p, e))?
                .map(|v| v.value().to_vec()))
        };
        // A state file from before fingerprints cannot vouch for its inputs.
        let missing = |k: &str| {
            StateError::Store {
            path: p.clone(),
            message: format!(
                "no {k:?} recorded (written by an older paraforge): finish the job with that version, or start afresh with a new state file and output"
            ),
        }
        };
        self.run_id = String::from_utf8_lossy(&text("run_id")?.ok_or_else(|| missing("run_id"))?)
            .into_owned();
        self.inputs = serde_json::from_slice(&text("inputs")?.ok_or_else(|| missing("inputs"))?)
            .map_err(|e| store_err(&p, e))?;
        self.config_key =
            String::from_utf8_lossy(&text("config")?.unwrap_or_default()).into_owned();
        self.model_sha256 = text("model_sha256")?.map(|b| String::from_utf8_lossy(&b).into_owned());
        Ok(())
    }

    /// The digest of the model every shard of the job is translated with,
    /// once fixed (at planning, or by the first worker when the coordinator
    /// cannot read the model).
    pub fn model_sha256(&self) -> Option<&str> {
        self.model_sha256.as_deref()
    }

    /// Fixes the job's model digest (durably): from now on only a worker
    /// with this model gets a lease.
    pub fn set_model_sha256(&mut self, digest: &str) -> Result<(), StateError> {
        let p = self.path.clone();
        let tx = self.db.begin_write().map_err(|e| store_err(&p, e))?;
        {
            let mut m = tx.open_table(META).map_err(|e| store_err(&p, e))?;
            m.insert("model_sha256", digest.as_bytes())
                .map_err(|e| store_err(&p, e))?;
        }
        tx.commit().map_err(|e| store_err(&p, e))?;
        self.model_sha256 = Some(digest.to_string());
        Ok(())
    }

    /// This run of the job: unique to the state file, recorded in the
    /// output's claim so that no other job writes there.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The inputs as they were when the job was planned.
    pub fn inputs(&self) -> &[InputFingerprint] {
        &self.inputs
    }

    /// The config's output-deciding part when the job was planned.
    pub fn config_key(&self) -> &str {
        &self.config_key
    }

    /// Whether this open created the job (rather than resuming it).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Leases that ran out before their holder completed or failed them,
    /// since this open.
    pub fn leases_expired(&self) -> u64 {
        self.leases_expired
    }

    /// Failed shards put back in the queue by this open.
    pub fn retried_failed(&self) -> usize {
        self.retried_failed
    }

    /// Whether `token` was handed out by this job to shard `shard_id`, as
    /// recorded when it was (not inferred from the counter, which runs in
    /// reserved blocks past the tokens really issued).
    pub fn issued(&self, shard_id: u64, token: u64) -> bool {
        self.shards
            .get(&shard_id)
            .is_some_and(|s| s.tokens.contains(&token))
    }

    /// Takes a committed shard back (its files are gone from the output):
    /// it is leased and written again.
    pub fn requeue(&mut self, shard_id: u64, reason: &str) -> Result<(), StateError> {
        let s = self
            .shards
            .get_mut(&shard_id)
            .ok_or(StateError::UnknownShard(shard_id))?;
        s.status = Status::Pending;
        s.attempts = 0;
        s.last_error = Some(reason.to_string());
        self.leased.remove(&shard_id);
        self.pending.insert(shard_id);
        self.persist(&[shard_id], true)
    }

    /// Writes shards (and the reserved token counter) in one transaction.
    /// Commits and failures are `durable` (fsync before returning); lease
    /// changes are not: a crash that loses them only re-queues shards, which
    /// a restart does to every leased shard anyway.
    fn persist(&self, ids: &[u64], durable: bool) -> Result<(), StateError> {
        let p = &self.path;
        let mut tx = self.db.begin_write().map_err(|e| store_err(p, e))?;
        if !durable {
            tx.set_durability(redb::Durability::None)
                .map_err(|e| store_err(p, e))?;
        }
        {
            let mut t = tx.open_table(SHARDS).map_err(|e| store_err(p, e))?;
            for id in ids {
                if let Some(s) = self.shards.get(id) {
                    let bytes = serde_json::to_vec(s).map_err(|e| store_err(p, e))?;
                    t.insert(*id, bytes.as_slice())
                        .map_err(|e| store_err(p, e))?;
                }
            }
            let mut m = tx.open_table(META).map_err(|e| store_err(p, e))?;
            m.insert("next_token", self.token_reserved.to_le_bytes().as_slice())
                .map_err(|e| store_err(p, e))?;
        }
        tx.commit().map_err(|e| store_err(p, e))
    }

    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// Returns expired leases to the queue (or fails shards out of attempts).
    pub fn expire(&mut self, now_ms: u64) -> Result<usize, StateError> {
        let mut changed = Vec::new();
        let mut failed = false;
        for id in self.leased.iter() {
            let Some(s) = self.shards.get_mut(id) else {
                continue;
            };
            if let Status::Leased { deadline_ms, .. } = s.status {
                if deadline_ms <= now_ms {
                    s.last_error = Some("lease expired".into());
                    if s.attempts >= self.max_attempts {
                        s.status = Status::Failed {
                            reason: format!("lease expired on each of {} attempts", s.attempts),
                        };
                        failed = true;
                    } else {
                        s.status = Status::Pending;
                        self.pending.insert(*id);
                    }
                    changed.push(*id);
                }
            }
        }
        for id in &changed {
            self.leased.remove(id);
        }
        self.leases_expired += changed.len() as u64;
        if !changed.is_empty() {
            self.persist(&changed, failed)?;
        }
        Ok(changed.len())
    }

    /// Leases the lowest pending shard to `worker`, if any.
    pub fn lease(
        &mut self,
        worker: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<Lease>, StateError> {
        self.expire(now_ms)?;
        let Some(id) = self.pending.pop_first() else {
            return Ok(None);
        };
        let token = self.next_token;
        self.next_token += 1;
        if self.next_token > self.token_reserved {
            self.token_reserved = self.next_token + TOKEN_BLOCK;
        }
        self.leased.insert(id);
        let s = self
            .shards
            .get_mut(&id)
            .ok_or(StateError::UnknownShard(id))?;
        s.attempts += 1;
        s.progress_pairs = 0;
        s.tokens.push(token);
        let deadline_ms = now_ms + lease_ms;
        s.status = Status::Leased {
            token,
            worker: worker.to_string(),
            deadline_ms,
            leased_ms: now_ms,
        };
        let lease = Lease {
            spec: s.spec.clone(),
            token,
            deadline_ms,
            attempt: s.attempts,
        };
        // Durable: the token must be on record before any file named by it
        // can exist, or cleanup after a crash would not know the file.
        self.persist(&[id], true)?;
        Ok(Some(lease))
    }

    /// Extends the leases `worker` still holds; returns (extended, revoked) tokens.
    pub fn heartbeat(
        &mut self,
        worker: &str,
        leases: &[(u64, u64, u64)],
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<(Vec<u64>, Vec<u64>), StateError> {
        self.expire(now_ms)?;
        let (mut ext, mut rev) = (Vec::new(), Vec::new());
        for &(shard_id, token, pairs) in leases {
            match self.shards.get_mut(&shard_id) {
                Some(s) => match &mut s.status {
                    Status::Leased {
                        token: t,
                        worker: w,
                        deadline_ms,
                        ..
                    } if *t == token && w == worker => {
                        *deadline_ms = now_ms + lease_ms;
                        s.progress_pairs = pairs;
                        ext.push(token);
                    }
                    _ => rev.push(token),
                },
                None => rev.push(token),
            }
        }
        // Extended deadlines and progress are kept in memory only: a
        // restart turns every lease back into a pending shard anyway.
        Ok((ext, rev))
    }

    /// Whether `worker` holds `shard_id` under `token` right now.
    pub fn check_holder(&self, shard_id: u64, worker: &str, token: u64) -> Result<(), Refusal> {
        match self.shards.get(&shard_id).map(|s| &s.status) {
            None => Err(Refusal::UnknownShard),
            Some(Status::Committed { .. }) => Err(Refusal::AlreadyCommitted),
            Some(Status::Leased {
                token: t,
                worker: w,
                ..
            }) if *t == token => {
                if w == worker {
                    Ok(())
                } else {
                    Err(Refusal::NotHolder)
                }
            }
            Some(Status::Leased { .. }) => Err(Refusal::Superseded),
            Some(Status::Pending | Status::Failed { .. }) => Err(Refusal::NotLeased),
        }
    }

    /// Commits a shard's output from its current lease, exactly once.
    /// Returns when that lease was granted (ms since the epoch).
    pub fn complete(
        &mut self,
        shard_id: u64,
        worker: &str,
        token: u64,
        files: Vec<OutputFile>,
        tally: Tally,
    ) -> Result<Result<u64, Refusal>, StateError> {
        let Tally {
            pairs,
            rejects,
            rejects_by_reason,
        } = tally;
        if let Err(r) = self.check_holder(shard_id, worker, token) {
            return Ok(Err(r));
        }
        let Some(s) = self.shards.get_mut(&shard_id) else {
            return Ok(Err(Refusal::UnknownShard));
        };
        let leased_ms = match s.status {
            Status::Leased { leased_ms, .. } => leased_ms,
            _ => 0,
        };
        s.status = Status::Committed {
            token,
            files,
            pairs,
            rejects,
            rejects_by_reason,
        };
        self.leased.remove(&shard_id);
        self.persist(&[shard_id], true)?;
        Ok(Ok(leased_ms))
    }

    /// Whether `worker` holds `shard_id` under `token` now (a failure or
    /// give-back of any other lease is stale).
    fn holds(&self, shard_id: u64, worker: &str, token: u64) -> Result<bool, StateError> {
        let s = self
            .shards
            .get(&shard_id)
            .ok_or(StateError::UnknownShard(shard_id))?;
        Ok(
            matches!(&s.status, Status::Leased { token: t, worker: w, .. } if *t == token && w == worker),
        )
    }

    /// Records a failed attempt; returns whether the shard will be retried.
    pub fn fail(
        &mut self,
        shard_id: u64,
        worker: &str,
        token: u64,
        reason: &str,
        retryable: bool,
    ) -> Result<FailOutcome, StateError> {
        if !self.holds(shard_id, worker, token)? {
            return Ok(FailOutcome::Stale);
        }
        let s = self
            .shards
            .get_mut(&shard_id)
            .ok_or(StateError::UnknownShard(shard_id))?;
        s.last_error = Some(reason.to_string());
        let retry = retryable && s.attempts < self.max_attempts;
        if retry {
            s.status = Status::Pending;
            self.pending.insert(shard_id);
        } else {
            s.status = Status::Failed {
                reason: format!("{reason} (attempt {} of {})", s.attempts, self.max_attempts),
            };
        }
        self.leased.remove(&shard_id);
        // A retry only re-queues the shard; a final failure must survive.
        self.persist(&[shard_id], !retry)?;
        Ok(if retry {
            FailOutcome::Retried
        } else {
            FailOutcome::Failed
        })
    }

    /// Takes back a shard its worker returns unfinished because it is
    /// stopping: pending again, and the attempt does not count towards
    /// `max_attempts` (a worker preempted again and again must not fail a
    /// shard). False if `token` no longer holds the shard.
    pub fn give_back(
        &mut self,
        shard_id: u64,
        worker: &str,
        token: u64,
    ) -> Result<bool, StateError> {
        if !self.holds(shard_id, worker, token)? {
            return Ok(false);
        }
        let s = self
            .shards
            .get_mut(&shard_id)
            .ok_or(StateError::UnknownShard(shard_id))?;
        s.attempts = s.attempts.saturating_sub(1);
        s.status = Status::Pending;
        self.pending.insert(shard_id);
        self.leased.remove(&shard_id);
        self.persist(&[shard_id], false)?;
        Ok(true)
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            total: self.shards.len() as u64,
            ..Default::default()
        };
        for s in self.shards.values() {
            c.lines_total += s.spec.range.lines;
            match &s.status {
                Status::Pending => c.pending += 1,
                Status::Leased { .. } => {
                    c.leased += 1;
                    c.pairs += s.progress_pairs;
                }
                Status::Committed {
                    pairs,
                    rejects,
                    rejects_by_reason,
                    ..
                } => {
                    c.committed += 1;
                    c.pairs += pairs;
                    c.rejects += rejects;
                    for (code, n) in rejects_by_reason {
                        *c.rejects_by_reason.entry(code.clone()).or_default() += n;
                    }
                    c.lines_done += s.spec.range.lines;
                }
                Status::Failed { .. } => c.failed += 1,
            }
        }
        c
    }

    pub fn finished(&self) -> bool {
        self.shards
            .values()
            .all(|s| matches!(s.status, Status::Committed { .. } | Status::Failed { .. }))
    }

    pub fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.shards.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paraforge_job::bitext::Range;

    fn plan(n: u64) -> Vec<ShardSpec> {
        (0..n)
            .map(|i| ShardSpec {
                shard_id: i,
                input: "in.tsv".into(),
                file_index: 0,
                range: Range::bytes(i * 100, (i + 1) * 100, i * 10 + 1, 10),
                drop_lines: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn states_written_before_range_still_resume() {
        let old = |start: u64, end: u64| -> ShardSpec {
            serde_json::from_str(&format!(
                r#"{{"shard_id":3,"input":"a.tsv","file_index":0,"byte_start":{start},"byte_end":{end},"first_line":11,"lines":5}}"#
            ))
            .unwrap()
        };
        assert_eq!(old(0, 0).range, Range::lines(11, 5));
        let s = old(100, 200);
        assert_eq!(s.range, Range::bytes(100, 200, 11, 5));
        let back: ShardSpec = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    fn file(name: &str) -> OutputFile {
        OutputFile {
            path: name.into(),
            rows: 10,
            bytes: 100,
            sha256: "00".into(),
            kind: FileKind::Pairs,
        }
    }

    #[test]
    fn a_stale_lease_cannot_commit_and_a_shard_commits_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = JobState::open(&dir.path().join("s.redb"), "job", 3, || plan(2)).unwrap();
        let a = st.lease("w1", 0, 1000).unwrap().unwrap();
        assert_eq!(a.spec.shard_id, 0);
        // w1 stalls past its deadline; the shard goes to w2.
        let b = st.lease("w2", 2000, 1000).unwrap().unwrap();
        assert_eq!(b.spec.shard_id, 0, "the expired shard is first in line");
        assert!(b.token > a.token);
        assert_eq!(b.attempt, 2);
        assert_eq!(
            st.complete(0, "w1", a.token, vec![file("a")], Tally::counts(10, 0))
                .unwrap(),
            Err(Refusal::Superseded)
        );
        assert_eq!(
            st.complete(0, "w2", b.token, vec![file("b")], Tally::counts(10, 0))
                .unwrap(),
            Ok(2000),
            "the commit names when its lease began"
        );
        assert_eq!(st.leases_expired(), 1, "w1's lease ran out");
        assert_eq!(
            st.complete(0, "w2", b.token, vec![file("b")], Tally::counts(10, 0))
                .unwrap(),
            Err(Refusal::AlreadyCommitted)
        );
        // Another worker holding a copied token cannot commit or fail it.
        let c = st.lease("w3", 2000, 1000).unwrap().unwrap();
        assert_eq!(
            st.complete(c.spec.shard_id, "w2", c.token, vec![], Tally::counts(1, 0))
                .unwrap(),
            Err(Refusal::NotHolder)
        );
        assert_eq!(
            st.fail(c.spec.shard_id, "w2", c.token, "x", true).unwrap(),
            FailOutcome::Stale
        );
        assert_eq!(
            st.complete(c.spec.shard_id, "w3", c.token, vec![], Tally::counts(1, 0))
                .unwrap(),
            Ok(2000)
        );
        // The stale holder's heartbeat is told to stop.
        let (ext, rev) = st.heartbeat("w1", &[(0, a.token, 5)], 2100, 1000).unwrap();
        assert!(ext.is_empty() && rev == vec![a.token]);
    }

    #[test]
    fn retries_are_bounded_and_a_failed_shard_does_not_stop_the_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = JobState::open(&dir.path().join("s.redb"), "job", 2, || plan(2)).unwrap();
        let l = st.lease("w", 0, 1000).unwrap().unwrap();
        assert_eq!(
            st.fail(l.spec.shard_id, "w", l.token, "disk full", true)
                .unwrap(),
            FailOutcome::Retried
        );
        let l = st.lease("w", 0, 1000).unwrap().unwrap();
        assert_eq!(l.spec.shard_id, 0);
        assert_eq!(
            st.fail(0, "w", l.token, "disk full", true).unwrap(),
            FailOutcome::Failed,
            "out of attempts"
        );
        let l = st.lease("w", 0, 1000).unwrap().unwrap();
        assert_eq!(l.spec.shard_id, 1);
        st.complete(1, "w", l.token, vec![], Tally::counts(10, 1))
            .unwrap()
            .unwrap();
        assert!(st.finished());
        let c = st.counts();
        assert_eq!((c.committed, c.failed, c.pairs, c.rejects), (1, 1, 10, 1));
        match &st.shards().next().unwrap().status {
            Status::Failed { reason } => assert!(reason.contains("disk full"), "{reason}"),
            s => panic!("{s:?}"),
        }
        // A non-retryable failure fails at once.
        let mut st = JobState::open(&dir.path().join("t.redb"), "job", 5, || plan(1)).unwrap();
        let l = st.lease("w", 0, 1000).unwrap().unwrap();
        assert_eq!(
            st.fail(0, "w", l.token, "corrupt input", false).unwrap(),
            FailOutcome::Failed
        );
    }

    #[test]
    fn a_restarted_coordinator_resumes_with_fresh_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let (old_token, leased_token);
        {
            let mut st = JobState::open(&path, "job", 3, || plan(3)).unwrap();
            let l = st.lease("w", 0, 1000).unwrap().unwrap();
            st.complete(
                l.spec.shard_id,
                "w",
                l.token,
                vec![file("x")],
                Tally::counts(10, 0),
            )
            .unwrap()
            .unwrap();
            old_token = l.token;
            leased_token = st.lease("w", 0, 1000).unwrap().unwrap().token;
        }
        let mut st = JobState::open(&path, "job", 3, || panic!("the plan is not redone")).unwrap();
        let c = st.counts();
        assert_eq!(
            (c.committed, c.pending, c.leased),
            (1, 2, 0),
            "the lease did not survive the restart"
        );
        let l = st.lease("w", 0, 1000).unwrap().unwrap();
        assert_eq!(l.spec.shard_id, 1);
        assert!(l.token > leased_token && leased_token > old_token);
        // The pre-restart lease of shard 1 is refused now.
        assert_eq!(
            st.complete(1, "w", leased_token, vec![], Tally::counts(1, 0))
                .unwrap(),
            Err(Refusal::Superseded)
        );
        // Another job's id on the same file is refused.
        drop(st);
        assert!(matches!(
            JobState::open(&path, "other", 3, Vec::new),
            Err(StateError::OtherJob { .. })
        ));
    }

    /// Cleanup's test of a file: the tokens each shard was given, recorded,
    /// not "below the counter" (which after a restart ran a whole reserved
    /// block past them: a rerun deleted two files it never wrote).
    #[test]
    fn only_tokens_handed_out_count_as_issued() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let l = {
            let mut st = JobState::open(&path, "job", 3, || plan(2)).unwrap();
            st.lease("w", 0, 1000).unwrap().unwrap()
        };
        let mut st = JobState::open(&path, "job", 3, || panic!("the plan is not redone")).unwrap();
        let next = st.lease("w", 0, 1000).unwrap().unwrap();
        assert!(next.token > l.token + 1, "a reserved block was skipped");
        let (s0, s1) = (l.spec.shard_id, next.spec.shard_id);
        assert!(st.issued(s0, l.token), "the lease before the restart");
        assert!(st.issued(s1, next.token));
        for t in l.token + 1..next.token {
            assert!(
                !st.issued(s0, t) && !st.issued(s1, t),
                "token {t} was never issued"
            );
        }
        assert_eq!(s0, s1, "the lost lease's shard is leased again first");
        assert!(!st.issued(1, l.token), "another shard's token");
        // A second coordinator of the same state is told so in words.
        let e = JobState::open(&path, "job", 3, || panic!("not planned"))
            .err()
            .unwrap();
        assert!(matches!(e, StateError::Busy { .. }), "{e}");
        assert!(e.to_string().contains("another coordinator"), "{e}");
    }
}
