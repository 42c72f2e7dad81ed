//! A Prometheus histogram observed without a lock, as the limiter observes one or two on every
//! check: prometheus-client's own takes a mutex per observation, which cost more than the
//! memory store's whole decision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// A classic histogram with prometheus-client's buckets and exposition: a value counts in the
/// first bucket whose upper bound is at least the value (NaN in the last, `+Inf`). Clones share
/// the counts, so one can be registered and another observed.
#[derive(Debug, Clone)]
pub(super) struct Histogram {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// The buckets' upper bounds, ending with `+Inf`.
    bounds: Box<[f64]>,
    /// Observations per bucket (not cumulative), one per bound.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations, as `f64` bits.
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with the finite ones of `bounds` as upper bounds, and `+Inf`.
    pub(super) fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds
            .into_iter()
            .filter(|bound| bound.is_finite())
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        let buckets = bounds.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            inner: Arc::new(Counts {
                bounds,
                buckets,
                sum: AtomicU64::new(0.0_f64.to_bits()),
            }),
        }
    }

    /// Counts `value`.
    pub(super) fn observe(&self, value: f64) {
        let counts = &*self.inner;
        let last = counts.bounds.len() - 1;
        let bucket = if value.is_nan() {
            last
        } else {
            counts
                .bounds
                .iter()
                .position(|bound| *bound >= value)
                .unwrap_or(last)
        };
        counts.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Never fails: the closure always returns a value.
        let _ = counts
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| {
                Some((f64::from_bits(sum) + value).to_bits())
            });
    }
}

impl EncodeMetric for Histogram {
    /// The count is the buckets' total, so a scrape never shows a count its buckets disagree
    /// with.
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counts = &*self.inner;
        let buckets: Vec<(f64, u64)> = counts
            .bounds
            .iter()
            .zip(counts.buckets.iter())
            .map(|(bound, count)| (*bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, count)| count).sum();
        let sum = f64::from_bits(counts.sum.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    /// The exposition of prometheus-client's own histogram after the same observations.
    fn as_prometheus_client_shows(bounds: &[f64], values: &[f64]) -> String {
        let theirs = prometheus_client::metrics::histogram::Histogram::new(bounds.iter().copied());
        values.iter().for_each(|value| theirs.observe(*value));
        let mut registry = Registry::default();
        registry.register("took", "Time taken", theirs);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    #[test]
    fn it_shows_what_prometheus_client_shows_for_the_same_observations() {
        let bounds = [0.001, 0.01, 0.1, f64::INFINITY];
        let values = [0.0005, 0.001, 0.002, 0.5, 7.0, 0.01];
        let ours = Histogram::new(bounds);
        values.iter().for_each(|value| ours.observe(*value));
        let mut registry = Registry::default();
        registry.register("took", "Time taken", ours);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert_eq!(text, as_prometheus_client_shows(&bounds, &values));
    }
}
