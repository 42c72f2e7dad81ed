//! What the clients of one region saw, and the windows of the global limit it fell into.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use tollgate::Micros;

use crate::bench::new_histogram;

/// Checks offered and admitted in one window of the global limit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) offered: u64,
    pub(super) admitted: u64,
}

/// One region's answers: when each check was sent (Unix microseconds), by outcome; the
/// windows they count in, by the window's start; and the latencies.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) admitted: Vec<Micros>,
    pub(super) denied: Vec<Micros>,
    pub(super) failed: u64,
    pub(super) first_failure: Option<String>,
    pub(super) windows: BTreeMap<Micros, Window>,
    pub(super) latency: Histogram<u64>,
}

impl Default for Record {
    fn default() -> Self {
        Self {
            admitted: Vec::new(),
            denied: Vec::new(),
            failed: 0,
            first_failure: None,
            windows: BTreeMap::new(),
            latency: new_histogram(),
        }
    }
}

/// The start of the window `at` falls in.
pub(super) fn window_of(at: Micros, period: Micros) -> Micros {
    at - at % period.max(1)
}

/// The start of the window an admitted check was counted in, from when its answer arrived and
/// the time its answer said was left in the window: the window whose end is nearest. A check
/// sent just before a boundary may be admitted from either window, so the time it was sent
/// cannot tell; an answer that arrives after its window ended says zero is left, and the end
/// nearest to its arrival is then the one just passed.
pub(super) fn admitted_in(received: Micros, reset_after: Micros, period: Micros) -> Micros {
    let period = period.max(1);
    let end = received.saturating_add(reset_after);
    let nearest_end = (end + period / 2) / period * period;
    nearest_end.saturating_sub(period)
}

/// What a check API answer says beyond whether it admitted.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Reading {
    /// `reset_after_ms` of its first decision, in microseconds.
    pub(super) reset_after: Option<Micros>,
    /// Why the limiter could not decide, when a policy failed open or closed: not an answer
    /// of the limit, so it counts as a failure rather than an admission or a denial.
    pub(super) undecided: Option<String>,
}

/// Reads a check API answer.
pub(super) fn read(body: &[u8]) -> Reading {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let millis = answer["decisions"][0]["reset_after_ms"].as_u64();
    let undecided = match answer["decided_by"].as_str() {
        Some(how @ ("fail_open" | "fail_closed")) => Some(format!(
            "{how}: {}",
            answer["detail"].as_str().unwrap_or("no detail")
        )),
        _ => None,
    };
    Reading {
        reset_after: millis.map(|millis| millis.saturating_mul(1_000)),
        undecided,
    }
}

impl Record {
    /// Counts a check sent at `sent` and offered in `window`.
    pub(super) fn offered(&mut self, sent: Micros, period: Micros) {
        self.windows
            .entry(window_of(sent, period))
            .or_default()
            .offered += 1;
    }

    /// Counts a check sent at `sent`, admitted in the window starting at `window`.
    pub(super) fn admit(&mut self, sent: Micros, window: Micros) {
        self.admitted.push(sent);
        self.windows.entry(window).or_default().admitted += 1;
    }

    /// Adds another worker's record of the same region.
    pub(super) fn merge(&mut self, other: Self) -> Result<(), String> {
        self.admitted.extend(other.admitted);
        self.denied.extend(other.denied);
        self.failed += other.failed;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
        for (start, window) in other.windows {
            let mine = self.windows.entry(start).or_default();
            mine.offered += window.offered;
            mine.admitted += window.admitted;
        }
        self.latency
            .add(&other.latency)
            .map_err(|error| format!("cannot merge latencies: {error}"))
    }

    /// Checks sent.
    pub(super) fn offered_total(&self) -> u64 {
        self.admitted.len() as u64 + self.denied.len() as u64 + self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Micros = 60_000_000;

    #[test]
    fn an_admission_counts_in_the_window_its_answer_says() {
        let start = 100 * MINUTE;
        // Mid-window: 20 s left.
        assert_eq!(admitted_in(start + 40_000_000, 20_000_000, MINUTE), start);
        // Sent before the boundary, admitted from the next window's lease.
        assert_eq!(
            admitted_in(start + MINUTE + 3_000, MINUTE - 3_000, MINUTE),
            start + MINUTE
        );
        // Admitted from the ending window's lease, answered after the boundary.
        assert_eq!(admitted_in(start + MINUTE + 3_000, 0, MINUTE), start);
        assert_eq!(window_of(start + MINUTE - 1, MINUTE), start);
    }

    #[test]
    fn answers_are_read_for_their_reset_and_whether_the_limiter_decided() {
        let body =
            br#"{"allowed":true,"decided_by":"store","decisions":[{"reset_after_ms":1500}]}"#;
        assert_eq!(
            read(body),
            Reading {
                reset_after: Some(1_500_000),
                undecided: None
            }
        );
        let closed =
            br#"{"allowed":false,"decided_by":"fail_closed","detail":"timeout","decisions":[]}"#;
        assert_eq!(
            read(closed).undecided.as_deref(),
            Some("fail_closed: timeout")
        );
        assert_eq!(read(b"{}").reset_after, None);
    }

    #[test]
    fn records_merge_window_by_window() {
        let mut a = Record::default();
        a.offered(5, 10);
        a.admit(5, 0);
        let mut b = Record::default();
        b.offered(12, 10);
        b.offered(3, 10);
        b.denied.push(12);
        b.failed = 1;
        a.merge(b).expect("merged");
        assert_eq!(
            a.windows[&0],
            Window {
                offered: 2,
                admitted: 1
            }
        );
        assert_eq!(
            a.windows[&10],
            Window {
                offered: 1,
                admitted: 0
            }
        );
        assert_eq!(a.offered_total(), 3);
    }
}
