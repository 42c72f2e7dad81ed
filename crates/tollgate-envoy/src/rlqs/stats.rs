//! What the quota service holds and has done, for `/admin/stats`, the dashboard and metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde::Serialize;

/// A snapshot of the quota service.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QuotaStats {
    /// Streams open (one per Envoy and domain).
    pub streams: u64,
    /// Buckets reported by at least one stream.
    pub buckets: u64,
    /// Buckets that share a limit (the others are allowed or denied whole).
    pub shared_buckets: u64,
    /// Envoys' subscriptions, over every bucket.
    pub envoys: u64,
    /// Over the shared buckets, the sum of each one's assigned units as a fraction of its
    /// limit (this server's part).
    pub assigned_ratio_sum: f64,
    /// Over the shared buckets, the sum of each one's demand as a fraction of its limit.
    pub demand_ratio_sum: f64,
    /// Streams opened since start.
    pub streams_opened: u64,
    /// Assignments sent since start.
    pub assignments: u64,
    /// Abandon actions sent since start.
    pub abandoned: u64,
    /// Buckets denied whole because a cap was reached.
    pub refused_buckets: u64,
    /// Streams refused because their client, or the service, was at its cap.
    pub refused_streams: u64,
    /// Streams closed to make room at the service's cap for a client holding less.
    pub evicted_streams: u64,
    /// Buckets abandoned to make room at the service's cap for a client holding less.
    pub evicted_buckets: u64,
    /// Streams dropped because they did not read their assignments.
    pub streams_dropped: u64,
    /// Store calls counting shares and demand.
    pub store_calls: u64,
    /// Of those, failures.
    pub store_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct StatCounters {
    pub(crate) streams_opened: AtomicU64,
    pub(crate) assignments: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) refused_buckets: AtomicU64,
    pub(crate) refused_streams: AtomicU64,
    pub(crate) evicted_streams: AtomicU64,
    pub(crate) evicted_buckets: AtomicU64,
    pub(crate) streams_dropped: AtomicU64,
    pub(crate) store_calls: AtomicU64,
    pub(crate) store_errors: AtomicU64,
}

impl StatCounters {
    pub(crate) fn snapshot(&self) -> QuotaStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        QuotaStats {
            streams_opened: read(&self.streams_opened),
            assignments: read(&self.assignments),
            abandoned: read(&self.abandoned),
            refused_buckets: read(&self.refused_buckets),
            refused_streams: read(&self.refused_streams),
            evicted_streams: read(&self.evicted_streams),
            evicted_buckets: read(&self.evicted_buckets),
            streams_dropped: read(&self.streams_dropped),
            store_calls: read(&self.store_calls),
            store_errors: read(&self.store_errors),
            ..QuotaStats::default()
        }
    }
}

impl QuotaStats {
    /// The metrics, as a registry of constants read at scrape time (`tollgate_rlqs_...`).
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("tollgate_rlqs");
        let gauges = [
            ("streams", "Quota streams open", self.streams as i64),
            ("buckets", "Quota buckets reported", self.buckets as i64),
            (
                "shared_buckets",
                "Quota buckets sharing a limit",
                self.shared_buckets as i64,
            ),
            (
                "subscriptions",
                "Envoys' subscriptions to buckets",
                self.envoys as i64,
            ),
        ];
        for (name, help, value) in gauges {
            registry.register(name, help, ConstGauge::new(value));
        }
        let ratios = [
            (
                "assigned_ratio_sum",
                "Sum over shared buckets of the units assigned by this server over the limit",
                self.assigned_ratio_sum,
            ),
            (
                "demand_ratio_sum",
                "Sum over shared buckets of the demand reported to this server over the limit",
                self.demand_ratio_sum,
            ),
        ];
        for (name, help, value) in ratios {
            registry.register(name, help, ConstGauge::<f64>::new(value));
        }
        let counters = self.counters();
        for (name, help, value) in counters {
            registry.register(name, help, ConstCounter::new(value));
        }
        registry
    }

    /// The counters, each with its name and help.
    fn counters(&self) -> [(&'static str, &'static str, u64); 10] {
        [
            (
                "streams_opened",
                "Quota streams opened",
                self.streams_opened,
            ),
            ("assignments", "Quota assignments sent", self.assignments),
            ("abandons", "Abandon actions sent", self.abandoned),
            (
                "refused_buckets",
                "Buckets denied whole because a cap was reached",
                self.refused_buckets,
            ),
            (
                "refused_streams",
                "Streams refused because their client, or the service, was at its cap",
                self.refused_streams,
            ),
            (
                "evicted_streams",
                "Streams closed to make room at the service's cap for a client holding less",
                self.evicted_streams,
            ),
            (
                "evicted_buckets",
                "Buckets abandoned to make room at the service's cap for a client holding less",
                self.evicted_buckets,
            ),
            (
                "streams_dropped",
                "Streams dropped for not reading their assignments",
                self.streams_dropped,
            ),
            (
                "store_calls",
                "Store calls counting shares and demand",
                self.store_calls,
            ),
            (
                "store_errors",
                "Store calls counting shares that failed",
                self.store_errors,
            ),
        ]
    }
}
