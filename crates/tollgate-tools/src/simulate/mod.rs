//! `tollgate-tools simulate`: replays a traffic pattern through algorithms with the same quota on a
//! manual clock, and shows what each admits: a summary table and an SVG chart.

pub(crate) mod chart;
mod pattern;

use std::path::PathBuf;
use std::sync::Arc;

use tollgate::{Algorithm, Check, Limit, ManualClock, MemoryStore, Micros, Quota, Store};

pub use pattern::{MAX_ARRIVALS, Pattern};

/// What one algorithm (or, in `tollgate-tools regions`, one region) did with the arrivals.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The algorithm's (or region's) name, the row's label in the chart.
    pub name: String,
    /// When admitted requests arrived.
    pub admitted: Vec<Micros>,
    /// When rejected requests arrived.
    pub rejected: Vec<Micros>,
    /// The most admitted within any span of one period.
    pub peak_per_period: u64,
}

/// `tollgate-tools simulate` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The traffic: steady, burst, boundary, sawtooth, or csv:FILE (arrival times in seconds).
    #[arg(long, default_value = "boundary")]
    pub pattern: Pattern,
    /// The quota every algorithm enforces.
    #[arg(long, default_value = "10/s")]
    pub quota: Quota,
    /// Algorithms to compare, comma-separated, or `all`.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub algorithms: Vec<String>,
    /// How many periods of the quota the generated patterns last.
    #[arg(long, default_value_t = 4)]
    pub periods: u64,
    /// Where to write the SVG chart.
    #[arg(long, default_value = "simulation.svg", value_name = "FILE")]
    pub out: PathBuf,
}

fn algorithms(names: &[String]) -> Result<Vec<Algorithm>, String> {
    if names.iter().any(|name| name == "all") {
        return Ok(Algorithm::ALL.to_vec());
    }
    names
        .iter()
        .map(|name| name.trim().parse::<Algorithm>().map_err(|e| e.to_string()))
        .collect()
}

