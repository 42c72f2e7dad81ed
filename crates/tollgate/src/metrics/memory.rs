//! The in-process store's metrics: the keys it holds, its bound, and the live keys it evicted,
//! copied from the store when metrics are read.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::HeldKeys;

/// The in-process store's gauges and its eviction counter.
#[derive(Debug, Default)]
pub(super) struct MemoryMetrics {
    keys: Gauge,
    max_keys: Gauge,
    evictions: Counter,
    /// The store's eviction count when last copied into `evictions`.
    evictions_copied: AtomicU64,
}

impl MemoryMetrics {
    /// Registers the in-process store's metrics.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "memory_keys",
            "Keys held by the in-process store",
            metrics.keys.clone(),
        );
        registry.register(
            "memory_max_keys",
            "The most keys the in-process store holds (0 for other stores)",
            metrics.max_keys.clone(),
        );
        registry.register(
            "memory_evictions",
            "Live keys the in-process store evicted to stay within its bound (least recently used first)",
            metrics.evictions.clone(),
        );
        metrics
    }

    /// Copies what the store holds and has evicted.
    pub(super) fn copy(&self, memory: &HeldKeys) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.keys.set(gauge(memory.held));
        self.max_keys.set(gauge(memory.max));
        let before = self
            .evictions_copied
            .fetch_max(memory.evictions, Ordering::Relaxed);
        self.evictions
            .inc_by(memory.evictions.saturating_sub(before));
    }
}
