//! What `tollgate-tools regions` prints: a row per region, a row per window of the global limit,
//! the totals against the quota, and the chart of admissions over time.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use tollgate::{Micros, Quota};

use super::Region;
use super::record::{Record, Window};
use crate::bench::thousands;
use crate::simulate::{Outcome, chart, peak};

/// What a region's server says its leases on the global store did (`/admin/stats`, `global`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct LeaseStats {
    pub(super) store_calls: u64,
    pub(super) stranded: u64,
    pub(super) checks_waited: u64,
}

impl LeaseStats {
    /// Reads the `global` object of an `/admin/stats` answer.
    pub(super) fn from_admin(body: &[u8]) -> Result<Self, String> {
        let stats: serde_json::Value = serde_json::from_slice(body)
            .map_err(|error| format!("/admin/stats is not JSON: {error}"))?;
        let global = &stats["global"];
        let field = |name: &str| {
            global[name]
                .as_u64()
                .ok_or_else(|| format!("/admin/stats has no global.{name}"))
        };
        Ok(Self {
            store_calls: field("store_calls")?,
            stranded: field("stranded")?,
            checks_waited: field("checks_waited")?,
        })
    }
}

/// One region's line.
pub(super) struct Row {
    pub(super) region: Region,
    pub(super) record: Record,
    /// The latencies of a regional limit's checks, sent to the same server at the same time.
    pub(super) baseline: Histogram<u64>,
    pub(super) stats: LeaseStats,
}

/// A whole run.
pub(super) struct Report {
    pub(super) quota: Quota,
    pub(super) rate: f64,
    pub(super) seconds: u64,
    pub(super) rows: Vec<Row>,
}

fn ms(micros: u64) -> String {
    format!("{:.3}", micros as f64 / 1_000.0)
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * part as f64 / whole.max(1) as f64)
}

/// `hh:mm:ss` of a time in Unix microseconds, in UTC.
fn clock_time(at: Micros) -> String {
    let seconds = at / 1_000_000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3_600,
        seconds / 60 % 60,
        seconds % 60
    )
}

impl Report {
    /// Every region's checks, window by window.
    pub(super) fn windows(&self) -> BTreeMap<Micros, Window> {
        let mut all: BTreeMap<Micros, Window> = BTreeMap::new();
        for row in &self.rows {
            for (start, window) in &row.record.windows {
                let total = all.entry(*start).or_default();
                total.offered += window.offered;
                total.admitted += window.admitted;
            }
        }
        all
    }

    /// The windows in which the regions together admitted more than the quota.
    pub(super) fn overruns(&self) -> Vec<(Micros, u64)> {
        self.windows()
            .into_iter()
            .filter(|(_, window)| window.admitted > self.quota.count())
            .map(|(start, window)| (start, window.admitted))
            .collect()
    }

    /// The table.
    pub(super) fn render(&self) -> String {
        let offered: u64 = self.rows.iter().map(|r| r.record.offered_total()).sum();
        let admitted: u64 = self
            .rows
            .iter()
            .map(|r| r.record.admitted.len() as u64)
            .sum();
        let calls: u64 = self.rows.iter().map(|r| r.stats.store_calls).sum();
        let stranded: u64 = self.rows.iter().map(|r| r.stats.stranded).sum();
        let waited: u64 = self.rows.iter().map(|r| r.stats.checks_waited).sum();
        let mut out = String::new();
        self.render_heading(&mut out, offered);
        self.render_regions(&mut out);
        let _ = writeln!(
            out,
            "{:<9} {:>10} {:>5} {:>9} {:>9} {:>7} {:>7} {:>8} {:>7} {:>6} {:>8}",
            "total",
            "",
            "",
            thousands(offered),
            thousands(admitted),
            "",
            "",
            "",
            thousands(waited),
            thousands(calls),
            thousands(stranded),
        );
        self.render_baseline(&mut out);
        self.render_windows(&mut out);
        let _ = writeln!(
            out,
            "global store calls per admitted check: {} ({} calls, {} admitted)",
            percent(calls, admitted),
            thousands(calls),
            thousands(admitted)
        );
        for row in &self.rows {
            if let Some(failure) = &row.record.first_failure {
                let _ = writeln!(
                    out,
                    "{}: {} checks failed, the first: {failure}",
                    row.region.name,
                    thousands(row.record.failed)
                );
            }
        }
        out
    }

