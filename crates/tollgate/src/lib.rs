//! Tollgate: a rate limiter that answers *yes, no, or wait?* before any expensive work happens.
//!
//! ```
//! use tollgate::{Algorithm, Limit, Limiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::memory();
//! let per_user = Limit::new("per-user", Algorithm::Gcra, "10/s".parse()?)?;
//! let verdict = limiter.check_one("user:42", &per_user).await?;
//! assert!(verdict.is_allowed());
//! # Ok(())
//! # }
//! ```
//!
//! A [`Check`] holds several (key, limit, cost) items and is decided all-or-nothing: if any
//! limit denies, nothing is counted anywhere. The [`Verdict`] says `Allow`, `Delay(d)` or
//! `Deny(retry_after)`, carries every limit's [`Decision`] and names the binding one.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Check, Limit, Limiter, ManualClock, MemoryStore, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tollgate::Error> {
//! let clock = ManualClock::new(0);
//! let limiter = Limiter::new(MemoryStore::builder().clock(std::sync::Arc::new(clock.clone())).build());
//! let per_second = Limit::new("per-second", Algorithm::TokenBucket, "10/s".parse()?)?;
//! let per_minute = Limit::new("per-minute", Algorithm::SlidingLog, "12/m".parse()?)?;
//! let check = Check::new(5).limit("user:42", &per_second).limit("user:42", &per_minute);
//!
//! assert!(limiter.check(&check).await?.is_allowed()); // 5 of 10/s and 5 of 12/m
//! assert!(limiter.check(&check).await?.is_allowed()); // 10 of 10/s and 10 of 12/m
//! clock.advance(Duration::from_secs(1));
//! let verdict = limiter.check(&check).await?;         // 15 of 12/m: denied, nothing taken
//! assert_eq!(verdict.binding_index(), Some(1));
//! assert_eq!(verdict.outcome(), Outcome::Deny { retry_after: Some(Duration::from_secs(59)) });
//! assert_eq!(verdict.decisions()[0].remaining(), 10, "the per-second bucket kept its tokens");
//! # Ok(())
//! # }
//! ```
//!
//! The six algorithms live in [`algorithm`], each a pure state transition; stores in [`store`];
//! envoyproxy/ratelimit's plain window counters, for sharing its Redis, in [`counter`]
//! ([`Limiter::count`]).
//!
//! The optional parts are features, all on by default, so that an embedded user builds only
//! what it uses: `redis` (the Redis, Redis Cluster and Sentinel stores), `yaml` (policies read
//! from YAML; without it, policies are built in code: [`Config`], [`Policies::compile`]) and
//! `metrics` (Prometheus metrics of the limiter). `pem`, off by default, reads certificates
//! from PEM files for the servers built on the library.

pub use tollgate_core::algorithm;
pub use tollgate_core::counter;
pub use tollgate_core::hex;
mod error;
pub mod headers;
pub mod json;
mod layer;
mod limiter;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod observer;
pub mod overrides;
#[cfg(feature = "pem")]
pub mod pem;
pub mod policy;
pub mod problem;
mod refusal;
pub mod secret;
pub mod store;
pub mod top_keys;
pub mod usage;
pub mod yaml;

pub use algorithm::{Adjustment, Algorithm, LeakyMode, State};
pub use error::Error;
pub use layer::{BreakerConfig, GlobalLeases, GlobalStats, LeaseTuning};
pub use limiter::{Admin, KeyLogging, Limiter, LimiterBuilder, Overrides, Settings, Telemetry};
pub use policy::{Config, Evaluation, Identity, Policies, Request};
pub use store::{
    AnyStore, MemoryStore, RedisAuth, RedisConfig, RedisTls, RedisUrl, Store, StoreError,
    redact_credentials,
};
#[cfg(feature = "redis")]
pub use store::{RedisStats, RedisStore};
pub use tollgate_core::calendar::{Calendar, CalendarError, CalendarSpec};
pub use tollgate_core::check::{
    Check, CheckError, Item, MAX_COST, MAX_ITEMS, MAX_KEY_BYTES, Outcome, Verdict,
};
pub use tollgate_core::clock::{
    Clock, MICROS_PER_SECOND, ManualClock, Micros, SystemClock, duration_to_micros,
    micros_to_duration,
};
pub use tollgate_core::decision::Decision;
pub use tollgate_core::limit::{Limit, LimitBuilder, LimitError, MAX_SLIDING_LOG_COUNT};
pub use tollgate_core::quota::{MAX_COUNT, MAX_PERIOD_MICROS, Quota, QuotaError, parse_duration};
pub use tollgate_core::scope::{Scope, ScopeError};
pub use tollgate_core::spec::{LimitSpec, leaky_mode};
pub use yaml::{ConfigError, ConfigErrors};
