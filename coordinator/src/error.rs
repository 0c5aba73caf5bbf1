//! What can go wrong serving a worker's request: one type for the worker
//! registry, the checks of leases and completions, and the handlers. Which
//! gRPC code each becomes, and so whether a worker retries, registers again
//! or gives up, is decided in one place, `service.rs`.

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
