//! A descriptor's status as envoyproxy/ratelimit answers it: the reset of a window, a rule of
//! zero requests, and the `RateLimit-*` header fields of a response.

use tollgate::headers::envoy_fields;
use tollgate::{Limit, Verdict};

use super::proto::core::HeaderValue;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::settings::RlsHeaderNames;
use super::tree::Rule;
use super::unit;

/// The status of a rule of zero requests: over the limit (unless in shadow mode), every time,
/// with the seconds to the end of the unit's window as upstream sends them (its
/// `generateResponseDescriptorStatus`), so that Envoy's reset field is never 0.
pub(super) fn blocked(rule: &Rule, now: tollgate::Micros) -> DescriptorStatus {
    let code = if rule.shadow {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: rule.name.clone().unwrap_or_default(),
            requests_per_unit: 0,
            unit: rule.unit as i32,
        }),
        limit_remaining: 0,
        duration_until_reset: Some(prost_types::Duration {
            seconds: seconds_to_window_end(unit::seconds(rule.unit).unwrap_or(1), now),
            nanos: 0,
        }),
        quota: None,
    }
}

/// Whole seconds from `now` to the end of the window of `window` seconds that holds it (1 to
/// `window`, never 0), as envoyproxy/ratelimit computes a reset.
fn seconds_to_window_end(window: u64, now: tollgate::Micros) -> i64 {
    let window = window.max(1);
    let now = now / 1_000_000;
    i64::try_from(window - now % window).unwrap_or(i64::MAX)
}

/// Seconds until the counter resets: for a window, to the end of the current window in whole
/// seconds (1 to the window's length, never 0), as envoyproxy/ratelimit computes it; for the
/// other algorithms, until the limit is fully restored.
pub(super) fn until_reset(rule: &Rule, limit: &Limit, verdict: &Verdict) -> i64 {
    if rule.classic {
        return seconds_to_window_end(limit.period() / 1_000_000, verdict.at());
    }
    let micros = verdict
        .decisions()
        .first()
        .map_or(0, |d| d.reset_after_micros());
    i64::try_from(micros.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// `RateLimit-Limit`, `-Remaining`, `-Reset` of the descriptor with the least room; a descriptor
/// over its limit wins, the last one if several are.
pub(super) fn headers(statuses: &[DescriptorStatus], names: &RlsHeaderNames) -> Vec<HeaderValue> {
    let mut chosen: Option<&DescriptorStatus> = None;
    for status in statuses.iter().filter(|s| s.current_limit.is_some()) {
        let over = status.code == Code::OverLimit as i32;
        let better = chosen.is_none_or(|c| {
            over || (c.code != Code::OverLimit as i32 && status.limit_remaining < c.limit_remaining)
        });
        if better {
            chosen = Some(status);
        }
    }
    let Some(status) = chosen else {
        return Vec::new();
    };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds);
    envoy_fields(
        u64::from(limit),
        u64::from(status.limit_remaining),
        u64::try_from(reset).unwrap_or(0),
    )
    .into_iter()
    .zip([&names.limit, &names.remaining, &names.reset])
    .map(|((_, value), name)| HeaderValue {
        key: name.clone(),
        value,
        raw_value: Vec::new(),
    })
    .collect()
}
