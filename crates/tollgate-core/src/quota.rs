//! Quotas: how much per how long, such as `10/s`, `100/30s`, `5/5m`, `1000/h`, `10000/d` or `1/w`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::clock::{Micros, duration_to_micros};

/// The longest period a quota may have: ten years of 365 days. Keeping periods bounded keeps
/// every intermediate value of every algorithm below 2^53, where Lua's numbers stay exact.
pub const MAX_PERIOD_MICROS: Micros = 10 * 365 * 86_400 * 1_000_000;

/// The largest count a quota may have (2^40, about 10^12).
pub const MAX_COUNT: u64 = 1 << 40;

/// How much per how long: `count` units every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u64,
    period: Micros,
}

/// Why a quota was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The text is not of the form `<count>/<period>`.
    #[error(
        "quota {text:?}: expected <count>/<period>, such as 10/s, 100/30s, 5/5m, 1000/h or 10000/d"
    )]
    Syntax {
        /// The text that was given.
        text: String,
    },
    /// The count is not a whole number.
    #[error("quota {text:?}: the count {count:?} is not a whole number")]
    Count {
        /// The text that was given.
        text: String,
        /// The count part of it.
        count: String,
    },
    /// A duration that is not a number followed by a unit.
    #[error("duration {text:?}: expected a number and a unit, such as 100ms, 30s, 5m or 1h")]
    Duration {
        /// The text that was given.
        text: String,
    },
    /// The period's unit is unknown.
    #[error(
        "quota {text:?}: unknown unit {unit:?} (expected one of: us, ms, s, m, min, h, d, w, mo, y, or their long names)"
    )]
    Unit {
        /// The text that was given.
        text: String,
        /// The unit part of it.
        unit: String,
    },
    /// The period is zero.
    #[error("quota {text}: the period must be longer than zero")]
    ZeroPeriod {
        /// The quota as written.
        text: String,
    },
    /// The period is longer than [`MAX_PERIOD_MICROS`].
    #[error("quota {text}: the period is longer than the maximum of ten years")]
    PeriodTooLong {
        /// The quota as written.
        text: String,
    },
    /// The count is larger than [`MAX_COUNT`].
    #[error("quota {text}: the count is larger than the maximum of {MAX_COUNT}")]
    CountTooLarge {
        /// The quota as written.
        text: String,
    },
}

impl Quota {
    /// `count` units every `period`.
    pub fn new(count: u64, period: Duration) -> Result<Self, QuotaError> {
        Self::from_micros(count, duration_to_micros(period))
    }

    /// `count` units every `period` microseconds.
    pub fn from_micros(count: u64, period: Micros) -> Result<Self, QuotaError> {
        Self::checked(count, period, || format!("{count}/{}", period_text(period)))
    }

    /// Checks the bounds; `text` writes the quota for messages.
    fn checked(count: u64, period: Micros, text: impl Fn() -> String) -> Result<Self, QuotaError> {
        if period == 0 {
            return Err(QuotaError::ZeroPeriod { text: text() });
        }
        if period > MAX_PERIOD_MICROS {
            return Err(QuotaError::PeriodTooLong { text: text() });
        }
        if count > MAX_COUNT {
            return Err(QuotaError::CountTooLarge { text: text() });
        }
        Ok(Self { count, period })
    }

    /// `count` per second.
    pub fn per_second(count: u64) -> Result<Self, QuotaError> {
        Self::from_micros(count, SECOND)
    }

    /// `count` per minute.
    pub fn per_minute(count: u64) -> Result<Self, QuotaError> {
        Self::from_micros(count, 60 * SECOND)
    }

    /// `count` per hour.
    pub fn per_hour(count: u64) -> Result<Self, QuotaError> {
        Self::from_micros(count, 3_600 * SECOND)
    }

    /// `count` per day.
    pub fn per_day(count: u64) -> Result<Self, QuotaError> {
        Self::from_micros(count, 86_400 * SECOND)
    }

    /// How many units per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period in microseconds.
    pub fn period_micros(&self) -> Micros {
        self.period
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period)
    }
}

const SECOND: Micros = 1_000_000;

/// Units a period may be written in, longest names first within each unit.
const UNITS: &[(&[&str], Micros)] = &[
    (
        &["us", "µs", "micro", "micros", "microsecond", "microseconds"],
        1,
    ),
    (
        &["ms", "milli", "millis", "millisecond", "milliseconds"],
        1_000,
    ),
    (&["s", "sec", "secs", "second", "seconds"], SECOND),
    (&["m", "min", "mins", "minute", "minutes"], 60 * SECOND),
    (&["h", "hr", "hrs", "hour", "hours"], 3_600 * SECOND),
    (&["d", "day", "days"], 86_400 * SECOND),
    (&["w", "wk", "week", "weeks"], 7 * 86_400 * SECOND),
];

/// Units read but never written: a flat month of 30 days and year of 365 (a quota with a
/// calendar counts real months and years instead). Not written, so that `30d` keeps its name.
const LONG_UNITS: &[(&[&str], Micros)] = &[
    (&["mo", "month", "months"], 30 * 86_400 * SECOND),
    (&["y", "yr", "year", "years"], 365 * 86_400 * SECOND),
];

