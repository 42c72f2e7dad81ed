//! The summary `tollgate-tools bench` prints: throughput, the allowed/denied split, latency
//! percentiles and a latency distribution.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;

/// What a run measured.
#[derive(Debug)]
pub struct Summary {
    /// What was driven.
    pub target: String,
    /// How it was driven (workers, duration, rate).
    pub load: String,
    /// How long the run took.
    pub elapsed: Duration,
    /// Answers that admitted.
    pub allowed: u64,
    /// Answers that refused.
    pub denied: u64,
    /// Requests that got no proper answer.
    pub failed: u64,
    /// The first failure, to say what went wrong.
    pub first_failure: Option<String>,
    /// Latencies in microseconds.
    pub latency: Histogram<u64>,
}

/// The percentiles reported.
const PERCENTILES: [(&str, f64); 4] =
    [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)];

/// The upper bounds of the distribution's rows, in microseconds.
const BUCKETS: [u64; 11] = [
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    50_000,
    100_000,
    u64::MAX,
];

fn ms(micros: u64) -> String {
    format!("{:.3} ms", micros as f64 / 1_000.0)
}

/// `n` with a comma between thousands.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

impl Summary {
    fn requests(&self) -> u64 {
        self.allowed + self.denied + self.failed
    }

    fn throughput(&self) -> f64 {
        self.requests() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    fn share(&self, part: u64) -> f64 {
        100.0 * part as f64 / self.requests().max(1) as f64
    }

    /// The summary for people.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "tollgate bench: {} ({})", self.target, self.load);
        let _ = writeln!(
            out,
            "  requests  {} in {:.2} s = {}/s",
            thousands(self.requests()),
            self.elapsed.as_secs_f64(),
            thousands(self.throughput().round() as u64)
        );
        let _ = writeln!(
            out,
            "  answers   allowed {} ({:.1}%)  denied {} ({:.1}%)  failed {}",
            thousands(self.allowed),
            self.share(self.allowed),
            thousands(self.denied),
            self.share(self.denied),
            thousands(self.failed)
        );
        if let Some(failure) = &self.first_failure {
            let _ = writeln!(out, "  first failure: {failure}");
        }
        if self.latency.is_empty() {
            return out;
        }
        let percentiles: Vec<String> = PERCENTILES
            .iter()
            .map(|(name, p)| format!("{name} {}", ms(self.latency.value_at_percentile(*p))))
            .collect();
        let _ = writeln!(
            out,
            "  latency   {}  max {}",
            percentiles.join("  "),
            ms(self.latency.max())
        );
        let _ = writeln!(out, "  distribution");
        let total = self.latency.len().max(1);
        let mut below = 0;
        for bound in BUCKETS {
            let upto = if bound == u64::MAX {
                self.latency.len()
            } else {
                self.latency.count_between(0, bound)
            };
            let count = upto - below;
            below = upto;
            if count == 0 {
                continue;
            }
            let label = if bound == u64::MAX {
                "slower".to_owned()
            } else {
                format!("≤ {}", ms(bound))
            };
            let share = count as f64 / total as f64;
            let bar = "█".repeat((share * 40.0).round() as usize);
            let _ = writeln!(out, "    {label:>12}  {bar:<40} {:>5.1}%", 100.0 * share);
        }
        out
    }

    /// The summary as JSON, for scripts.
    pub fn to_json(&self) -> serde_json::Value {
        let percentile = |p: f64| self.latency.value_at_percentile(p) as f64 / 1_000.0;
        json!({
            "target": self.target,
            "load": self.load,
            "seconds": self.elapsed.as_secs_f64(),
            "requests": self.requests(),
            "throughput_per_second": self.throughput(),
            "allowed": self.allowed,
            "denied": self.denied,
            "failed": self.failed,
            "first_failure": self.first_failure,
            "latency_ms": {
                "p50": percentile(50.0),
                "p90": percentile(90.0),
                "p99": percentile(99.0),
                "p99.9": percentile(99.9),
                "max": self.latency.max() as f64 / 1_000.0,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_shows_the_split_the_percentiles_and_the_distribution() {
        let mut latency = Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        for micros in 1..=1_000 {
            latency.record(micros).expect("in range");
        }
        let summary = Summary {
            target: "POST http://x/v1/check".into(),
            load: "4 workers for 1s".into(),
            elapsed: Duration::from_secs(2),
            allowed: 750,
            denied: 250,
            failed: 0,
            first_failure: None,
            latency,
        };
        let text = summary.render();
        assert!(text.contains("requests  1,000 in 2.00 s = 500/s"), "{text}");
        assert!(
            text.contains("allowed 750 (75.0%)  denied 250 (25.0%)  failed 0"),
            "{text}"
        );
        assert!(
            text.contains("p50 0.500 ms  p90 0.900 ms  p99 0.990 ms"),
            "{text}"
        );
        assert!(text.contains("≤ 0.050 ms"), "{text}");
        assert!(!text.contains("slower"), "{text}");
        assert_eq!(summary.to_json()["latency_ms"]["p90"], 0.9);
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
