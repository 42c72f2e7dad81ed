//! What the Redis tests share with those of the Redis store (`crates/tollgate-redis/tests`): one
//! server and one cluster per test binary, fresh key prefixes, the workloads' keys and the
//! runner of the differential tests, kept in one file there.

#![allow(unreachable_pub)]

#[path = "../../../tollgate-redis/tests/common/shared.rs"]
mod shared;

pub use shared::*;
