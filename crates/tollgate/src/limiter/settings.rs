//! How a limiter is set up while it runs (`limiter.settings()`): its policies, its circuit
//! breaker, its over-limit cache and where envoyproxy/ratelimit's per-second counters go.

use std::sync::Arc;

use super::Limiter;
use crate::layer::BreakerConfig;
use crate::policy::Policies;
use crate::store::{AnyStore, Store};

/// A limiter's settings: see [`Limiter::settings`].
#[derive(Debug)]
pub struct Settings<'l, S> {
    limiter: &'l Limiter<S>,
}

impl<S: Store> Limiter<S> {
    /// How the limiter is set up: policies, breaker, over-limit cache, per-second store. Each
    /// change applies to checks that start after it.
    pub fn settings(&self) -> Settings<'_, S> {
        Settings { limiter: self }
    }
}

impl<S: Store> Settings<'_, S> {
    /// Replaces the policies; checks already under way finish with the old ones. The
    /// policies' `redis.breaker` and `redis.deny_cache` settings take effect too.
    pub fn set_policies(&self, policies: Policies) {
        let options = &policies.config().redis;
        self.set_breaker(options.breaker);
        self.set_deny_cache(options.deny_cache && self.limiter.store().kind() != "memory");
        #[cfg(feature = "metrics")]
        self.limiter.inner.metrics.declare(&policies);
        self.limiter.recompile_overrides(&policies);
        self.limiter.inner.policies.store(Some(Arc::new(policies)));
    }

    /// Sets when the store's circuit breaker opens and for how long (default: after 5
    /// consecutive failures, for 1 s).
    pub fn set_breaker(&self, config: BreakerConfig) {
        self.limiter.breaker().configure(config);
    }

    /// Turns the local over-limit cache on or off (on by default for stores outside the
    /// process): while a check is denied until T, the same check is denied until T without
    /// asking the store.
    pub fn set_deny_cache(&self, enabled: bool) {
        self.limiter.cache().set_enabled(enabled);
    }

    /// Sends envoyproxy/ratelimit's counters of one-second windows to `store` (upstream's
    /// per-second Redis), or with `None` to the limiter's own store. Checks are not affected.
    pub fn set_per_second_store(&self, store: Option<AnyStore>) {
        self.limiter.inner.per_second.store(store.map(Arc::new));
    }
}
