//! What can go wrong serving a worker's request: one type for the worker
//! registry, the checks of leases and completions, and the handlers. Which
//! gRPC code each becomes, and so whether a worker retries, registers again
//! or gives up, is decided in one place, `service.rs`.

use paraforge_job::storage::StorageError;

use crate::shard::PlanError;
use crate::state::StateError;

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

/// What can stop a job's coordinator (planning, resuming, serving,
/// finalizing).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{what} {addr}: {message}")]
    Bind {
        what: &'static str,
        addr: String,
        message: String,
    },
    #[error("coordinator.state must be set for an object-store output ({0})")]
    NoStatePath(String),
    #[error(transparent)]
    Access(#[from] paraforge_rpc::access::AccessError),
    #[error("TLS ({cert}, {key}): {message}")]
    Tls {
        cert: String,
        key: String,
        message: String,
    },
    #[error("job output {0} is a file, not a directory: choose a directory (it is created if missing) or an object-store URL")]
    OutputNotDirectory(String),
    #[error("input {input} changed since the job was planned: {why}. The planned shards no longer match it (pairs would be lost or duplicated): restore the input, or start a new job (new output and state file)")]
    InputChanged { input: String, why: String },
    #[error("job state {state}: `{key}` was {was} when the job was planned and is {now} now; a resumed job must keep what decides its output: restore it, or start a new job (new output and state file)")]
    ConfigChanged {
        state: String,
        key: String,
        was: String,
        now: String,
    },
    #[error("job output {output} {why}: another job's output is never written over; choose another output, or delete it if it is no longer needed")]
    OutputClaimed { output: String, why: String },
    #[error("model.dir {dir}: its files changed since the job was planned (model digest {was}, now {now}): one corpus is translated by one model. Restore the model, or start a new job (new output and state file)")]
    ModelChanged {
        dir: String,
        was: String,
        now: String,
    },
    #[error("model.dir {dir}: {source}")]
    ModelUnreadable {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Incomplete(#[from] Incomplete),
}

/// A job that ended without all of its output: nothing is marked
/// successful, and running it again resumes it.
#[derive(Debug, thiserror::Error)]
#[error("job {job} is incomplete: {}; no _SUCCESS written. Run the same command again to retry what failed", .problems.join("; "))]
pub struct Incomplete {
    pub job: String,
    pub shards_total: u64,
    pub shards_committed: u64,
    pub problems: Vec<String>,
}
