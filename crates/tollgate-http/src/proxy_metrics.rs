//! The proxy's own metrics: what its clients got, and how the upstream answered and how fast.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

/// The classes responses are counted by, each present from the start.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The proxy's metrics, registered under `tollgate_proxy_`.
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: Registry,
    requests: Family<ClassLabels, Counter>,
    upstream: Family<ClassLabels, Counter>,
    upstream_seconds: Histogram,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ProxyMetrics {
    /// Fresh metrics.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tollgate_proxy");
        let requests = Family::<ClassLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests the proxy answered, by the class of the status its client got (refusals included)",
            requests.clone(),
        );
        let upstream = Family::<ClassLabels, Counter>::default();
        registry.register(
            "upstream_requests",
            "Requests sent upstream, by the class of the upstream's status, or error (unreachable) and timeout",
            upstream.clone(),
        );
        // 1 ms to about 65 s.
        let upstream_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register(
            "upstream_duration_seconds",
            "Time until the upstream's response head",
            upstream_seconds.clone(),
        );
        for class in CLASSES {
            let _ = requests.get_or_create(&ClassLabels { class });
            let _ = upstream.get_or_create(&ClassLabels { class });
        }
        for class in ["error", "timeout"] {
            let _ = upstream.get_or_create(&ClassLabels { class });
        }
        Self {
            registry,
            requests,
            upstream,
            upstream_seconds,
        }
    }

    /// The registry to expose.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts a response to a client.
    pub fn answered(&self, status: u16) {
        self.requests
            .get_or_create(&ClassLabels {
                class: class_of(status),
            })
            .inc();
    }

    /// Counts an upstream answer (`None`: `error` or `timeout` as `failure` says) after `took`.
    pub fn upstream(&self, status: Result<u16, &'static str>, took: Duration) {
        let class = status.map_or_else(|failure| failure, class_of);
        self.upstream.get_or_create(&ClassLabels { class }).inc();
        self.upstream_seconds.observe(took.as_secs_f64());
    }
}

fn class_of(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
