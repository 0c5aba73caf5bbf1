//! The gRPC face of the coordinator (`paraforge.v1.Coordinator`): a thin
//! layer that turns requests into [`JobState`] transitions. Errors are one
//! type, mapped to gRPC status codes in one place.
//!
//! Nothing a worker says is taken on trust: every call after registration
//! carries the secret the worker got then, and a completion counts only the
//! rows its files hold (read back and checked before they are published).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paraforge_core::layout::{FileKind, OutputLayout};
use paraforge_job::bitext::RejectReason;
use paraforge_rpc::proto::coordinator_server::Coordinator;
use paraforge_rpc::proto::{self as pb, lease_shard_response};
use tonic::{Request, Response, Status};

use crate::metrics::{check_figures, Metrics};
use crate::state::{FailOutcome, JobState, OutputFile, StateError, Tally};

/// Longest worker name accepted at registration, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest device string accepted at registration, in bytes.
pub const MAX_DEVICE_BYTES: usize = 64;
/// Longest failure reason kept (longer ones are cut): reasons are shown by
/// every status answer.
pub const MAX_REASON_BYTES: usize = 1024;
/// Workers, and failed shards, that one status answer lists at most; the
/// totals count them all.
pub const STATUS_LIST_MAX: usize = 100;
/// A worker not heard from for this many leases is forgotten: it holds no
/// lease any more (a lease expires after one) and would otherwise stay in
/// every status answer for good.
pub const EXPIRE_AFTER_LEASES: u32 = 3;

/// Everything that can go wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("unknown worker {0:?}: register first")]
    UnknownWorker(String),
    #[error("worker {0:?}: wrong or missing worker secret (the one RegisterWorker returned)")]
    WrongSecret(String),
    #[error("worker version {worker} does not match the coordinator's {coordinator}")]
    VersionMismatch { worker: String, coordinator: String },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("worker {worker:?} loaded a model with digest {worker_model}, the job's model has {job_model}: one corpus is translated by one model; start the worker with the job's model.dir, or --model-dir naming an exact copy of it")]
    ModelMismatch {
        worker: String,
        worker_model: String,
        job_model: String,
    },
    #[error("invalid request: {field} is {len} bytes; the limit is {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("no randomness for a worker secret: {0}")]
    Entropy(String),
    #[error("output storage {path}: {message}")]
    Storage { path: String, message: String },
    #[error(transparent)]
    State(#[from] StateError),
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let msg = e.to_string();
        match e {
            // NOT_FOUND means this and nothing else: workers register again
            // on it, so an unknown shard must not share the code.
            ServiceError::UnknownWorker(_) => Status::not_found(msg),
            ServiceError::WrongSecret(_) => Status::permission_denied(msg),
            ServiceError::VersionMismatch { .. } | ServiceError::ModelMismatch { .. } => {
                Status::failed_precondition(msg)
            }
            ServiceError::Invalid(_) | ServiceError::TooLong { .. } => {
                Status::invalid_argument(msg)
            }
            ServiceError::State(StateError::UnknownShard(_)) => Status::invalid_argument(msg),
            // Transient: the worker retries the call.
            ServiceError::Storage { .. } => Status::unavailable(msg),
            ServiceError::Entropy(_) | ServiceError::State(_) => Status::internal(msg),
        }
    }
}

/// A worker's secret; its `Debug` never shows it.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// 128 bits from the operating system's CSPRNG, as hex.
    fn generate() -> Result<Secret, ServiceError> {
        use rand::TryRngCore;
        let mut b = [0u8; 16];
        rand::rngs::OsRng
            .try_fill_bytes(&mut b)
            .map_err(|e| ServiceError::Entropy(e.to_string()))?;
        Ok(Secret(to_hex(&b)))
    }

    fn matches(&self, given: &str) -> bool {
        paraforge_rpc::access::ct_eq(given.as_bytes(), self.0.as_bytes())
    }
}

#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub id: String,
    pub name: String,
    pub device: String,
    pub last_seen_ms: u64,
    /// This worker has been answered `done` (it will stop on its own).
    pub told_done: bool,
    /// Its newest report of its own figures, for `/metrics`.
    pub figures: Option<pb::WorkerMetrics>,
    secret: Secret,
}

/// Shared coordinator state behind the service and the status page.
pub struct Shared {
    pub state: Mutex<JobState>,
    /// Registered workers by id.
    pub workers: Mutex<BTreeMap<String, WorkerInfo>>,
    pub config_toml: String,
    pub output: String,
    /// The job's `model.device`, shown for workers that do not name theirs.
    pub device: String,
    pub lease: Duration,
    /// `job.max_reject_rate`: a job that rejects more fails at its end.
    pub max_reject_rate: f64,
    /// `[filters]`: a job whose rules drop more than `max_drop_rate` of its
    /// lines fails at its end (`paraforge_job::filters::check_drop_rate`).
    pub filters: paraforge_job::filters::Filters,
    /// `model.beam_candidates`: rows per kept pair in every pairs file.
    pub beam_candidates: u64,
    /// The input format skips some lines without a record (CzEng 2.0's
    /// blank document separators): pairs + rejects may then fall short of
    /// the lines read. Otherwise every line read is a pair or a reject.
    pub skips_blank_lines: bool,
    pub heartbeat: Duration,
    pub started: std::time::Instant,
    /// Counted as things happen; `/metrics` adds what the state says.
    pub metrics: Metrics,
    storage: std::sync::OnceLock<paraforge_job::storage::Storage>,
    registered: AtomicU64,
}

impl Shared {
    fn mark_told_done(&self, worker: &str) {
        let mut ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = ws.get_mut(worker) {
            w.told_done = true;
        }
    }

