//! The coordinator protocol (`proto/paraforge.proto`) and who may use it:
//! the gRPC messages and services, TLS and token access.

pub mod access;
pub mod proto;
