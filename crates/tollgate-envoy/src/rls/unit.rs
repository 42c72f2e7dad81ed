//! Envoy's rate-limit units and their lengths.

use std::time::Duration;

use super::proto::service::rate_limit_response::rate_limit::Unit;
use super::proto::types::RateLimitUnit;

/// A unit's length in seconds: a month is a flat 30 days and a year 365, as in
/// envoyproxy/ratelimit.
pub(crate) fn seconds(unit: Unit) -> Option<u64> {
    Some(match unit {
        Unit::Unknown => return None,
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => 30 * 86_400,
        Unit::Year => 365 * 86_400,
    })
}

/// A unit written in a config file, case-insensitively.
pub(crate) fn parse(text: &str) -> Option<Unit> {
    let unit = Unit::from_str_name(&text.to_ascii_uppercase())?;
    (unit != Unit::Unknown).then_some(unit)
}

/// The unit of a per-request override.
pub(crate) fn from_override(unit: i32) -> Option<Unit> {
    let unit = RateLimitUnit::try_from(unit).ok()?;
    Some(match unit {
        RateLimitUnit::Unknown => return None,
        RateLimitUnit::Second => Unit::Second,
        RateLimitUnit::Minute => Unit::Minute,
        RateLimitUnit::Hour => Unit::Hour,
        RateLimitUnit::Day => Unit::Day,
        RateLimitUnit::Month => Unit::Month,
        RateLimitUnit::Year => Unit::Year,
    })
}

/// The unit whose length is `period`, if any (for reporting arbitrary periods).
pub(crate) fn of_period(period: Duration) -> Unit {
    [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ]
    .into_iter()
    .find(|unit| seconds(*unit).is_some_and(|s| Duration::from_secs(s) == period))
    .unwrap_or(Unit::Unknown)
}