    /// Workers heard from within a lease that have not been told `done`:
    /// a coordinator that stops before they ask again leaves them retrying
    /// a closed port until their connect attempts run out.
    pub fn awaiting_done(&self) -> usize {
        let cutoff = now_ms().saturating_sub(self.lease.as_millis() as u64);
        let ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        ws.values()
            .filter(|w| !w.told_done && w.last_seen_ms >= cutoff)
            .count()
    }

    /// Keeps `report` as `worker`'s figures if it is newer than the one
    /// held: a heartbeat and a completion can cross on the way.
    fn record_figures(&self, worker: &str, report: Option<pb::WorkerMetrics>) {
        let Some(report) = report else {
            return;
        };
        if let Err(e) = check_figures(&report) {
            tracing::warn!(worker, error = %e, "worker metrics ignored");
            return;
        }
        let mut ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = ws.get_mut(worker) {
            if w.figures
                .as_ref()
                .is_none_or(|old| old.uptime_ms <= report.uptime_ms)
            {
                w.figures = Some(report);
            }
        }
    }

    /// Last contact before which a worker is forgotten.
    fn expiry_cutoff(&self, now: u64) -> u64 {
        now.saturating_sub(self.lease.as_millis() as u64 * EXPIRE_AFTER_LEASES as u64)
    }

    /// Forgets the workers not heard from for [`EXPIRE_AFTER_LEASES`] leases.
    fn expire_workers(&self, ws: &mut BTreeMap<String, WorkerInfo>, now: u64) {
        let cutoff = self.expiry_cutoff(now);
        ws.retain(|id, w| {
            let keep = w.last_seen_ms >= cutoff;
            if !keep {
                tracing::info!(worker = %id, name = %w.name, "worker not heard from for {EXPIRE_AFTER_LEASES} leases; forgotten");
            }
            keep
        });
    }

    /// Heartbeats come four times per lease, so one lost heartbeat never
    /// costs a lease.
    pub fn new(
        state: JobState,
        config_toml: String,
        output: String,
        device: String,
        lease: Duration,
    ) -> Shared {
        Shared {
            state: Mutex::new(state),
            workers: Mutex::new(BTreeMap::new()),
            config_toml,
            output,
            device,
            lease,
            max_reject_rate: 0.5,
            filters: Default::default(),
            beam_candidates: 1,
            skips_blank_lines: false,
            heartbeat: (lease / 4).max(Duration::from_millis(100)),
            started: std::time::Instant::now(),
            metrics: Metrics::new(),
            storage: std::sync::OnceLock::new(),
            registered: AtomicU64::new(0),
        }
    }