    /// What was run: the limit, the regions, the load and how latency is measured.
    fn render_heading(&self, out: &mut String, offered: u64) {
        let quota = self.quota.count();
        let _ = writeln!(
            out,
            "one global limit, {} (fixed window), shared by {} regions, each with a Redis of its own",
            self.quota,
            self.rows.len()
        );
        let _ = writeln!(
            out,
            "load: {} checks/s in total for {} s, open loop: {} checks, {:.1}x the quota over the run",
            self.rate,
            self.seconds,
            thousands(offered),
            offered as f64 / quota.max(1) as f64
        );
        let _ = writeln!(
            out,
            "round trip added between each region and the global store: half each way, by a delaying proxy"
        );
        let _ = writeln!(
            out,
            "latency: the client's HTTP round trip to its region on loopback, from when the check was due\n"
        );
    }

    /// The table's head and a row per region.
    fn render_regions(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<9} {:>10} {:>5} {:>9} {:>9} {:>7} {:>7} {:>8} {:>7} {:>6} {:>8}",
            "region",
            "round trip",
            "load",
            "offered",
            "admitted",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "waited",
            "calls",
            "stranded"
        );
        for row in &self.rows {
            let latency = &row.record.latency;
            let _ = writeln!(
                out,
                "{:<9} {:>7} ms {:>5} {:>9} {:>9} {:>7} {:>7} {:>8} {:>7} {:>6} {:>8}",
                row.region.name,
                row.region.round_trip_ms,
                format!("{}%", row.region.share_percent),
                thousands(row.record.offered_total()),
                thousands(row.record.admitted.len() as u64),
                ms(latency.value_at_percentile(50.0)),
                ms(latency.value_at_percentile(99.0)),
                ms(latency.value_at_percentile(99.9)),
                thousands(row.stats.checks_waited),
                thousands(row.stats.store_calls),
                thousands(row.stats.stranded),
            );
        }
    }

    /// The baseline: the same servers' latency at the same time for a limit counted in the
    /// region alone, and what the global limit's checks took beyond it.
    fn render_baseline(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nbaseline, sent beside the load: a regional limit's checks on the same servers\n\
             {:<9} {:>9} {:>7} {:>7} {:>8} {:>15}",
            "region", "checks", "p50 ms", "p99 ms", "p99.9 ms", "global p99 more"
        );
        for row in &self.rows {
            let baseline = &row.baseline;
            let global = row.record.latency.value_at_percentile(99.0);
            let regional = baseline.value_at_percentile(99.0);
            let _ = writeln!(
                out,
                "{:<9} {:>9} {:>7} {:>7} {:>8} {:>15}",
                row.region.name,
                thousands(baseline.len()),
                ms(baseline.value_at_percentile(50.0)),
                ms(regional),
                ms(baseline.value_at_percentile(99.9)),
                format!(
                    "{}{}",
                    if global < regional { "-" } else { "+" },
                    ms(global.abs_diff(regional))
                ),
            );
        }
    }

    /// The windows, their totals against the quota, and the utilisation.
    fn render_windows(&self, out: &mut String) {
        let quota = self.quota.count();
        let windows = self.windows();
        let _ = writeln!(
            out,
            "\n{:<15} {:>9} {:>9} {:>9} {:>7}",
            "window (UTC)", "offered", "admitted", "quota", "used"
        );
        let (mut admitted, mut allowed, mut most) = (0, 0, 0);
        for (start, window) in &windows {
            // What the quota let through of what was offered: all of it, up to the quota.
            let could = window.offered.min(quota);
            admitted += window.admitted;
            allowed += could;
            most = most.max(window.admitted);
            let _ = writeln!(
                out,
                "{:<15} {:>9} {:>9} {:>9} {:>7}{}",
                clock_time(*start),
                thousands(window.offered),
                thousands(window.admitted),
                thousands(quota),
                percent(window.admitted, could),
                if window.admitted > quota {
                    "  ABOVE THE QUOTA"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(out);
        if self.overruns().is_empty() {
            let _ = writeln!(
                out,
                "total admitted never above the quota: at most {} of {} in one window",
                thousands(most),
                thousands(quota)
            );
        } else {
            let _ = writeln!(
                out,
                "total admitted ABOVE THE QUOTA: {} of {} in one window",
                thousands(most),
                thousands(quota)
            );
        }
        let _ = writeln!(
            out,
            "quota utilisation: {} (admitted, of what the quota allowed of the load in each window)",
            percent(admitted, allowed)
        );
    }

    /// The chart: a row per region and one for all, admitted and rejected checks over time,
    /// in seconds from the start of the first window; dashed lines where windows end.
    pub(super) fn svg(&self) -> String {
        let period = self.quota.period_micros();
        let sent = self
            .rows
            .iter()
            .flat_map(|row| row.record.admitted.iter().chain(&row.record.denied));
        let first = sent.clone().min().copied().unwrap_or(0);
        let last = sent.max().copied().unwrap_or(first);
        let origin = first - first % period.max(1);
        let outcome = |name: String, admitted: Vec<Micros>, denied: Vec<Micros>| {
            let mut admitted: Vec<Micros> = admitted.iter().map(|t| t - origin).collect();
            admitted.sort_unstable();
            Outcome {
                name,
                peak_per_period: peak(&admitted, period),
                admitted,
                rejected: denied.iter().map(|t| t - origin).collect(),
            }
        };
        let mut outcomes: Vec<Outcome> = self
            .rows
            .iter()
            .map(|row| {
                outcome(
                    format!("{} ({} ms)", row.region.name, row.region.round_trip_ms),
                    row.record.admitted.clone(),
                    row.record.denied.clone(),
                )
            })
            .collect();
        let every = |pick: fn(&Record) -> &Vec<Micros>| {
            self.rows
                .iter()
                .flat_map(|row| pick(&row.record).iter().copied())
                .collect()
        };
        outcomes.push(outcome(
            "all regions".to_owned(),
            every(|record| &record.admitted),
            every(|record| &record.denied),
        ));
        let title = format!(
            "one global {} limit, {} regions: checks over time",
            self.quota,
            self.rows.len()
        );
        chart::svg(&title, &outcomes, (first - origin, last - origin), period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, windows: &[(Micros, u64, u64)]) -> Row {
        let mut record = Record::default();
        for &(start, offered, admitted) in windows {
            for n in 0..offered {
                record.offered(start + n, 1_000_000);
                if n < admitted {
                    record.admit(start + n, start);
                } else {
                    record.denied.push(start + n);
                }
            }
        }
        Row {
            region: Region {
                name,
                round_trip_ms: 40,
                share_percent: 50,
            },
            record,
            baseline: {
                let mut baseline = crate::bench::new_histogram();
                baseline.record(1_500).expect("a latency in range");
                baseline
            },
            stats: LeaseStats {
                store_calls: 3,
                stranded: 1,
                checks_waited: 2,
            },
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        Report {
            quota: "10/s".parse().expect("a quota"),
            rate: 30.0,
            seconds: 2,
            rows,
        }
    }

    #[test]
    fn the_table_totals_the_regions_window_by_window() {
        let report = report(vec![
            row("a", &[(0, 20, 6), (1_000_000, 20, 7)]),
            row("b", &[(0, 10, 4), (1_000_000, 10, 3)]),
        ]);
        assert!(report.overruns().is_empty());
        let text = report.render();
        assert!(
            text.contains("total admitted never above the quota: at most 10 of 10"),
            "{text}"
        );
        assert!(text.contains("quota utilisation: 100.0%"), "{text}");
        assert!(
            text.lines()
                .any(|line| line.starts_with("a ") && line.ends_with("1.500          -1.500")),
            "the baseline's row: {text}"
        );
        assert!(
            text.contains("global store calls per admitted check: 30.0% (6 calls, 20 admitted)"),
            "{text}"
        );
        let svg = report.svg();
        roxmltree::Document::parse(&svg).expect("well-formed SVG");
        assert!(svg.contains("all regions"), "{svg}");
    }

    #[test]
    fn a_window_above_the_quota_is_reported() {
        let report = report(vec![row("a", &[(0, 20, 8)]), row("b", &[(0, 20, 3)])]);
        assert_eq!(report.overruns(), vec![(0, 11)]);
        assert!(report.render().contains("ABOVE THE QUOTA"));
    }

    #[test]
    fn stats_are_read_from_the_admin_answer() {
        let body = br#"{"global":{"store_calls":7,"stranded":2,"checks_waited":1,"leased":9}}"#;
        assert_eq!(
            LeaseStats::from_admin(body),
            Ok(LeaseStats {
                store_calls: 7,
                stranded: 2,
                checks_waited: 1
            })
        );
        assert_eq!(
            LeaseStats::from_admin(b"{\"global\":null}"),
            Err("/admin/stats has no global.store_calls".to_owned())
        );
    }
}
