//! Check latencies in power-of-two buckets, for the quantiles the dashboard shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Latencies in power-of-two buckets of microseconds, for quantiles a dashboard can show (the
/// Prometheus histograms are for Prometheus to aggregate).
pub(super) struct Latencies {
    buckets: [AtomicU64; 32],
}

impl Latencies {
    pub(super) fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub(super) fn observe(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let bucket = (63 - micros.leading_zeros() as usize).min(31);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The upper bound, in microseconds, of the bucket holding quantile `q`.
    pub(super) fn quantile(&self, q: f64) -> Option<u64> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(2u64 << bucket);
            }
        }
        None
    }
}
