//! The coordinator: plans shards, hands out leases with fencing tokens,
//! and keeps the job's state durable (`state`).

pub mod state;

pub use state::{JobState, Lease, Refusal, ShardSpec, StateError};
