//! Prometheus metrics of a limiter: what it decided, how long deciding took, how the store is
//! doing. Labels are policy and limit names, which come from configuration, never keys or
//! anything a client sends, so their number stays bounded.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

use crate::layer::GlobalStats;
use crate::store::StoreError;

mod by_policy;
mod global;
mod histogram;
mod labelled;
mod latencies;
mod memory;
mod observe;

use by_policy::ByPolicy;
use global::GlobalMetrics;
use histogram::Histogram;
use labelled::Labelled;
use latencies::Latencies;
use memory::MemoryMetrics;

/// How many [`MetricOutcome`]s there are.
const OUTCOMES: usize = 7;
const _: () = assert!(MetricOutcome::LocalFallback as usize + 1 == OUTCOMES);
// `MetricOutcome::ALL` lists each outcome at its own index.
const _: () = {
    let mut index = 0;
    while index < OUTCOMES {
        assert!(MetricOutcome::ALL[index] as usize == index);
        index += 1;
    }
};

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
    /// Every outcome, in the order of their discriminants.
    const ALL: [MetricOutcome; OUTCOMES] = [
        MetricOutcome::Allowed,
        MetricOutcome::Denied,
        MetricOutcome::Delayed,
        MetricOutcome::ShadowDenied,
        MetricOutcome::FailedOpen,
        MetricOutcome::FailedClosed,
        MetricOutcome::LocalFallback,
    ];

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OverrideChangeLabels {
    operation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UsageLabels {
    policy: String,
}

/// The kinds of store errors counted, each present from the start.
const ERROR_KINDS: [&str; 4] = ["timeout", "unavailable", "circuit_open", "failed"];

/// Decisions counted by policy and outcome, and latency quantiles: what a dashboard shows.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// `policy -> outcome -> count` (`""` for checks with inline limits).
    pub decisions: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Median time to decide, in microseconds (a power-of-two bucket bound).
    pub check_p50_micros: Option<u64>,
    /// 99th percentile time to decide, in microseconds (a power-of-two bucket bound).
    pub check_p99_micros: Option<u64>,
}