    /// The output storage, opened on first use.
    pub fn storage(
        &self,
    ) -> Result<&paraforge_job::storage::Storage, paraforge_job::storage::StorageError> {
        if let Some(s) = self.storage.get() {
            return Ok(s);
        }
        let s = paraforge_job::storage::Storage::open(&self.output)?;
        Ok(self.storage.get_or_init(|| s))
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long an idle worker waits before asking for a shard again.
pub const RETRY_AFTER_MS: u32 = 1000;

/// A registration's name or device: bounded, and printable (it ends up in
/// logs and on terminals).
fn check_label(field: &'static str, value: &str, max: usize) -> Result<(), ServiceError> {
    if value.len() > max {
        return Err(ServiceError::TooLong {
            field,
            len: value.len(),
            max,
        });
    }
    if value.chars().any(char::is_control) {
        return Err(ServiceError::Invalid(format!(
            "{field} {value:?} has control characters"
        )));
    }
    Ok(())
}

fn to_hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// `s` cut to at most `max` bytes on a character boundary.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes cut)", &s[..end], s.len() - end)
}

/// Why a completion's files do not back what it claims.
#[derive(Debug, thiserror::Error)]
enum Mismatch {
    #[error("the completion names no {kind} file (expected {path})")]
    Missing { kind: FileKind, path: String },
    #[error("the completion names {path} twice")]
    Twice { path: String },
    #[error("{kind} file {path} is not in the output storage: {message}")]
    Absent {
        kind: FileKind,
        path: String,
        message: String,
    },
    #[error("{kind} file {path} has {actual} bytes, the completion claims {claimed}")]
    Bytes {
        kind: FileKind,
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("{kind} file {path} has SHA-256 {actual}, the completion claims {claimed:?}")]
    Sha {
        kind: FileKind,
        path: String,
        actual: String,
        claimed: String,
    },
    #[error("pairs file {path} is not a readable Parquet file: {message}")]
    Parquet { path: String, message: String },
    #[error("pairs file {path} has columns {found:?}, a paraforge output file has {expected:?}")]
    Columns {
        path: String,
        found: Vec<String>,
        expected: Vec<String>,
    },
    #[error("pairs file {path} has {actual} rows in its Parquet footer, the completion claims {claimed}")]
    Rows {
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("rejects file {path} has {actual} lines, the completion claims {claimed}")]
    Rejects {
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("rejects file {path} line {line}: {message}")]
    RejectLine {
        path: String,
        line: u64,
        message: String,
    },
    #[error("pairs file {path} was translated by model {found:?} (its footer's paraforge.model_sha256), the job's model is {job}")]
    Model {
        path: String,
        found: String,
        job: String,
    },
    #[error("pairs file {path} has {rows} rows, not a multiple of model.beam_candidates = {k} (every kept pair has that many)")]
    Candidates { path: String, rows: u64, k: u64 },
    #[error("the shard was planned as {planned} input lines from line {first_line}, the completion read {read}")]
    Lines {
        first_line: u64,
        planned: u64,
        read: u64,
    },
    #[error("the shard read {lines} input lines but its files account for {accounted} ({pairs} pairs and {rejects} rejects)")]
    Unaccounted {
        lines: u64,
        accounted: u64,
        pairs: u64,
        rejects: u64,
    },
    #[error("the completion's totals claim {pairs} pairs and {rejects} rejects, its files hold {rows} pairs and {lines} rejects")]
    Totals {
        pairs: u64,
        rejects: u64,
        rows: u64,
        lines: u64,
    },
}

/// One output file of a completion, read back from the temporary prefix.
struct Checked {
    temp: String,
    publish: String,
    kind: FileKind,
    bytes: bytes::Bytes,
    rows: u64,
    sha256: String,
    /// Rejects files: lines by reason code.
    by_reason: BTreeMap<String, u64>,
}

/// Counts a rejects file's lines by their `code`, which must be one a
/// worker writes ([`RejectReason::known_code`]): the counts become metric
/// labels, so no worker can invent them.
fn count_reasons(path: &str, bytes: &[u8]) -> Result<BTreeMap<String, u64>, Mismatch> {
    let mut by = BTreeMap::new();
    if bytes.is_empty() {
        return Ok(by);
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let bad = |message: String| Mismatch::RejectLine {
            path: path.to_string(),
            line: i as u64 + 1,
            message,
        };
        let v: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let code = v["code"]
            .as_str()
            .ok_or_else(|| bad("no \"code\"".into()))?;
        let known = RejectReason::known_code(code)
            .ok_or_else(|| bad(format!("unknown reason code {:?}", truncate(code, 40))))?;
        *by.entry(known.to_string()).or_default() += 1;
    }
    Ok(by)
}

/// Rows of a pairs file by its Parquet footer, which must describe a
/// paraforge output file, and the model digest the footer names.
fn parquet_rows(path: &str, bytes: &bytes::Bytes) -> Result<(u64, Option<String>), Mismatch> {
    let md = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(bytes)
        .map_err(|e| Mismatch::Parquet {
            path: path.into(),
            message: e.to_string(),
        })?;
    let found: Vec<String> = md
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let expected: Vec<String> = paraforge_core::schema::schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    if found != expected {
        return Err(Mismatch::Columns {
            path: path.into(),
            found,
            expected,
        });
    }
    let total = md.file_metadata().num_rows();
    let in_groups: i64 = md.row_groups().iter().map(|g| g.num_rows()).sum();
    if total < 0 || total != in_groups {
        return Err(Mismatch::Parquet {
            path: path.into(),
            message: format!("the footer says {total} rows, its row groups {in_groups}"),
        });
    }
    let model = md.file_metadata().key_value_metadata().and_then(|kv| {
        kv.iter()
            .find(|k| k.key == paraforge_core::schema::meta::MODEL_SHA256)
            .and_then(|k| k.value.clone())
    });
    Ok((total as u64, model))
}

/// Lines of a JSON-lines file (a last line without its newline counts).
fn line_count(b: &[u8]) -> u64 {
    let n = b.iter().filter(|&&c| c == b'\n').count() as u64;
    n + u64::from(b.last().is_some_and(|&c| c != b'\n'))
}

/// Checks one file's bytes against what the worker claims for it.
fn check_file(
    claimed: &pb::OutputFile,
    kind: FileKind,
    bytes: &bytes::Bytes,
    job_model: Option<&str>,
) -> Result<(u64, String, BTreeMap<String, u64>), Mismatch> {
    use sha2::Digest;
    let path = claimed.path.clone();
    if bytes.len() as u64 != claimed.bytes {
        return Err(Mismatch::Bytes {
            kind,
            path,
            actual: bytes.len() as u64,
            claimed: claimed.bytes,
        });
    }
    let sha = to_hex(&sha2::Sha256::digest(bytes));
    if !sha.eq_ignore_ascii_case(&claimed.sha256) {
        return Err(Mismatch::Sha {
            kind,
            path,
            actual: sha,
            claimed: truncate(&claimed.sha256, 80),
        });
    }
    let rows = if kind == FileKind::Pairs {
        let (rows, model) = parquet_rows(&path, bytes)?;
        if let Some(job) = job_model {
            if model.as_deref() != Some(job) {
                return Err(Mismatch::Model {
                    path,
                    found: truncate(model.as_deref().unwrap_or("none"), 80),
                    job: job.to_string(),
                });
            }
        }
        rows
    } else {
        line_count(bytes)
    };
    if rows != claimed.rows {
        return Err(if kind == FileKind::Pairs {
            Mismatch::Rows {
                path,
                actual: rows,
                claimed: claimed.rows,
            }
        } else {
            Mismatch::Rejects {
                path,
                actual: rows,
                claimed: claimed.rows,
            }
        });
    }
    let by_reason = if kind == FileKind::Rejects {
        count_reasons(&path, bytes)?
    } else {
        BTreeMap::new()
    };
    Ok((rows, sha, by_reason))
}

/// The job's model digest, which `worker`'s must equal: fixed by the
/// first worker to ask when planning could not read the model.
fn check_model(st: &mut JobState, worker: &str, theirs: &str) -> Result<String, ServiceError> {
    if theirs.len() != 64 || !theirs.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ServiceError::Invalid(format!(
            "model_sha256 {:?} is not a SHA-256 digest (a worker of another version?)",
            truncate(theirs, 80)
        )));
    }
    match st.model_sha256() {
        Some(job) if job.eq_ignore_ascii_case(theirs) => Ok(job.to_string()),
        Some(job) => {
            tracing::warn!(worker, worker_model = %theirs, job_model = %job, "lease refused: the worker has another model");
            Err(ServiceError::ModelMismatch {
                worker: worker.to_string(),
                worker_model: theirs.to_string(),
                job_model: job.to_string(),
            })
        }
        None => {
            tracing::info!(worker, model = %theirs, "the job's model digest is fixed by the first worker (the coordinator could not read model.dir)");
            st.set_model_sha256(theirs)?;
            Ok(theirs.to_string())
        }
    }
}

