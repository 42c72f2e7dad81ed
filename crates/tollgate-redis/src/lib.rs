//! Tollgate's Redis stores: one exact limit shared by every node, on a single Redis or a Redis
//! Cluster.
//!
//! Every algorithm runs inside Redis as Lua, the same transitions as `tollgate-core`'s piece for
//! piece, on the Redis server's clock; a check is one atomic script call. [`RedisStore`]
//! implements `tollgate_core::store::Store`, so the limiter and its layers use it like the
//! memory store. Most programs reach it through the `tollgate` crate (`tollgate::RedisStore`).
//!
//! Without the default `client` feature, only [`RedisConfig`] and [`RedisUrl`] are built: what a
//! program needs to read a configuration that names a Redis.

mod config;
#[cfg(feature = "client")]
mod store;
mod url;

pub use config::{BadPrefix, MAX_PREFIX_BYTES, RedisAuth, RedisConfig, RedisTls};
#[cfg(feature = "client")]
pub use store::{CHECK_SCRIPT, MAX_PART_BYTES, RedisStats, RedisStore};
pub use url::{RedisUrl, redact_credentials};