/// A limiter's metrics and the registry they are exposed through.
pub struct Metrics {
    by_policy: ByPolicy,
    /// The summary's counts of checks with inline limits (policy `""`), by outcome: every
    /// such check counts one, so they take no lock.
    unlabelled_requests: by_policy::Counts,
    latencies: Latencies,
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    /// The decisions counters of labelled checks, found without allocating.
    labelled: Labelled,
    /// The counters of checks with inline limits (no policy, no limit label), by outcome,
    /// looked up once: every inline check counts one.
    unlabelled: [std::sync::OnceLock<Counter>; OUTCOMES],
    check_seconds: Histogram,
    store_seconds: Histogram,
    retry_after_seconds: Histogram,
    store_errors: Family<ErrorLabels, Counter>,
    breaker_open: Gauge,
    deny_cache_hits: Counter,
    reloads: Family<ReloadLabels, Counter>,
    last_reload_successful: Gauge,
    store_up: Gauge,
    usage_units: Family<UsageLabels, Counter>,
    override_changes: Family<OverrideChangeLabels, Counter>,
    overrides: Gauge,
    override_refresh_failures: Counter,
    memory: MemoryMetrics,
    global: GlobalMetrics,
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
    // A flat list: each metric registered once, in the order the exposition lists them.
    #[allow(clippy::too_many_lines)]
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
            "Time of each call to a store outside the process (decisions in process are timed as checks only)",
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
        let last_reload_successful = Gauge::default();
        registry.register(
            "config_last_reload_successful",
            "1 unless the last configuration reload was refused (the previous configuration then stays in force)",
            last_reload_successful.clone(),
        );
        last_reload_successful.set(1);
        let store_up = Gauge::default();
        registry.register(
            "store_up",
            "1 while the store answers the server's periodic probe, 0 while it does not",
            store_up.clone(),
        );
        let usage_units = Family::<UsageLabels, Counter>::default();
        registry.register(
            "usage_units",
            "Units policies that charge by usage settled at, as responses reported them (tokens, bytes), by policy",
            usage_units.clone(),
        );
        let override_changes = Family::<OverrideChangeLabels, Counter>::default();
        registry.register(
            "override_changes",
            "Overrides set or removed through this process, by operation (put, delete)",
            override_changes.clone(),
        );
        let overrides = Gauge::default();
        registry.register(
            "overrides",
            "Overrides in the table this process applies",
            overrides.clone(),
        );
        let override_refresh_failures = Counter::default();
        registry.register(
            "override_refresh_failures",
            "Reads of the override table that failed (the table read last stays in force)",
            override_refresh_failures.clone(),
        );
        // Counters an alert reads with increase() exist from the start, so the first event is
        // an increase from 0, not the appearance of a series.
        for operation in ["put", "delete"] {
            let _ = override_changes.get_or_create(&OverrideChangeLabels { operation });
        }
        for kind in ERROR_KINDS {
            let _ = store_errors.get_or_create(&ErrorLabels { kind });
        }
        for result in ["success", "failure"] {
            let _ = reloads.get_or_create(&ReloadLabels { result });
        }
        let memory = MemoryMetrics::register(&mut registry);
        let global = GlobalMetrics::register(&mut registry);
        Self {
            by_policy: ByPolicy::default(),
            unlabelled_requests: Default::default(),
            latencies: Latencies::new(),
            registry,
            decisions,
            labelled: Labelled::default(),
            unlabelled: Default::default(),
            check_seconds,
            store_seconds,
            retry_after_seconds,
            store_errors,
            breaker_open,
            deny_cache_hits,
            reloads,
            last_reload_successful,
            store_up,
            usage_units,
            override_changes,
            overrides,
            override_refresh_failures,
            memory,
            global,
        }
    }

    /// Counts one outcome of one limit of one policy.
    pub fn record_decision(&self, policy: &str, limit: &str, outcome: MetricOutcome) {
        if policy.is_empty() && limit.is_empty() {
            self.unlabelled_decisions(outcome).inc();
        } else {
            self.labelled
                .inc(&self.decisions, policy, limit, outcome.as_str());
        }
    }

    /// The decisions counter of checks without labels, made once (not looked up per check).
    fn unlabelled_decisions(&self, outcome: MetricOutcome) -> &Counter {
        self.unlabelled[outcome as usize].get_or_init(|| {
            let labels = DecisionLabels {
                policy: String::new(),
                limit: String::new(),
                outcome: outcome.as_str(),
            };
            self.decisions.get_or_create(&labels).clone()
        })
    }

    /// Counts one request's outcome under one policy, for the summary (once per request, where
    /// the decisions count once per limit).
    pub fn record_policy(&self, policy: &str, outcome: MetricOutcome) {
        if policy.is_empty() {
            self.unlabelled_requests[outcome as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.by_policy.count(policy, outcome);
    }

    /// Decisions by policy and outcome, and latency quantiles.
    pub fn summary(&self) -> Summary {
        let mut decisions = self.by_policy.snapshot();
        let unlabelled = by_policy::seen(&self.unlabelled_requests);
        if !unlabelled.is_empty() {
            decisions.insert(String::new(), unlabelled);
        }
        Summary {
            decisions,
            check_p50_micros: self.latencies.quantile(0.5),
            check_p99_micros: self.latencies.quantile(0.99),
        }
    }

    pub(crate) fn observe_check(&self, took: Duration) {
        self.check_seconds.observe(took.as_secs_f64());
        self.latencies.observe(took);
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
            StoreError::CircuitOpen => "circuit_open",
            // Failed, and whatever later kinds the store reports.
            _ => "failed",
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

    /// Counts a change to the overrides (`put` or `delete`).
    pub fn record_override_change(&self, operation: &'static str) {
        self.override_changes
            .get_or_create(&OverrideChangeLabels { operation })
            .inc();
    }

    /// Sets how many overrides the table applied here holds.
    pub fn set_overrides(&self, count: usize) {
        self.overrides.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts a read of the override table that failed.
    pub fn record_override_refresh_failure(&self) {
        self.override_refresh_failures.inc();
    }

    /// Says whether the last reload took every file (`tollgate_config_last_reload_successful`).
    pub fn set_last_reload_successful(&self, succeeded: bool) {
        self.last_reload_successful.set(i64::from(succeeded));
    }

    /// Says whether the store answers, as a periodic probe found it (`tollgate_store_up`).
    pub fn set_store_up(&self, up: bool) {
        self.store_up.set(i64::from(up));
    }

    /// Counts what a policy that charges by usage settled at.
    pub(crate) fn record_usage(&self, policy: &str, units: u64) {
        self.usage_units
            .get_or_create(&UsageLabels {
                policy: policy.to_owned(),
            })
            .inc_by(units);
    }

    /// Creates the allowed and denied counters of one labelled limit (`policy` and `limit` as
    /// [`Check::labelled`] names them), so that the series exist before the first decision.
    pub fn declare_limit(&self, policy: &str, limit: &str) {
        for outcome in [MetricOutcome::Allowed, MetricOutcome::Denied] {
            let _ = self.decisions.get_or_create(&DecisionLabels {
                policy: policy.to_owned(),
                limit: limit.to_owned(),
                outcome: outcome.as_str(),
            });
        }
    }

    /// Creates the allowed and denied counters of every limit of `policies` (and of checks
    /// with their own limits), so that each series exists from the start.
    pub(crate) fn declare(&self, policies: &crate::Policies) {
        for outcome in [MetricOutcome::Allowed, MetricOutcome::Denied] {
            let _ = self.decisions.get_or_create(&DecisionLabels {
                policy: String::new(),
                limit: String::new(),
                outcome: outcome.as_str(),
            });
            for (policy, limit) in policies.limits() {
                let _ = self.decisions.get_or_create(&DecisionLabels {
                    policy: policy.to_owned(),
                    limit: limit.label.to_string(),
                    outcome: outcome.as_str(),
                });
            }
        }
        for policy in policies.usage_policies() {
            let _ = self.usage_units.get_or_create(&UsageLabels {
                policy: policy.to_owned(),
            });
        }
    }

    /// Copies the global tier's counts (see [`GlobalStats`]).
    pub(crate) fn set_global(&self, stats: &GlobalStats) {
        self.global.copy(stats);
    }

    pub(crate) fn set_gauges(&self, breaker_open: bool, memory: Option<crate::store::HeldKeys>) {
        self.breaker_open.set(i64::from(breaker_open));
        if let Some(memory) = memory {
            self.memory.copy(&memory);
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

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_by_policy_and_bounds_the_quantiles() {
        let metrics = Metrics::new();
        metrics.record_policy("login", MetricOutcome::Allowed);
        metrics.record_policy("login", MetricOutcome::Allowed);
        metrics.record_policy("login", MetricOutcome::Denied);
        for micros in [10, 20, 30, 5_000] {
            metrics.observe_check(Duration::from_micros(micros));
        }
        let summary = metrics.summary();
        assert_eq!(summary.decisions["login"]["allowed"], 2);
        assert_eq!(summary.decisions["login"]["denied"], 1);
        let p50 = summary.check_p50_micros.expect("observed");
        assert!((20..=32).contains(&p50), "{p50}");
        let p99 = summary.check_p99_micros.expect("observed");
        assert!((5_000..=8_192).contains(&p99), "{p99}");
    }

    #[test]
    fn the_summary_counts_checks_with_inline_limits_under_no_policy() {
        let metrics = Metrics::new();
        assert!(metrics.summary().decisions.is_empty());
        metrics.record_policy("", MetricOutcome::Allowed);
        metrics.record_policy("", MetricOutcome::Allowed);
        metrics.record_policy("", MetricOutcome::Delayed);
        let summary = metrics.summary();
        assert_eq!(summary.decisions[""]["allowed"], 2);
        assert_eq!(summary.decisions[""]["delayed"], 1);
        assert!(!summary.decisions[""].contains_key("denied"));
    }
}