/// The tonic service.
#[derive(Clone)]
pub struct CoordinatorService {
    shared: Arc<Shared>,
}

impl CoordinatorService {
    pub fn new(shared: Arc<Shared>) -> CoordinatorService {
        CoordinatorService { shared }
    }

    /// The caller is `worker` only with its secret; a worker silent for too
    /// long is forgotten here too, not only when the status is asked.
    fn authenticate(&self, worker: &str, secret: &str) -> Result<(), ServiceError> {
        let now = now_ms();
        let cutoff = self.shared.expiry_cutoff(now);
        let mut ws = self
            .shared
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match ws.get_mut(worker) {
            Some(w) if w.last_seen_ms < cutoff => {
                ws.remove(worker);
                tracing::info!(
                    worker,
                    "worker not heard from for {EXPIRE_AFTER_LEASES} leases; forgotten"
                );
                Err(ServiceError::UnknownWorker(worker.to_string()))
            }
            Some(w) if w.secret.matches(secret) => {
                w.last_seen_ms = now;
                Ok(())
            }
            Some(_) => {
                tracing::warn!(worker, "request refused: wrong worker secret");
                Err(ServiceError::WrongSecret(worker.to_string()))
            }
            None => Err(ServiceError::UnknownWorker(worker.to_string())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads a completion's two files back and checks them against its
    /// claims. `Ok(Err(_))` is a completion its files do not back;
    /// `Err(_)` a storage failure the worker should retry.
    async fn check_completion(
        &self,
        r: &pb::CompleteShardRequest,
    ) -> Result<Result<Vec<Checked>, Mismatch>, ServiceError> {
        let storage = self.shared.storage().map_err(|e| ServiceError::Storage {
            path: self.shared.output.clone(),
            message: e.to_string(),
        })?;
        let wanted = [FileKind::Pairs, FileKind::Rejects].map(|kind| {
            (
                kind,
                OutputLayout::temp(kind, r.shard_id, r.lease_token),
                OutputLayout::committed(kind, r.shard_id, r.lease_token),
            )
        });
        let mut checked = Vec::with_capacity(2);
        for (kind, temp, publish) in wanted {
            let mut named = r.files.iter().filter(|f| f.path == temp);
            let Some(claimed) = named.next() else {
                return Ok(Err(Mismatch::Missing { kind, path: temp }));
            };
            if named.next().is_some() {
                return Ok(Err(Mismatch::Twice { path: temp }));
            }
            let bytes = match storage.get(&temp).await {
                Ok(b) => b,
                Err(e) if storage_not_found(&e) => {
                    return Ok(Err(Mismatch::Absent {
                        kind,
                        path: temp,
                        message: e.to_string(),
                    }))
                }
                Err(e) => {
                    return Err(ServiceError::Storage {
                        path: temp,
                        message: e.to_string(),
                    })
                }
            };
            // Hashing and parsing a shard's file is CPU work.
            let (claimed, b) = (claimed.clone(), bytes.clone());
            let job_model = self.state().model_sha256().map(str::to_string);
            let verdict = tokio::task::spawn_blocking(move || {
                check_file(&claimed, kind, &b, job_model.as_deref())
            })
            .await
            .map_err(|e| ServiceError::Invalid(format!("checking {temp}: {e}")))?;
            let (rows, sha256, by_reason) = match verdict {
                Ok(v) => v,
                Err(m) => return Ok(Err(m)),
            };
            checked.push(Checked {
                temp,
                publish,
                kind,
                bytes,
                rows,
                sha256,
                by_reason,
            });
        }
        let totals = r.totals.unwrap_or_default();
        let (rows, lines) = (checked[0].rows, checked[1].rows);
        if totals.pairs_written != rows || totals.rejects != lines {
            return Ok(Err(Mismatch::Totals {
                pairs: totals.pairs_written,
                rejects: totals.rejects,
                rows,
                lines,
            }));
        }
        let k = self.shared.beam_candidates.max(1);
        if rows % k != 0 {
            return Ok(Err(Mismatch::Candidates {
                path: checked[0].temp.clone(),
                rows,
                k,
            }));
        }
        // Every planned line must have been read and be a pair or a reject:
        // an input that shrank under the job, or a reader that stopped
        // early, must not commit a short shard.
        let planned = self
            .state()
            .shards()
            .find(|s| s.spec.shard_id == r.shard_id)
            .map(|s| s.spec.range);
        if let Some(range) = planned {
            if totals.lines_read != range.lines {
                return Ok(Err(Mismatch::Lines {
                    first_line: range.first_line,
                    planned: range.lines,
                    read: totals.lines_read,
                }));
            }
            let accounted = rows / k + lines;
            let short = if self.shared.skips_blank_lines {
                accounted > totals.lines_read
            } else {
                accounted != totals.lines_read
            };
            if short {
                return Ok(Err(Mismatch::Unaccounted {
                    lines: totals.lines_read,
                    accounted,
                    pairs: rows / k,
                    rejects: lines,
                }));
            }
        }
        Ok(Ok(checked))
    }
}

fn storage_not_found(e: &paraforge_job::storage::StorageError) -> bool {
    matches!(e, paraforge_job::storage::StorageError::Op { source, .. }
        if matches!(**source, object_store::Error::NotFound { .. }))
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let _t = self.shared.metrics.rpc("RegisterWorker");
        let r = req.into_inner();
        let mine = env!("CARGO_PKG_VERSION");
        if r.version != mine {
            return Err(ServiceError::VersionMismatch {
                worker: truncate(&r.version, 64),
                coordinator: mine.into(),
            }
            .into());
        }
        check_label("worker name", &r.name, MAX_NAME_BYTES)?;
        check_label("device", &r.device, MAX_DEVICE_BYTES)?;
        let secret = Secret::generate()?;
        // The random part keeps ids apart across coordinator restarts, so a
        // worker registered before one never holds an id that a later
        // registration reuses.
        let salt = {
            use rand::TryRngCore;
            rand::rngs::OsRng
                .try_next_u32()
                .map_err(|e| ServiceError::Entropy(e.to_string()))?
        };
        let n = self.shared.registered.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("w{n}-{salt:08x}");
        let now = now_ms();
        {
            let mut ws = self
                .shared
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.shared.expire_workers(&mut ws, now);
            ws.insert(
                id.clone(),
                WorkerInfo {
                    id: id.clone(),
                    name: r.name.clone(),
                    device: if r.device.is_empty() {
                        self.shared.device.clone()
                    } else {
                        r.device
                    },
                    last_seen_ms: now,
                    told_done: false,
                    figures: None,
                    secret: secret.clone(),
                },
            );
        }
        tracing::info!(worker = %id, name = %r.name, "worker registered");
        // One lock for both: a second guard in the same expression would
        // wait on the first.
        let (job_id, model_sha256) = {
            let st = self.state();
            (
                st.job_id().to_string(),
                st.model_sha256().unwrap_or_default().to_string(),
            )
        };
        Ok(Response::new(pb::RegisterWorkerResponse {
            worker_id: id,
            job_id,
            config_toml: self.shared.config_toml.clone(),
            heartbeat_interval_ms: self.shared.heartbeat.as_millis() as u32,
            worker_secret: secret.0,
            model_sha256,
        }))
    }

    async fn lease_shard(
        &self,
        req: Request<pb::LeaseShardRequest>,
    ) -> Result<Response<pb::LeaseShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("LeaseShard");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        let mut st = self.state();
        let job_model = check_model(&mut st, &r.worker_id, &r.model_sha256)?;
        let lease = st
            .lease(&r.worker_id, now_ms(), self.shared.lease.as_millis() as u64)
            .map_err(ServiceError::from)?;
        let result = match lease {
            Some(l) => {
                tracing::info!(worker = %r.worker_id, shard = l.spec.shard_id, token = l.token, attempt = l.attempt, "shard leased");
                lease_shard_response::Result::Lease(pb::Lease {
                    shard: Some(crate::plan::wire_spec(&l.spec)),
                    lease_token: l.token,
                    attempt: l.attempt,
                    model_sha256: job_model,
                })
            }
            None if st.finished() => {
                drop(st);
                self.shared.mark_told_done(&r.worker_id);
                lease_shard_response::Result::Done(true)
            }
            None => lease_shard_response::Result::RetryAfterMs(RETRY_AFTER_MS),
        };
        Ok(Response::new(pb::LeaseShardResponse {
            result: Some(result),
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let _t = self.shared.metrics.rpc("Heartbeat");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        self.shared.record_figures(&r.worker_id, r.metrics);
        let leases: Vec<(u64, u64, u64)> = r
            .leases
            .iter()
            .map(|l| {
                (
                    l.shard_id,
                    l.lease_token,
                    l.progress.as_ref().map_or(0, |p| p.pairs_written),
                )
            })
            .collect();
        let lease_ms = self.shared.lease.as_millis() as u64;
        let now = now_ms();
        let (_extended, revoked) = self
            .state()
            .heartbeat(&r.worker_id, &leases, now, lease_ms)
            .map_err(ServiceError::from)?;
        Ok(Response::new(pb::HeartbeatResponse {
            revoked_tokens: revoked,
        }))
    }

    async fn complete_shard(
        &self,
        req: Request<pb::CompleteShardRequest>,
    ) -> Result<Response<pb::CompleteShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("CompleteShard");
        let mut r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        // The worker's figures count whatever becomes of the completion.
        self.shared.record_figures(&r.worker_id, r.metrics.take());
        let totals = r.totals.unwrap_or_default();
        // A worker may only name this lease's own two temporary files:
        // nothing can point the manifest (or the clean-up) elsewhere.
        let allowed = [
            OutputLayout::temp_part_path(r.shard_id, r.lease_token),
            OutputLayout::temp_rejects_path(r.shard_id, r.lease_token),
        ];
        if let Some(f) = r.files.iter().find(|f| !allowed.contains(&f.path)) {
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, path = %truncate(&f.path, 200), "completion names a foreign output path");
            return Err(ServiceError::Invalid(format!(
                "output path {:?} is not this lease's (expected {} or {})",
                truncate(&f.path, 200),
                allowed[0],
                allowed[1]
            ))
            .into());
        }
        let refused = |reason: String| {
            Ok(Response::new(pb::CompleteShardResponse {
                accepted: false,
                reason,
            }))
        };
        if let Err(refusal) = self
            .state()
            .check_holder(r.shard_id, &r.worker_id, r.lease_token)
        {
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
            self.shared.metrics.refused(refusal.code());
            return refused(refusal.to_string());
        }
        // The files must hold what the completion claims, or the manifest
        // would count pairs that do not exist. A mismatch fails this
        // attempt (the shard is leased again) and commits nothing.
        let files = match self.check_completion(&r).await? {
            Ok(files) => files,
            Err(mismatch) => {
                let reason = format!("output does not match the completion: {mismatch}");
                let will_retry = self
                    .state()
                    .fail(r.shard_id, &r.worker_id, r.lease_token, &reason, true)
                    .map_err(ServiceError::from)?
                    == FailOutcome::Retried;
                tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %reason, will_retry, "completion refused; attempt failed");
                self.shared.metrics.refused("mismatch");
                return refused(format!(
                    "{reason}; attempt failed{}",
                    if will_retry {
                        ", shard will be retried"
                    } else {
                        ""
                    }
                ));
            }
        };
        // Publish before recording the commit: the final names appear only
        // for a lease that holds now. Should the commit then be refused (the
        // lease expired during the copy) or the coordinator die first, the
        // copies are files of an uncommitted attempt, which the job's end
        // deletes. The bytes published are the ones just checked, not a
        // server-side copy of a temporary file that may have changed since.
        let storage = self.shared.storage().map_err(|e| ServiceError::Storage {
            path: self.shared.output.clone(),
            message: e.to_string(),
        })?;
        let mut committed = Vec::with_capacity(files.len());
        let mut by_reason = BTreeMap::new();
        for f in files {
            by_reason.extend(f.by_reason);
            let len = f.bytes.len() as u64;
            storage
                .put(&f.publish, f.bytes)
                .await
                .map_err(|e| ServiceError::Storage {
                    path: f.publish.clone(),
                    message: format!("publishing {}: {e}", f.temp),
                })?;
            committed.push(OutputFile {
                path: f.publish,
                rows: f.rows,
                bytes: len,
                sha256: f.sha256,
                kind: f.kind,
            });
        }
        let outcome = self
            .state()
            .complete(
                r.shard_id,
                &r.worker_id,
                r.lease_token,
                committed,
                Tally {
                    pairs: totals.pairs_written,
                    rejects: totals.rejects,
                    rejects_by_reason: by_reason,
                },
            )
            .map_err(ServiceError::from)?;
        if outcome.is_ok() {
            for p in &allowed {
                if let Err(e) = storage.delete(p).await {
                    tracing::warn!(path = %p, error = %e, "could not remove a published temporary file");
                }
            }
        }
        Ok(Response::new(match outcome {
            Ok(leased_ms) => {
                self.shared
                    .metrics
                    .committed(totals.pairs_written, leased_ms, now_ms());
                tracing::info!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, pairs = totals.pairs_written, "shard committed");
                pb::CompleteShardResponse {
                    accepted: true,
                    reason: String::new(),
                }
            }
            Err(refusal) => {
                tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
                self.shared.metrics.refused(refusal.code());
                pb::CompleteShardResponse {
                    accepted: false,
                    reason: refusal.to_string(),
                }
            }
        }))
    }

