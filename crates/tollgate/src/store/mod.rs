//! Stores: where the state of every (key, limit) lives. The `Store` trait, its errors and the
//! memory store come from `tollgate-core`; the Redis stores and the store chosen at run time
//! live here.

mod any;
#[cfg(feature = "redis")]
pub mod redis;
mod url;

pub use tollgate_core::store::*;

#[cfg(feature = "redis")]
pub use self::redis::{RedisConfig, RedisStats, RedisStore};
pub use any::AnyStore;
pub use url::{RedisUrl, redact_credentials};
