//! The coordinator's shared state: the job state, the registered workers,
//! the job's settings a request needs, the output storage and the event
//! metrics, behind the gRPC service, the status page and `/metrics`; and
//! the job's status as all of them show it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paraforge_job::storage::{Storage, StorageError};
use paraforge_rpc::proto as pb;

use crate::bounded::{truncate, MAX_REASON_BYTES};
use crate::error::ServiceError;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::state::JobState;

/// Workers, and failed shards, that one status answer lists at most; the
/// totals count them all.
pub const STATUS_LIST_MAX: usize = 100;

/// Shared coordinator state behind the service and the status page.
pub struct Shared {
    pub state: Mutex<JobState>,
    /// Registered workers by id.
    pub workers: Registry,
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
    /// `model.dir`; none when the input holds its translations.
    pub model_dir: Option<String>,
    /// `[input]`'s format and files, for the manifest and the card.
    pub input: paraforge_core::layout::card::ManifestInput,
    /// The input format skips some lines without a record (CzEng 2.0's
    /// blank document separators): pairs + rejects may then fall short of
    /// the lines read. Otherwise every line read is a pair or a reject.
    pub skips_blank_lines: bool,
    pub heartbeat: Duration,
    pub started: std::time::Instant,
    /// Counted as things happen; `/metrics` adds what the state says.
    /// Shared with the pages (`live::Live`), which serve it before the
    /// state exists.
    pub metrics: std::sync::Arc<Metrics>,
    storage: OnceLock<Storage>,
}

impl Shared {
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
            workers: Registry::new(lease),
            config_toml,
            output,
            device,
            lease,
            max_reject_rate: 0.5,
            filters: Default::default(),
            beam_candidates: 1,
            model_dir: None,
            input: Default::default(),
            skips_blank_lines: false,
            heartbeat: (lease / 4).max(Duration::from_millis(100)),
            started: std::time::Instant::now(),
            metrics: std::sync::Arc::new(Metrics::new()),
            storage: OnceLock::new(),
        }
    }

    /// The job state, locked (a panic elsewhere while it was held does not
    /// stop the job).
    pub fn state(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The output storage, opened on first use.
    pub fn storage(&self) -> Result<&Storage, StorageError> {
        if let Some(s) = self.storage.get() {
            return Ok(s);
        }
        let s = Storage::open(&self.output)?;
        Ok(self.storage.get_or_init(|| s))
    }

    /// [`Shared::storage`] for a request: not opening it is a failure the
    /// worker retries.
    pub fn output_storage(&self) -> Result<&Storage, ServiceError> {
        self.storage().map_err(|e| ServiceError::Storage {
            path: self.output.clone(),
            message: e.to_string(),
        })
    }

    /// Workers heard from within a lease that have not been told `done`:
    /// a coordinator that stops before they ask again leaves them retrying
    /// a closed port until their connect attempts run out.
    pub fn awaiting_done(&self) -> usize {
        self.workers.awaiting_done(now_ms())
    }

    /// The job's status, for the RPC, the CLI and the HTTP status page. Its
    /// lists are capped at [`STATUS_LIST_MAX`] so the answer fits a message
    /// however many workers and failed shards there are.
    pub fn status(&self) -> pb::JobStatusResponse {
        let st = self.state();
        let c = st.counts();
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-3);
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
        let (workers, workers_total) = self.workers.status(now_ms(), STATUS_LIST_MAX, |id| {
            leases.get(id).copied().unwrap_or(0)
        });
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
            output_url: self.output.clone(),
            workers_total,
            rejects_by_reason: c.rejects_by_reason.into_iter().collect(),
        }
    }
}

/// [`Shared::status`], for callers that hold the state by reference.
pub fn status(shared: &Shared) -> pb::JobStatusResponse {
    shared.status()
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