    async fn fail_shard(
        &self,
        req: Request<pb::FailShardRequest>,
    ) -> Result<Response<pb::FailShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("FailShard");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        if r.reason.trim().is_empty() {
            return Err(ServiceError::Invalid("a failure needs a reason".into()).into());
        }
        let reason = truncate(&r.reason, MAX_REASON_BYTES);
        let outcome = self
            .state()
            .fail(
                r.shard_id,
                &r.worker_id,
                r.lease_token,
                &reason,
                r.retryable,
            )
            .map_err(ServiceError::from)?;
        match outcome {
            FailOutcome::Retried => {
                tracing::warn!(worker = %r.worker_id, shard = r.shard_id, %reason, "shard attempt failed; it will be retried")
            }
            FailOutcome::Failed => {
                tracing::error!(worker = %r.worker_id, shard = r.shard_id, %reason, "shard failed for good")
            }
            FailOutcome::Stale => {
                tracing::info!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %reason, "failure of a lease no longer held; ignored")
            }
        }
        Ok(Response::new(pb::FailShardResponse {
            will_retry: outcome == FailOutcome::Retried,
        }))
    }

    async fn job_status(
        &self,
        _req: Request<pb::JobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        let _t = self.shared.metrics.rpc("JobStatus");
        Ok(Response::new(status(&self.shared)))
    }
}

