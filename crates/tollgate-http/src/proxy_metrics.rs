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

/// The proxy's metrics, registered under `tollgate_proxy_`. Every label value is known from
/// the start, so each counter is kept at hand: found in its family on every request, it took
/// a hash of its labels and the family's lock, which every worker shares.
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: Registry,
    /// By [`CLASSES`].
    requests: [Counter; CLASSES.len()],
    /// By [`CLASSES`].
    upstream: [Counter; CLASSES.len()],
    /// By [`UpstreamFailure`].
    upstream_failed: [Counter; 2],
    upstream_seconds: Histogram,
}

/// Why a request sent upstream got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// The upstream could not be reached, or failed before its response head.
    Error = 0,
    /// No response head within the timeout.
    Timeout = 1,
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
        let counter = |family: &Family<ClassLabels, Counter>, class| {
            family.get_or_create(&ClassLabels { class }).clone()
        };
        Self {
            registry,
            requests: CLASSES.map(|class| counter(&requests, class)),
            upstream_failed: ["error", "timeout"].map(|class| counter(&upstream, class)),
            upstream: CLASSES.map(|class| counter(&upstream, class)),
            upstream_seconds,
        }
    }

    /// The registry to expose.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts a response to a client.
    pub fn answered(&self, status: u16) {
        self.requests[class_of(status)].inc();
    }

    /// Counts an upstream answer, or the failure to get one, after `took`.
    pub fn upstream(&self, status: Result<u16, UpstreamFailure>, took: Duration) {
        match status {
            Ok(status) => self.upstream[class_of(status)].inc(),
            Err(failure) => self.upstream_failed[failure as usize].inc(),
        };
        self.upstream_seconds.observe(took.as_secs_f64());
    }
}

/// The index in [`CLASSES`] of a status's class.
fn class_of(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_is_counted_under_its_class() {
        let metrics = ProxyMetrics::new();
        metrics.answered(200);
        metrics.answered(204);
        metrics.answered(429);
        metrics.upstream(Ok(503), Duration::from_millis(2));
        metrics.upstream(Err(UpstreamFailure::Error), Duration::ZERO);
        metrics.upstream(Err(UpstreamFailure::Timeout), Duration::ZERO);
        metrics.upstream(Err(UpstreamFailure::Timeout), Duration::ZERO);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, metrics.registry()).unwrap();
        for line in [
            r#"tollgate_proxy_requests_total{class="2xx"} 2"#,
            r#"tollgate_proxy_requests_total{class="4xx"} 1"#,
            r#"tollgate_proxy_requests_total{class="5xx"} 0"#,
            r#"tollgate_proxy_upstream_requests_total{class="5xx"} 1"#,
            r#"tollgate_proxy_upstream_requests_total{class="2xx"} 0"#,
            r#"tollgate_proxy_upstream_requests_total{class="error"} 1"#,
            r#"tollgate_proxy_upstream_requests_total{class="timeout"} 2"#,
            "tollgate_proxy_upstream_duration_seconds_count 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
