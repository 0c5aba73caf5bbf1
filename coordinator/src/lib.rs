//! The coordinator: plans shards, hands out leases with fencing tokens,
//! and keeps the job's state durable (`state`).

pub mod dedup;
pub mod http;
pub mod job;
pub mod metrics;
pub mod plan;
pub mod run;
pub mod service;
pub mod state;

pub use plan::{plan, PlanError};
pub use state::{JobState, Lease, Refusal, ShardSpec, StateError};
