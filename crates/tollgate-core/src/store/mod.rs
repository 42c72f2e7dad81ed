//! Stores: where the state of every (key, limit) lives.
//!
//! A store runs the algorithms' transitions atomically for a whole check. The memory store does
//! it in process; the Redis stores (in the `tollgate` crate) do it inside Redis with Lua. Stores know nothing of HTTP or
//! policies; they take a [`Check`] and return a [`Verdict`].

pub mod memory;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Adjustment;
use crate::check::{Check, CheckError, Verdict};
use crate::clock::{Clock, Micros};
use crate::counter::CounterOp;

pub use memory::MemoryStore;

/// What an in-process store holds against its bound, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HeldKeys {
    /// (key, limit) states held.
    pub held: u64,
    /// The most it holds.
    pub max: u64,
    /// Live states evicted to make room since the store was built: above zero, the bound
    /// has been reached.
    pub evictions: u64,
}

/// Why a store could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The check itself is malformed (too many items, a key too long, a cost too large).
    #[error(transparent)]
    Invalid(#[from] CheckError),
    /// The store did not answer within its timeout.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store could not be reached or the connection broke.
    #[error("the store is unreachable: {0}")]
    Unavailable(String),
    /// The store answered with an error.
    #[error("the store failed: {0}")]
    Failed(String),
    /// The store was not called: it failed repeatedly, and the limiter's circuit breaker is
    /// giving it a rest.
    #[error("the store is resting after repeated failures (circuit breaker open)")]
    CircuitOpen,
}

impl StoreError {
    /// Whether the error says the store is unhealthy (as opposed to the input being bad), so
    /// that a failure policy, not the caller, should decide what happens next.
    pub fn is_store_failure(&self) -> bool {
        !matches!(self, StoreError::Invalid(_))
    }
}

/// Where the state lives. Implementations decide every item of a check atomically.
pub trait Store: Send + Sync + 'static {
    /// Decides a check all-or-nothing. `at` overrides the store's own clock (tests and
    /// replays); `None` means the store's time (the Redis server's `TIME` for Redis).
    fn check(
        &self,
        check: &Check<'_>,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send;

    /// Decides a check at the store's time without waiting, as [`check`](Store::check) with
    /// `at` of `None` would, when the store can (it keeps its state in process); `None` when
    /// only `check` can. A caller then skips a future's machinery on the hottest path.
    fn check_now(&self, _check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        None
    }

    /// Refunds or charges each item of `check` by its cost, as `adjustments` (one per item)
    /// says, unconditionally.
    fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Forgets the state of every item of `check`, as if it had never been used (an operator
    /// resetting a key, lifting a penalty).
    fn forget(&self, check: &Check<'_>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads or raises plain counters that expire, as envoyproxy/ratelimit keeps them (see
    /// [`counter`](crate::counter)): for each op, the count after it (0 for a counter that
    /// does not exist or has expired). The ops are not one atomic step, as upstream's are not.
    fn counters(
        &self,
        ops: &[CounterOp<'_>],
    ) -> impl Future<Output = Result<Vec<u64>, StoreError>> + Send;

    /// A short name for logs and metrics: `memory`, `redis`, `redis-cluster`.
    fn kind(&self) -> &'static str;

    /// How many (key, limit) states the store holds against its bound, when it keeps them in
    /// process; for metrics.
    fn held_keys(&self) -> Option<HeldKeys> {
        None
    }

    /// The clock the store decides by, when it keeps one in process (the memory store); a
    /// limiter's guards then read the same clock. `None` for stores with a clock of their own
    /// elsewhere (Redis decides by the server's `TIME`).
    fn own_clock(&self) -> Option<&Arc<dyn Clock>> {
        None
    }
}

/// A shared store is a store, so that several limiters can decide on one (regions sharing a
/// global store in one process, say).
impl<S: Store> Store for Arc<S> {
    fn check(
        &self,
        check: &Check<'_>,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        (**self).check(check, at)
    }

    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        (**self).check_now(check)
    }

    fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).adjust(check, adjustments, at)
    }

    fn forget(&self, check: &Check<'_>) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).forget(check)
    }

    fn counters(
        &self,
        ops: &[CounterOp<'_>],
    ) -> impl Future<Output = Result<Vec<u64>, StoreError>> + Send {
        (**self).counters(ops)
    }

    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn held_keys(&self) -> Option<HeldKeys> {
        (**self).held_keys()
    }

    fn own_clock(&self) -> Option<&Arc<dyn Clock>> {
        (**self).own_clock()
    }
}
