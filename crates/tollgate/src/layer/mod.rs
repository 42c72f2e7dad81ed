//! Store layers: guards that wrap a [`Store`] and are stores themselves, as tower middleware
//! wraps a service. Each does one thing on the way to the store and knows nothing of policies
//! or HTTP:
//!
//! - [`CircuitBreaker`] rests a store that keeps failing;
//! - [`OverLimitCache`] answers a check the store denied moments ago without asking again;
//! - [`Leasing`] spends leased limits from units taken in advance;
//! - [`GlobalTier`] spends global limits from adaptive leases on a global store.
//!
//! A [`Limiter`](crate::Limiter) puts its store behind [`Guards`] (outermost first: leasing,
//! the global tier, the over-limit cache, the breaker).

/// The `Store` methods a layer hands unchanged to the store it wraps (`self.inner`): what it
/// is and holds (`describe`), refunds, charges and forgetting (`writes`), and plain counters
/// (`counters`).
macro_rules! pass_to_inner {
    (describe) => {
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }

        fn held_keys(&self) -> Option<crate::store::HeldKeys> {
            self.inner.held_keys()
        }

        fn own_clock(&self) -> Option<&std::sync::Arc<dyn tollgate_core::clock::Clock>> {
            self.inner.own_clock()
        }
    };
    (counters) => {
        async fn counters(
            &self,
            ops: &[crate::counter::CounterOp<'_>],
        ) -> Result<Vec<u64>, crate::store::StoreError> {
            self.inner.counters(ops).await
        }
    };
    (writes) => {
        async fn adjust(
            &self,
            check: &tollgate_core::check::Check<'_>,
            adjustments: &[crate::algorithm::Adjustment],
            at: Option<tollgate_core::clock::Micros>,
        ) -> Result<(), crate::store::StoreError> {
            self.inner.adjust(check, adjustments, at).await
        }

        async fn forget(
            &self,
            check: &tollgate_core::check::Check<'_>,
        ) -> Result<(), crate::store::StoreError> {
            self.inner.forget(check).await
        }
    };
}

mod breaker;
mod global;
mod leasing;
mod over_limit_cache;

use std::sync::Arc;
use std::time::Duration;

pub use breaker::BreakerConfig;
pub(crate) use breaker::CircuitBreaker;
pub(crate) use global::GlobalTier;
pub use global::{GlobalLeases, GlobalStats, LeaseTuning};
pub(crate) use leasing::Leasing;
pub(crate) use over_limit_cache::OverLimitCache;

use crate::store::{Store, StoreError};
use tollgate_core::clock::Clock;

/// What the layers see on the way to the store, for metrics to count. Every method has a
/// default that does nothing. Calls are made inline: keep them cheap and never block.
pub trait StoreObserver: Send + Sync + 'static {
    /// The store answered a call (or failed to) after `took`.
    fn store_called(&self, _took: Duration, _error: Option<&StoreError>) {}
    /// The circuit breaker answered instead of the store.
    fn store_skipped(&self) {}
    /// The over-limit cache answered instead of the store.
    fn cache_hit(&self) {}
}

/// A store behind the guards every limiter uses, outermost first: leasing, the global tier,
/// the over-limit cache, the circuit breaker.
pub(crate) type Guards<S> = Leasing<GlobalTier<OverLimitCache<CircuitBreaker<S>>>>;

/// Puts `store` behind the guards: the breaker with its default settings, the over-limit cache
/// on for stores outside the process (in process, the store is as quick as a cache), global
/// limits leased from `global` when there is one, all on `clock`, reporting to `observer`.
pub(crate) fn guard<S: Store>(
    store: S,
    global: Option<Arc<GlobalLeases>>,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn StoreObserver>,
) -> Guards<S> {
    let cache = store.kind() != "memory";
    let breaker = CircuitBreaker::new(
        store,
        BreakerConfig::default(),
        Arc::clone(&clock),
        Arc::clone(&observer),
    );
    let cached = OverLimitCache::new(breaker, cache, Arc::clone(&clock), observer);
    Leasing::new(GlobalTier::new(cached, global), clock)
}
