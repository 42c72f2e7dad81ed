//! The core of Tollgate: what a rate limiter decides, with no I/O, YAML, HTTP, Prometheus or
//! Redis in it. The `tollgate` crate builds policies, store layers, the Redis stores and the
//! limiter on top, and re-exports all of this, so `use tollgate::...` is what users write.
//!
//! ```
//! use tollgate_core::{Algorithm, Check, Limit, MemoryStore};
//!
//! let store = MemoryStore::new();
//! let per_user = Limit::new("per-user", Algorithm::Gcra, "2/s".parse().unwrap()).unwrap();
//! let now = 1_700_000_000_000_000;
//! assert!(store.decide(&Check::one("user:42", &per_user), now).unwrap().is_allowed());
//! ```
//!
//! - [`clock`]: time as injected microseconds, a system clock and a manual clock;
//! - [`quota`] and [`limit`]: how much per how long, and a named, validated quota + algorithm;
//! - [`spec`]: a limit as configuration states it, built by one set of rules;
//! - [`algorithm`]: the six algorithms, each a pure state transition;
//! - [`check`] and [`decision`]: the question (several limits, all-or-nothing) and the answers;
//! - [`counter`]: envoyproxy/ratelimit's plain window counters, for sharing a Redis with it;
//! - [`store`]: the `Store` trait and the sharded in-process store;
//! - [`overrides`]: where run-time overrides are kept, versioned;
//! - [`hex`]: bytes as lower-case hex, for keys, tokens and digests.

pub mod algorithm;
mod bounds;
pub mod calendar;
pub mod check;
pub mod clock;
pub mod counter;
pub mod decision;
pub mod hex;
mod kind;
pub mod limit;
pub mod overrides;
pub mod quota;
pub mod scope;
pub mod spec;
pub mod store;

#[cfg(test)]
mod testing;

pub use algorithm::{Adjustment, Algorithm, LeakyMode, State};
pub use calendar::{Calendar, CalendarError, CalendarSpec};
pub use check::{Check, CheckError, Item, MAX_COST, MAX_ITEMS, MAX_KEY_BYTES, Outcome, Verdict};
pub use clock::{
    Clock, MICROS_PER_SECOND, ManualClock, Micros, SystemClock, duration_to_micros,
    micros_to_duration,
};
pub use decision::Decision;
pub use limit::{Limit, LimitBuilder, LimitError, MAX_SLIDING_LOG_COUNT};
pub use quota::{MAX_COUNT, MAX_PERIOD_MICROS, Quota, QuotaError, parse_duration};
pub use scope::{Scope, ScopeError};
pub use store::{MemoryStore, Store, StoreError};
