//! What a job reads and how: the job config (every error names its key),
//! the bitext readers, the `[filters]` rules run before translation and
//! storage over object_store (local, `file://`, `s3://`, `gs://`).

pub mod bitext;
pub mod config;
pub mod filters;
pub mod limits;
pub mod model;
pub mod reject;
pub mod scoring;
pub mod storage;
