//! What a limiter shows an operator (`limiter.telemetry()`): its metrics, the keys it refuses
//! most, whether its store rests behind the breaker, and how refused keys are logged.

use super::{KeyLogging, Limiter};
#[cfg(feature = "metrics")]
use crate::metrics::Metrics;
use crate::secret::Secret;
use crate::store::Store;
use crate::top_keys::TopKey;

/// A limiter's telemetry: see [`Limiter::telemetry`].
#[derive(Debug)]
pub struct Telemetry<'l, S> {
    limiter: &'l Limiter<S>,
}

impl<S: Store> Limiter<S> {
    /// What the limiter shows an operator: metrics, top refused keys, the breaker's state.
    pub fn telemetry(&self) -> Telemetry<'_, S> {
        Telemetry { limiter: self }
    }
}

impl<'l, S: Store> Telemetry<'l, S> {
    /// Whether the circuit breaker is open: the store failed repeatedly and is not being called.
    pub fn store_resting(&self) -> bool {
        self.limiter.breaker().is_open()
    }

    /// How many times the circuit breaker has opened.
    pub fn breaker_openings(&self) -> u64 {
        self.limiter.breaker().times_opened()
    }

    /// Checks denied by the over-limit cache without asking the store.
    pub fn deny_cache_hits(&self) -> u64 {
        self.limiter.cache().hits()
    }

    /// The `n` keys most often refused (policy keys such as `ip:203.0.113.7`), from a bounded
    /// summary.
    pub fn top_denied_keys(&self, n: usize) -> Vec<TopKey> {
        self.limiter.inner.denials.top_denied_keys(n)
    }

    /// The `n` routes (or paths) most often asked for.
    pub fn top_routes(&self, n: usize) -> Vec<TopKey> {
        self.limiter.inner.denials.top_routes(n)
    }

    /// Sets how refused keys appear in logs (hashed by default).
    pub fn set_key_logging(&self, logging: KeyLogging) {
        self.limiter.inner.denials.set_key_logging(logging);
    }

    /// Sets the secret hashed key logging uses, so that several processes given the same secret
    /// show a key under the same pseudonym (by default each process has a random one).
    pub fn set_key_log_secret(&self, secret: Secret) {
        self.limiter.inner.denials.set_key_log_secret(secret);
    }

    /// The limiter's metrics.
    #[cfg(feature = "metrics")]
    pub fn metrics(&self) -> &'l Metrics {
        &self.limiter.inner.metrics
    }

    /// The metrics in Prometheus' text format, with the gauges read now.
    #[cfg(feature = "metrics")]
    pub fn metrics_text(&self) -> String {
        self.limiter
            .inner
            .metrics
            .set_gauges(self.store_resting(), self.limiter.store().held_keys());
        if let Some(global) = self.limiter.global() {
            self.limiter.inner.metrics.set_global(&global.stats());
        }
        self.limiter.inner.metrics.encode()
    }
}
