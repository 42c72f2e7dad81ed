//! Prometheus metrics of a limiter: what it decided, how long deciding took, how the store is
//! doing. Labels are policy and limit names, which come from configuration, never keys or
//! anything a client sends, so their number stays bounded.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::store::StoreError;

/// What became of one limit (or one policy, for the outcomes that decide without limits).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum MetricOutcome {
    /// Admitted.
    Allowed,
    /// Refused.
    Denied,
    /// Admitted after a wait.
    Delayed,
    /// A shadow policy would have refused it.
    ShadowDenied,
    /// The store could not decide; let through.
    FailedOpen,
    /// The store could not decide; refused.
    FailedClosed,
    /// The store could not decide; decided by the local fallback.
    LocalFallback,
}

impl MetricOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricOutcome::Allowed => "allowed",
            MetricOutcome::Denied => "denied",
            MetricOutcome::Delayed => "delayed",
            MetricOutcome::ShadowDenied => "shadow_denied",
            MetricOutcome::FailedOpen => "failed_open",
            MetricOutcome::FailedClosed => "failed_closed",
            MetricOutcome::LocalFallback => "local_fallback",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    policy: String,
    limit: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// A limiter's metrics and the registry they are exposed through.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    check_seconds: Histogram,
    store_seconds: Histogram,
    retry_after_seconds: Histogram,
    store_errors: Family<ErrorLabels, Counter>,
    breaker_open: Gauge,
    deny_cache_hits: Counter,
    reloads: Family<ReloadLabels, Counter>,
    memory_keys: Gauge,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    // 10 µs to about 1.3 s.
    exponential_buckets(0.000_01, 2.0, 18)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics, registered under `tollgate_`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions by policy, limit and outcome",
            decisions.clone(),
        );
        let check_seconds = Histogram::new(latency_buckets());
        registry.register(
            "check_duration_seconds",
            "Time to decide a request, store included",
            check_seconds.clone(),
        );
        let store_seconds = Histogram::new(latency_buckets());
        registry.register(
            "store_duration_seconds",
            "Time of each store call",
            store_seconds.clone(),
        );
        let retry_after_seconds = Histogram::new(exponential_buckets(0.1, 4.0, 10));
        registry.register(
            "retry_after_seconds",
            "Retry-After of refused requests",
            retry_after_seconds.clone(),
        );
        let store_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "store_errors",
            "Store calls that failed, by kind",
            store_errors.clone(),
        );
        let breaker_open = Gauge::default();
        registry.register(
            "breaker_open",
            "1 while the circuit breaker rests the store",
            breaker_open.clone(),
        );
        let deny_cache_hits = Counter::default();
        registry.register(
            "deny_cache_hits",
            "Checks denied by the over-limit cache without a store call",
            deny_cache_hits.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads, by result",
            reloads.clone(),
        );
        let memory_keys = Gauge::default();
        registry.register(
            "memory_keys",
            "Keys held by the in-process store",
            memory_keys.clone(),
        );
        Self {
            registry,
            decisions,
            check_seconds,
            store_seconds,
            retry_after_seconds,
            store_errors,
            breaker_open,
            deny_cache_hits,
            reloads,
            memory_keys,
        }
    }

    /// Counts one outcome of one limit of one policy.
    pub fn record_decision(&self, policy: &str, limit: &str, outcome: MetricOutcome) {
        self.decisions
            .get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                limit: limit.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub(crate) fn observe_check(&self, took: Duration) {
        self.check_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn observe_store(&self, took: Duration) {
        self.store_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn observe_retry_after(&self, retry_after: Duration) {
        self.retry_after_seconds.observe(retry_after.as_secs_f64());
    }

    pub(crate) fn record_store_error(&self, error: &StoreError) {
        let kind = match error {
            StoreError::Invalid(_) => return,
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Failed(_) => "failed",
            StoreError::CircuitOpen => "circuit_open",
        };
        self.store_errors.get_or_create(&ErrorLabels { kind }).inc();
    }

    pub(crate) fn record_cache_hit(&self) {
        self.deny_cache_hits.inc();
    }

    /// Counts a configuration reload, good or refused.
    pub fn record_reload(&self, succeeded: bool) {
        let result = if succeeded { "success" } else { "failure" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    pub(crate) fn set_gauges(&self, breaker_open: bool, memory_keys: Option<u64>) {
        self.breaker_open.set(i64::from(breaker_open));
        if let Some(keys) = memory_keys {
            self.memory_keys
                .set(i64::try_from(keys).unwrap_or(i64::MAX));
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