/// The job's status, for the RPC, the CLI and the HTTP status page. Its
/// lists are capped at [`STATUS_LIST_MAX`] so the answer fits a message
/// however many workers and failed shards there are.
pub fn status(shared: &Shared) -> pb::JobStatusResponse {
    let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    let c = st.counts();
    let elapsed = shared.started.elapsed().as_secs_f64().max(1e-3);
    let rate = c.pairs as f64 / elapsed;
    let left_lines = c.lines_total.saturating_sub(c.lines_done) as f64;
    let line_rate = c.lines_done as f64 / elapsed;
    let eta = if line_rate > 0.0 {
        left_lines / line_rate
    } else {
        -1.0
    };
    let failed = st
        .shards()
        .filter_map(|s| match &s.status {
            crate::state::Status::Failed { reason } => Some(pb::FailedShard {
                shard_id: s.spec.shard_id,
                reason: truncate(reason, MAX_REASON_BYTES),
                attempts: s.attempts,
            }),
            _ => None,
        })
        .take(STATUS_LIST_MAX)
        .collect();
    let mut leases: HashMap<&str, u32> = HashMap::new();
    for s in st.shards() {
        if let crate::state::Status::Leased { worker, .. } = &s.status {
            *leases.entry(worker.as_str()).or_default() += 1;
        }
    }
    let mut ws = shared.workers.lock().unwrap_or_else(|p| p.into_inner());
    shared.expire_workers(&mut ws, now_ms());
    let mut recent: Vec<&WorkerInfo> = ws.values().collect();
    recent.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.id.cmp(&b.id)));
    let workers = recent
        .into_iter()
        .take(STATUS_LIST_MAX)
        .map(|w| pb::WorkerStatus {
            worker_id: w.id.clone(),
            name: w.name.clone(),
            device: w.device.clone(),
            leases: leases.get(w.id.as_str()).copied().unwrap_or(0),
            last_heartbeat_unix_ms: w.last_seen_ms,
        })
        .collect();
    pb::JobStatusResponse {
        job_id: st.job_id().to_string(),
        shards_total: c.total,
        shards_committed: c.committed,
        shards_leased: c.leased,
        shards_pending: c.pending,
        shards_failed: c.failed,
        pairs_written: c.pairs,
        rejects: c.rejects,
        pairs_per_second: rate,
        eta_seconds: eta,
        finished: st.finished(),
        workers,
        failed,
        output_url: shared.output.clone(),
        workers_total: ws.len() as u64,
        rejects_by_reason: c.rejects_by_reason.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ShardSpec;
    use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
    use paraforge_rpc::proto::coordinator_server::CoordinatorServer;

    async fn serve(dir: &std::path::Path) -> (String, tokio::task::JoinHandle<()>, Arc<Shared>) {
        let state = JobState::open(&dir.join("s.redb"), "job", 3, || {
            (0..2)
                .map(|i| ShardSpec {
                    shard_id: i,
                    input: "in.tsv".into(),
                    file_index: 0,
                    range: paraforge_job::bitext::Range::bytes(i * 10, (i + 1) * 10, i * 5 + 1, 5),
                    drop_lines: Vec::new(),
                })
                .collect()
        })
        .unwrap();
        let shared = Arc::new(Shared::new(
            state,
            "[job]".into(),
            dir.join("out").display().to_string(),
            "cpu".into(),
            Duration::from_secs(30),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = CoordinatorServer::new(CoordinatorService::new(shared.clone()));
        let h = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        (format!("http://{addr}"), h, shared)
    }

    /// One LeaseShard call's answer for `worker`.
    async fn lease(
        c: &mut CoordinatorClient<tonic::transport::Channel>,
        worker: &pb::RegisterWorkerResponse,
    ) -> Option<lease_shard_response::Result> {
        c.lease_shard(pb::LeaseShardRequest {
            worker_id: worker.worker_id.clone(),
            worker_secret: worker.worker_secret.clone(),
            model_sha256: "ab".repeat(32),
        })
        .await
        .unwrap()
        .into_inner()
        .result
    }

    /// Writes an attempt's two files (`pairs` rows, no rejects) where a
    /// worker would, and describes them truthfully.
    async fn attempt_files(
        shared: &Shared,
        shard: u64,
        token: u64,
        pairs: usize,
    ) -> Vec<pb::OutputFile> {
        use paraforge_core::{PairRow, RowsBuilder, Scorer};
        use sha2::Digest;
        let mut b = RowsBuilder::default();
        let mut scorer = Scorer::new(None);
        for i in 0..pairs {
            b.push(&PairRow {
                id: format!("p{i}"),
                source: "s".into(),
                reference: "a b".into(),
                translation: "a c".into(),
                candidate_rank: 1,
                translation_score: -1.0,
                source_len: 1,
                truncated: false,
                scores: scorer.score("a b", "a c"),
            });
        }
        let mut pq = Vec::new();
        // Translated by the model the tests' leases name.
        let props = parquet::file::properties::WriterProperties::builder()
            .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
                paraforge_core::schema::meta::MODEL_SHA256.to_string(),
                "ab".repeat(32),
            )]))
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            &mut pq,
            paraforge_core::schema::schema(),
            Some(props),
        )
        .unwrap();
        w.write(&b.finish()).unwrap();
        w.close().unwrap();
        let storage = shared.storage().unwrap();
        let mut files = Vec::new();
        for (path, bytes, rows) in [
            (OutputLayout::temp_part_path(shard, token), pq, pairs as u64),
            (OutputLayout::temp_rejects_path(shard, token), Vec::new(), 0),
        ] {
            files.push(pb::OutputFile {
                path: path.clone(),
                rows,
                bytes: bytes.len() as u64,
                sha256: to_hex(&sha2::Sha256::digest(&bytes)),
            });
            storage.put(&path, bytes.into()).await.unwrap();
        }
        files
    }

    /// A worker's figures after `n` one-batch, ten-sentence steps.
    fn figures(n: u64) -> pb::WorkerMetrics {
        let mut batch_buckets = vec![0; paraforge_rpc::proto::BATCH_SECONDS_BOUNDS.len() + 1];
        batch_buckets[3] = n;
        pb::WorkerMetrics {
            uptime_ms: n,
            sentences: n * 10,
            source_tokens: n * 100,
            output_tokens: n * 120,
            batches: n,
            batch_seconds: n as f64 * 0.07,
            batch_buckets,
        }
    }

    #[tokio::test]
    async fn leases_and_commits_over_loopback_grpc() {
        let dir = tempfile::tempdir().unwrap();
        let (url, server, shared) = serve(dir.path()).await;
        let mut c = CoordinatorClient::connect(url).await.unwrap();
        // An unregistered worker is refused with NOT_FOUND.
        let e = c
            .lease_shard(pb::LeaseShardRequest {
                worker_id: "nobody".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        // A name past the limit is INVALID_ARGUMENT naming it.
        let e = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "n".repeat(MAX_NAME_BYTES + 1),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("128"), "{}", e.message());
        // A version mismatch is FAILED_PRECONDITION.
        let e = c
            .register_worker(pb::RegisterWorkerRequest {
                version: "0.0.0-other".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        let reg = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "t".into(),
                device: String::new(),
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .await
            .unwrap()
            .into_inner();
        let w = reg.worker_id.clone();
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let r = lease(&mut c, &reg).await;
            let Some(lease_shard_response::Result::Lease(l)) = r else {
                panic!("{r:?}")
            };
            tokens.push((l.shard.unwrap().shard_id, l.lease_token));
        }
        // Both shards are out: the third request waits.
        let r = lease(&mut c, &reg).await;
        assert!(matches!(
            r,
            Some(lease_shard_response::Result::RetryAfterMs(_))
        ));
        let s = c
            .job_status(pb::JobStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (s.workers.len(), s.workers[0].leases),
            (1, 2),
            "both leases are this worker's"
        );
        assert_eq!(
            s.workers[0].device, "cpu",
            "the job's device fills in an unnamed one"
        );
        // Output paths outside this lease's two files are refused.
        let (s0, t0) = tokens[0];
        for bad in [
            "../../etc/passwd",
            "shard=000000/part-t99999999.parquet",
            "/abs.parquet",
        ] {
            let e = c
                .complete_shard(pb::CompleteShardRequest {
                    worker_id: w.clone(),
                    worker_secret: reg.worker_secret.clone(),
                    shard_id: s0,
                    lease_token: t0,
                    files: vec![pb::OutputFile {
                        path: bad.into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.message().contains(bad), "{}", e.message());
        }
        // Another worker, even with the right token, cannot complete or
        // heartbeat a shard it does not hold.
        let other_reg = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "u".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let other = other_reg.worker_id.clone();
        let r = c
            .complete_shard(pb::CompleteShardRequest {
                worker_id: other.clone(),
                worker_secret: other_reg.worker_secret.clone(),
                shard_id: s0,
                lease_token: t0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !r.accepted && r.reason.contains("another worker"),
            "{}",
            r.reason
        );
        let hb = c
            .heartbeat(pb::HeartbeatRequest {
                worker_id: other.clone(),
                worker_secret: other_reg.worker_secret.clone(),
                leases: vec![pb::LeaseProgress {
                    shard_id: s0,
                    lease_token: t0,
                    ..Default::default()
                }],
                metrics: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(hb.revoked_tokens, [t0]);
        for (shard, token) in &tokens {
            let ok = c
                .complete_shard(pb::CompleteShardRequest {
                    worker_id: w.clone(),
                    worker_secret: reg.worker_secret.clone(),
                    shard_id: *shard,
                    lease_token: *token,
                    files: attempt_files(&shared, *shard, *token, 5).await,
                    totals: Some(pb::Progress {
                        pairs_written: 5,
                        rejects: 0,
                        lines_read: 5,
                    }),
                    metrics: Some(figures(*token)),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(ok.accepted, "{}", ok.reason);
        }
        // A repeated completion is refused, with the reason.
        let again = c
            .complete_shard(pb::CompleteShardRequest {
                worker_id: w.clone(),
                worker_secret: reg.worker_secret.clone(),
                shard_id: tokens[0].0,
                lease_token: tokens[0].1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!again.accepted && again.reason.contains("already committed"));
        // The page shows the newest figures this worker sent, under its id
        // and the job's device, beside the counts of what happened.
        let page = crate::metrics::render(&shared).unwrap();
        let last = tokens.iter().map(|t| t.1).max().unwrap();
        for want in [
            format!("paraforge_worker_sentences_total{{worker=\"{w}\",device=\"cpu\"}} {}", last * 10),
            format!("paraforge_worker_batch_duration_seconds_count{{worker=\"{w}\",device=\"cpu\"}} {last}"),
            "paraforge_shard_duration_seconds_count 2".to_string(),
            "paraforge_pairs_committed_total 10".to_string(),
            "paraforge_completions_refused_total{reason=\"already_committed\"} 1".to_string(),
            "paraforge_completions_refused_total{reason=\"not_holder\"} 1".to_string(),
            "paraforge_rpc_duration_seconds_count{method=\"CompleteShard\"}".to_string(),
        ] {
            assert!(page.contains(&want), "{want} missing:\n{page}");
        }
        assert!(page.ends_with("# EOF\n"));
        let r = lease(&mut c, &reg).await;
        assert!(matches!(r, Some(lease_shard_response::Result::Done(true))));
        // The other worker has not asked since: a coordinator must keep
        // serving until it has been told, too.
        assert_eq!(shared.awaiting_done(), 1);
        let r = lease(&mut c, &other_reg).await;
        assert!(matches!(r, Some(lease_shard_response::Result::Done(true))));
        assert_eq!(shared.awaiting_done(), 0);
        let s = c
            .job_status(pb::JobStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (s.shards_committed, s.pairs_written, s.finished),
            (2, 10, true)
        );
        // Published under final names, with the checked bytes.
        let storage = shared.storage().unwrap();
        for (shard, token) in &tokens {
            assert!(storage
                .exists(&OutputLayout::part_path(*shard, *token))
                .await
                .unwrap());
            assert!(!storage
                .exists(&OutputLayout::temp_part_path(*shard, *token))
                .await
                .unwrap());
        }
        server.abort();
    }

    #[test]
    fn reasons_are_cut_on_a_character_boundary_and_lines_counted() {
        let long = "é".repeat(1000);
        let cut = truncate(&long, 101);
        assert!(
            cut.starts_with(&"é".repeat(50)) && cut.ends_with("(1900 bytes cut)"),
            "{cut}"
        );
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(
            (line_count(b""), line_count(b"a\n"), line_count(b"a\nb")),
            (0, 1, 2)
        );
        assert!(check_label("device", "cuda:0", MAX_DEVICE_BYTES).is_ok());
        assert!(check_label("device", "cuda\n0", MAX_DEVICE_BYTES).is_err());
    }
}