/// Parses a period such as `s`, `30s`, `5m` or `2 hours` into microseconds.
fn parse_period(text: &str, whole: &str) -> Result<Micros, QuotaError> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let unit = unit.trim();
    let multiplier = if number.is_empty() {
        1
    } else {
        number
            .parse::<u64>()
            .map_err(|_| QuotaError::PeriodTooLong {
                text: whole.trim().to_owned(),
            })?
    };
    let unit_micros = UNITS
        .iter()
        .chain(LONG_UNITS)
        .find(|(names, _)| names.iter().any(|name| name.eq_ignore_ascii_case(unit)))
        .map(|(_, micros)| *micros)
        .ok_or_else(|| QuotaError::Unit {
            text: whole.to_owned(),
            unit: unit.to_owned(),
        })?;
    multiplier
        .checked_mul(unit_micros)
        .ok_or_else(|| QuotaError::PeriodTooLong {
            text: whole.trim().to_owned(),
        })
}

/// Parses a duration such as `100ms`, `30s`, `5m`, `1h` or `2 days` (a number is required).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, QuotaError> {
    let trimmed = text.trim();
    if !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(QuotaError::Duration {
            text: text.to_owned(),
        });
    }
    let micros = parse_period(trimmed, text)?;
    if micros > MAX_PERIOD_MICROS {
        return Err(QuotaError::PeriodTooLong {
            text: trimmed.to_owned(),
        });
    }
    Ok(std::time::Duration::from_micros(micros))
}

/// A period as the largest unit that divides it and how many of that unit: `(1, "s")` for a
/// second, `(90, "s")` for a minute and a half.
fn period_parts(period: Micros) -> (Micros, &'static str) {
    let (names, micros) = UNITS
        .iter()
        .rev()
        .find(|(_, micros)| period >= *micros && period.is_multiple_of(*micros))
        .unwrap_or(&UNITS[0]);
    (period / micros, names[0])
}

/// Writes a period in the largest unit that divides it.
fn period_text(period: Micros) -> String {
    match period_parts(period) {
        (1, short) => short.to_owned(),
        (n, short) => format!("{n}{short}"),
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (count, period) = text
            .split_once('/')
            .or_else(|| text.split_once(" per "))
            .ok_or_else(|| QuotaError::Syntax {
                text: text.to_owned(),
            })?;
        let count_text = count.trim();
        if count_text.is_empty() || !count_text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(QuotaError::Count {
                text: text.to_owned(),
                count: count_text.to_owned(),
            });
        }
        let count = count_text
            .parse::<u64>()
            .map_err(|_| QuotaError::CountTooLarge {
                text: text.trim().to_owned(),
            })?;
        let period = parse_period(period, text)?;
        Self::checked(count, period, || text.trim().to_owned())
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Piece by piece: every answer that names a quota writes it.
        let (multiple, unit) = period_parts(self.period);
        f.write_str(itoa::Buffer::new().format(self.count))?;
        f.write_str("/")?;
        if multiple != 1 {
            f.write_str(itoa::Buffer::new().format(multiple))?;
        }
        f.write_str(unit)
    }
}

impl serde::Serialize for Quota {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quota {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(QuotaText)
    }
}

/// Reads a quota from its text where the reader holds it, without copying it out first.
struct QuotaText;

impl serde::de::Visitor<'_> for QuotaText {
    type Value = Quota;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a quota such as \"100/m\"")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Quota, E> {
        text.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_common_forms() {
        let cases = [
            ("10/s", 10, SECOND),
            ("100/30s", 100, 30 * SECOND),
            ("5/5m", 5, 300 * SECOND),
            ("1000/h", 1000, 3_600 * SECOND),
            ("10000/d", 10_000, 86_400 * SECOND),
            ("3/w", 3, 604_800 * SECOND),
            ("7 / 250ms", 7, 250_000),
            ("60/minute", 60, 60 * SECOND),
            ("2 per 2 hours", 2, 7_200 * SECOND),
            ("0/m", 0, 60 * SECOND),
        ];
        for (text, count, period) in cases {
            let quota: Quota = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (quota.count(), quota.period_micros()),
                (count, period),
                "{text}"
            );
        }
    }

    #[test]
    fn parses_durations() {
        assert_eq!(
            parse_duration("100ms"),
            Ok(std::time::Duration::from_millis(100))
        );
        assert_eq!(
            parse_duration("1h"),
            Ok(std::time::Duration::from_secs(3_600))
        );
        let error = parse_duration("soon").unwrap_err().to_string();
        assert!(error.contains("expected a number and a unit"), "{error}");
        assert!(parse_duration("5 fortnights").is_err());
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        for (text, shown) in [("10/s", "10/s"), ("100/30s", "100/30s"), ("5/300s", "5/5m")] {
            assert_eq!(text.parse::<Quota>().unwrap().to_string(), shown);
        }
        assert_eq!(
            Quota::from_micros(1, 1_500).unwrap().to_string(),
            "1/1500us"
        );
    }

    #[test]
    fn refuses_nonsense_with_a_clear_message() {
        let cases = [
            ("10", "expected <count>/<period>"),
            ("ten/s", "the count \"ten\" is not a whole number"),
            ("-1/s", "the count \"-1\" is not a whole number"),
            ("10/fortnight", "unknown unit \"fortnight\""),
            ("10/0s", "the period must be longer than zero"),
            ("10/11000d", "longer than the maximum of ten years"),
            (
                "10/99999999999999999999w",
                "longer than the maximum of ten years",
            ),
            ("99999999999999999999999/s", "larger than the maximum"),
            ("2000000000000/s", "larger than the maximum"),
        ];
        for (text, message) in cases {
            let error = text.parse::<Quota>().expect_err(text).to_string();
            assert!(error.contains(message), "{text}: {error}");
        }
    }
}
