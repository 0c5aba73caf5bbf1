//! The coordinator: plans shards, hands out leases with fencing tokens,
//! and keeps the job's state durable (`state`).

pub mod bootstrap;
pub mod bounded;
pub mod commit;
pub mod dedup;
pub mod error;
pub mod finalize;
pub mod http;
pub mod job;
pub mod languages;
pub mod live;
pub mod metrics;
pub mod phase;
pub mod plan;
pub mod registry;
pub mod resume;
pub mod run;
pub mod service;
pub mod shard;
pub mod shared;
pub mod state;
pub mod verify;

pub use plan::{plan, PlanError};
pub use state::{JobState, Lease, Refusal, ShardSpec, StateError};