/// The most of `times` (sorted) within any span of `period`.
pub(crate) fn peak(times: &[Micros], period: Micros) -> u64 {
    let mut start = 0;
    let mut best = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= period {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best as u64
}

/// Replays `arrivals` through `algorithm` enforcing `quota`.
pub async fn replay(
    algorithm: Algorithm,
    quota: Quota,
    arrivals: &[Micros],
) -> Result<Outcome, String> {
    let limit = Limit::new(algorithm.as_str(), algorithm, quota).map_err(|e| e.to_string())?;
    // A day in, so that no window starts at the epoch by accident of the numbers.
    let start: Micros = 86_400_000_000;
    let store = MemoryStore::builder()
        .clock(Arc::new(ManualClock::new(start)))
        .build();
    let check = Check::one("simulated", &limit);
    let mut outcome = Outcome {
        name: algorithm.as_str().to_owned(),
        admitted: Vec::new(),
        rejected: Vec::new(),
        peak_per_period: 0,
    };
    for &time in arrivals {
        let verdict = store
            .check(&check, Some(start + time))
            .await
            .map_err(|e| e.to_string())?;
        if verdict.is_denied() {
            outcome.rejected.push(time);
        } else {
            outcome.admitted.push(time);
        }
    }
    outcome.peak_per_period = peak(&outcome.admitted, quota.period_micros());
    Ok(outcome)
}

/// The summary table.
pub fn table(outcomes: &[Outcome], quota: Quota) -> String {
    let mut out = format!(
        "{:<16} {:>9} {:>9} {:>22}\n",
        "algorithm", "admitted", "rejected", "most in one period"
    );
    for outcome in outcomes {
        out.push_str(&format!(
            "{:<16} {:>9} {:>9} {:>13} ({:.1}x)\n",
            outcome.name,
            outcome.admitted.len(),
            outcome.rejected.len(),
            outcome.peak_per_period,
            outcome.peak_per_period as f64 / quota.count().max(1) as f64
        ));
    }
    out
}

/// Runs the simulation, prints the table and writes the chart.
pub async fn run(args: SimulateArgs) -> Result<(), String> {
    if args.periods == 0 || args.periods > 1_000 {
        return Err("--periods: give 1 to 1000".to_owned());
    }
    let arrivals = args.pattern.arrivals(args.quota, args.periods)?;
    let mut outcomes = Vec::new();
    for algorithm in algorithms(&args.algorithms)? {
        outcomes.push(replay(algorithm, args.quota, &arrivals).await?);
    }
    let period = args.quota.period_micros();
    // The chart shows the arrivals with a margin of a tenth of their span on each side.
    let (first, last) = (
        arrivals.first().copied().unwrap_or(0),
        arrivals.last().copied().unwrap_or(period),
    );
    let margin = ((last - first) / 10).max(1);
    let span = (first.saturating_sub(margin), last + margin);
    let pattern = match &args.pattern {
        Pattern::Csv(path) => format!("arrivals from {path}"),
        other => format!("{other:?}").to_lowercase(),
    };
    let title = format!(
        "{pattern} traffic, {} arrivals, quota {}",
        arrivals.len(),
        args.quota
    );
    std::fs::write(&args.out, chart::svg(&title, &outcomes, span, period))
        .map_err(|error| format!("cannot write {}: {error}", args.out.display()))?;
    println!("{title}");
    print!("{}", table(&outcomes, args.quota));
    println!("chart: {}", args.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(text: &str) -> Quota {
        text.parse().expect("a quota")
    }

    async fn outcomes(pattern: Pattern, quota: Quota) -> Vec<Outcome> {
        let arrivals = pattern.arrivals(quota, 4).expect("arrivals");
        let mut all = Vec::new();
        for algorithm in Algorithm::ALL {
            all.push(replay(algorithm, quota, &arrivals).await.expect("replayed"));
        }
        all
    }

    fn of<'a>(outcomes: &'a [Outcome], name: &str) -> &'a Outcome {
        outcomes.iter().find(|o| o.name == name).expect("simulated")
    }

    #[tokio::test]
    async fn the_boundary_burst_doubles_a_fixed_window_and_nothing_else_exceeds_its_bound() {
        let quota = quota("100/s");
        let all = outcomes(Pattern::Boundary, quota).await;
        assert_eq!(of(&all, "fixed_window").admitted.len(), 200);
        assert_eq!(
            of(&all, "fixed_window").peak_per_period,
            200,
            "2x within a tenth of a second each side"
        );
        assert_eq!(
            of(&all, "sliding_log").peak_per_period,
            100,
            "exact in every span"
        );
        for exact in ["gcra", "leaky_bucket", "token_bucket"] {
            // Bound: the burst plus what refills within the span (about 20 in 0.2 s at 100/s).
            let peak = of(&all, exact).peak_per_period;
            assert!(peak <= 100 + 21, "{exact}: {peak}");
        }
        assert!(of(&all, "sliding_window").peak_per_period < 200);
    }

    #[tokio::test]
    async fn steady_traffic_at_twice_the_rate_is_admitted_at_the_rate() {
        let quota = quota("10/s");
        let all = outcomes(Pattern::Steady, quota).await;
        for outcome in &all {
            let admitted = outcome.admitted.len() as u64;
            // Four seconds at 10/s, plus at most one burst's worth; the sliding window's
            // estimate runs a little under the rate while overloaded.
            assert!(
                (36..=50).contains(&admitted),
                "{}: {admitted}",
                outcome.name
            );
        }
    }

    #[test]
    fn the_chart_is_well_formed_svg() {
        let outcome = Outcome {
            name: "a <b> & c".into(),
            admitted: vec![0, 10, 20],
            rejected: vec![30],
            peak_per_period: 3,
        };
        let svg = chart::svg("t & <title>", &[outcome], (0, 100), 50);
        let document = roxmltree::Document::parse(&svg).expect("well-formed XML");
        assert_eq!(document.root_element().tag_name().name(), "svg");
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
    }

    #[test]
    fn peaks_count_within_a_sliding_span() {
        assert_eq!(peak(&[0, 5, 9, 10, 19], 10), 3);
        assert_eq!(peak(&[], 10), 0);
    }

    #[test]
    fn patterns_are_parsed_and_csv_errors_name_the_line() {
        assert_eq!("burst".parse::<Pattern>(), Ok(Pattern::Burst));
        assert!(
            "bursty"
                .parse::<Pattern>()
                .unwrap_err()
                .contains("unknown pattern")
        );
        let file = tempfile::NamedTempFile::new().expect("a file");
        std::fs::write(file.path(), "seconds\n0.5\n1.0,extra\nsoon\n").expect("written");
        let pattern = Pattern::Csv(file.path().display().to_string());
        let error = pattern.arrivals(quota("1/s"), 1).expect_err("a bad line");
        assert!(
            error.ends_with(":4: \"soon\" is not a number of seconds"),
            "{error}"
        );
        std::fs::write(file.path(), "seconds\n0.5\n1.0,extra\n").expect("written");
        assert_eq!(
            pattern.arrivals(quota("1/s"), 1),
            Ok(vec![500_000, 1_000_000])
        );
    }
}
