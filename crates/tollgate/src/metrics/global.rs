//! The global tier's metrics: its leases' units, the global store calls and the checks that
//! waited or were denied here, copied from the tier's own counters when metrics are read.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::layer::GlobalStats;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GlobalCheckLabels {
    answer: &'static str,
}

/// The global tier's counts, copied from its own counters when metrics are read.
#[derive(Debug, Default)]
pub(super) struct GlobalMetrics {
    units: Family<LeaseLabels, Counter>,
    held: Gauge,
    calls: Counter,
    checks: Family<GlobalCheckLabels, Counter>,
    /// Copies run one at a time, so that each counter moves up by exactly what is new.
    copying: Mutex<()>,
}

impl GlobalMetrics {
    /// Registers the global tier's metrics.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "global_lease_units",
            "Units of global limits leased from the global store, spent here, returned unspent, or stranded (expired unspent)",
            metrics.units.clone(),
        );
        registry.register(
            "global_lease_units_held",
            "Units of global limits this node holds now",
            metrics.held.clone(),
        );
        registry.register(
            "global_store_calls",
            "Calls to the global store: leases, returns, refunds",
            metrics.calls.clone(),
        );
        registry.register(
            "global_checks",
            "Checks of global limits that waited for the global store, or were denied here while its denial lasted",
            metrics.checks.clone(),
        );
        metrics
    }

    /// Raises each metric to the global tier's count.
    pub(super) fn copy(&self, stats: &GlobalStats) {
        let _one = self.copying.lock().unwrap_or_else(|e| e.into_inner());
        let raise = |counter: &Counter, to: u64| {
            let now = counter.get();
            if to > now {
                counter.inc_by(to - now);
            }
        };
        for (event, units) in [
            ("leased", stats.leased),
            ("spent", stats.spent),
            ("returned", stats.returned),
            ("stranded", stats.stranded),
        ] {
            raise(&self.units.get_or_create(&LeaseLabels { event }), units);
        }
        self.held.set(i64::try_from(stats.held).unwrap_or(i64::MAX));
        raise(&self.calls, stats.store_calls);
        for (answer, checks) in [
            ("waited", stats.checks_waited),
            ("denied_here", stats.checks_denied_here),
        ] {
            raise(
                &self.checks.get_or_create(&GlobalCheckLabels { answer }),
                checks,
            );
        }
    }
}
