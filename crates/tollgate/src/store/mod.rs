//! Stores: where the state of every (key, limit) lives. The `Store` trait, its errors and the
//! memory store come from `tollgate-core`, the Redis stores from `tollgate-redis`; the store
//! chosen at run time lives here.

mod any;

pub use tollgate_core::store::*;

pub use any::AnyStore;
/// The Redis stores (`tollgate-redis`).
#[cfg(feature = "redis")]
pub use tollgate_redis as redis;
pub use tollgate_redis::{
    BadPrefix, RedisAuth, RedisConfig, RedisTls, RedisUrl, redact_credentials,
};
#[cfg(feature = "redis")]
pub use tollgate_redis::{RedisStats, RedisStore};
