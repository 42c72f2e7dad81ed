//! Traffic patterns for the simulator: arrival times in microseconds from the start.

use std::path::Path;

use tollgate::{Micros, Quota};

/// The most arrivals a simulation replays.
pub const MAX_ARRIVALS: usize = 1_000_000;

/// A named pattern, scaled to a quota of `count` per `period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Twice the quota's rate, evenly spaced.
    Steady,
    /// Three quotas at once in the middle of the second period, nothing else.
    Burst,
    /// A quota in the last tenth of a period and another in the first tenth of the next: the
    /// fixed window's boundary burst.
    Boundary,
    /// The rate climbs from nothing to three times the quota's over each period, then drops.
    Sawtooth,
    /// Arrival times in seconds, the first field of each line of a CSV file.
    Csv(String),
}

impl std::str::FromStr for Pattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "steady" => Ok(Pattern::Steady),
            "burst" => Ok(Pattern::Burst),
            "boundary" => Ok(Pattern::Boundary),
            "sawtooth" => Ok(Pattern::Sawtooth),
            other => match other.strip_prefix("csv:") {
                Some(path) if !path.is_empty() => Ok(Pattern::Csv(path.to_owned())),
                _ => Err(format!(
                    "unknown pattern {other:?} (expected steady, burst, boundary, sawtooth or csv:FILE)"
                )),
            },
        }
    }
}

impl Pattern {
    /// The arrivals over `periods` periods of `quota`.
    pub fn arrivals(&self, quota: Quota, periods: u64) -> Result<Vec<Micros>, String> {
        let count = quota.count().max(1);
        let period = quota.period_micros();
        let span = period.saturating_mul(periods);
        let mut times = match self {
            Pattern::Steady => {
                let total = count.saturating_mul(2).saturating_mul(periods);
                let gap = (period / (2 * count)).max(1);
                (0..total).map(|i| i * gap).collect()
            }
            Pattern::Burst => vec![period + period / 2; (count * 3) as usize],
            Pattern::Boundary => {
                let tenth = period / 10;
                let step = (tenth / count).max(1);
                let before = (0..count).map(|i| period - tenth + i * step);
                let after = (0..count).map(|i| period + i * step);
                before.chain(after).collect()
            }
            Pattern::Sawtooth => {
                // Within a period the rate rises linearly: the i-th of n arrivals comes at
                // period * sqrt(i / n), for n = 1.5 quotas a period.
                let per_period = count * 3 / 2;
                (0..periods)
                    .flat_map(|p| {
                        (0..per_period).map(move |i| {
                            let fraction = (i as f64 / per_period as f64).sqrt();
                            p * period + (fraction * period as f64) as Micros
                        })
                    })
                    .collect()
            }
            Pattern::Csv(path) => read_csv(Path::new(path))?,
        };
        if times.len() > MAX_ARRIVALS {
            return Err(format!(
                "the pattern has {} arrivals; the most is {MAX_ARRIVALS}",
                times.len()
            ));
        }
        times.sort_unstable();
        if !matches!(self, Pattern::Csv(_)) {
            times.retain(|t| *t < span.max(1));
        }
        Ok(times)
    }
}

fn read_csv(path: &Path) -> Result<Vec<Micros>, String> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|error| format!("{shown}: {error}"))?;
    if metadata.len() > 64 << 20 {
        return Err(format!("{shown}: larger than 64 MiB"));
    }
    let text = std::fs::read_to_string(path).map_err(|error| format!("{shown}: {error}"))?;
    let mut times = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let field = line.split(',').next().unwrap_or("").trim();
        if field.is_empty()
            || field.starts_with('#')
            || (number == 0 && field.parse::<f64>().is_err())
        {
            continue;
        }
        let seconds: f64 = field.parse().map_err(|_| {
            format!(
                "{shown}:{}: {field:?} is not a number of seconds",
                number + 1
            )
        })?;
        if !(0.0..=1e9).contains(&seconds) {
            return Err(format!(
                "{shown}:{}: {seconds} is not a time from 0 to 1e9 seconds",
                number + 1
            ));
        }
        times.push((seconds * 1e6) as Micros);
        if times.len() > MAX_ARRIVALS {
            return Err(format!("{shown}: more than {MAX_ARRIVALS} arrivals"));
        }
    }
    if times.is_empty() {
        return Err(format!("{shown}: no arrival times"));
    }
    Ok(times)
}
