//! What a response says about waiting: `Retry-After` (seconds or an HTTP-date), the IETF
//! `RateLimit` field's `r` and `t` (and `RateLimit-Policy`'s `q` and `w`), the draft
//! `RateLimit-Remaining`/`-Reset` and the legacy `X-RateLimit-Remaining`/`-Reset`. Anything
//! malformed, negative or absurd is ignored, and every wait is capped.

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The longest wait any header can ask for, unless told otherwise.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

/// Epoch seconds beyond this are taken as a timestamp in `X-RateLimit-Reset`, below as a delta.
const EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// What is left of one limit and when it comes back, from a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitState {
    /// The limit's name, if the field gave one.
    pub name: Option<String>,
    /// Requests (or units) left now.
    pub remaining: u64,
    /// Until the limit has room again (when `remaining` is 0) or is fully restored.
    pub reset: Duration,
}

fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

/// Whole non-negative seconds, as `Retry-After` and the reset fields write them.
fn seconds(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `Retry-After`, as a wait from `now`: delta-seconds or an HTTP-date. `None` when absent or
/// malformed; a date in the past is no wait at all.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = text(headers, "retry-after")?;
    if let Some(delta) = seconds(value) {
        return Some(Duration::from_secs(delta));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

fn integer(params: &sfv::Parameters, key: &str) -> Option<u64> {
    let value = params.get(key)?.as_integer()?;
    u64::try_from(i64::from(value)).ok()
}

/// The limits the IETF `RateLimit` field reports (`"name";r=0;t=30, ...`), or the draft
/// `RateLimit-Remaining`/`-Reset` pair, or the legacy `X-RateLimit-Remaining`/`-Reset` pair.
pub fn limits(headers: &HeaderMap, now: SystemTime) -> Vec<LimitState> {
    if let Some(value) = text(headers, "ratelimit")
        && let Ok(list) = sfv::Parser::new(value).parse::<sfv::List>()
    {
        let found: Vec<LimitState> = list
            .iter()
            .filter_map(|entry| match entry {
                sfv::ListEntry::Item(item) => Some(item),
                sfv::ListEntry::InnerList(_) => None,
            })
            .filter_map(|item| {
                Some(LimitState {
                    name: item.bare_item.as_string().map(|s| s.as_str().to_owned()),
                    remaining: integer(&item.params, "r")?,
                    reset: Duration::from_secs(integer(&item.params, "t")?),
                })
            })
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    let pair = |remaining: &str, reset: &str| -> Option<LimitState> {
        let remaining = seconds(text(headers, remaining)?)?;
        let reset = seconds(text(headers, reset)?)?;
        // Legacy servers write the reset as epoch seconds; small values are deltas.
        let reset = if reset > EPOCH_THRESHOLD {
            let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(reset))?;
            at.duration_since(now).unwrap_or(Duration::ZERO)
        } else {
            Duration::from_secs(reset)
        };
        Some(LimitState {
            name: None,
            remaining,
            reset,
        })
    };
    pair("ratelimit-remaining", "ratelimit-reset")
        .or_else(|| pair("x-ratelimit-remaining", "x-ratelimit-reset"))
        .into_iter()
        .collect()
}

/// How long to wait before asking again, as the response advises: `Retry-After`, else the
/// longest `t` among limits with nothing left; capped at `max`. `None` when it says nothing
/// usable.
pub fn advised_wait(headers: &HeaderMap, now: SystemTime, max: Duration) -> Option<Duration> {
    let wait = retry_after(headers, now).or_else(|| {
        limits(headers, now)
            .into_iter()
            .filter(|limit| limit.remaining == 0)
            .map(|limit| limit.reset)
            .max()
    })?;
    Some(wait.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                http::HeaderValue::from_str(value).expect("a value"),
            );
        }
        map
    }

    /// 2023-11-14 22:13:20 UTC.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    #[test]
    fn retry_after_in_both_forms_and_every_malformed_one() {
        let cases: &[(&str, Option<u64>)] = &[
            ("120", Some(120)),
            ("0", Some(0)),
            (" 7 ", Some(7)),
            ("Tue, 14 Nov 2023 22:13:50 GMT", Some(30)),
            ("Tue, 14 Nov 2023 22:00:00 GMT", Some(0)),
            ("-5", None),
            ("1.5", None),
            ("99999999999999999999", None),
            ("soon", None),
            ("Tue, 32 Nov 2023 22:13:50 GMT", None),
            ("", None),
        ];
        for (value, expected) in cases {
            let found = retry_after(&headers(&[("retry-after", value)]), now());
            assert_eq!(
                found,
                expected.map(Duration::from_secs),
                "Retry-After: {value:?}"
            );
        }
        assert_eq!(retry_after(&HeaderMap::new(), now()), None);
    }

    #[test]
    fn ratelimit_fields_in_every_family() {
        let ietf = headers(&[("ratelimit", r#""burst";r=0;t=30, "daily";r=999;t=3600"#)]);
        let found = limits(&ietf, now());
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].name.as_deref(), Some("burst"));
        assert_eq!(
            (found[0].remaining, found[0].reset),
            (0, Duration::from_secs(30))
        );
        let draft = headers(&[("ratelimit-remaining", "4"), ("ratelimit-reset", "12")]);
        assert_eq!(limits(&draft, now())[0].reset, Duration::from_secs(12));
        let legacy_epoch = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000045"),
        ]);
        assert_eq!(
            limits(&legacy_epoch, now())[0].reset,
            Duration::from_secs(45)
        );
        let legacy_delta = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "9")]);
        assert_eq!(
            limits(&legacy_delta, now())[0].reset,
            Duration::from_secs(9)
        );
    }

    #[test]
    fn malformed_ratelimit_fields_are_ignored() {
        for value in [
            r#""a";r=-1;t=30"#,
            r#""a";r=1"#,
            r#""a";r=1;t=-4"#,
            r#""a";r=x;t=4"#,
            "((",
            r#""unterminated"#,
        ] {
            assert!(
                limits(&headers(&[("ratelimit", value)]), now()).is_empty(),
                "RateLimit: {value}"
            );
        }
        let bad_legacy = headers(&[("x-ratelimit-remaining", "-3"), ("x-ratelimit-reset", "5")]);
        assert!(limits(&bad_legacy, now()).is_empty());
        let past_epoch = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1600000000"),
        ]);
        assert_eq!(limits(&past_epoch, now())[0].reset, Duration::ZERO);
    }

    #[test]
    fn the_advised_wait_prefers_retry_after_then_the_exhausted_limit_and_is_capped() {
        let both = headers(&[("retry-after", "5"), ("ratelimit", r#""a";r=0;t=9"#)]);
        assert_eq!(
            advised_wait(&both, now(), DEFAULT_MAX_WAIT),
            Some(Duration::from_secs(5))
        );
        let only_t = headers(&[("ratelimit", r#""a";r=3;t=50, "b";r=0;t=9"#)]);
        assert_eq!(
            advised_wait(&only_t, now(), DEFAULT_MAX_WAIT),
            Some(Duration::from_secs(9))
        );
        let huge = headers(&[("retry-after", "86400000")]);
        assert_eq!(
            advised_wait(&huge, now(), DEFAULT_MAX_WAIT),
            Some(DEFAULT_MAX_WAIT)
        );
        let nothing = headers(&[("ratelimit", r#""a";r=3;t=50"#)]);
        assert_eq!(advised_wait(&nothing, now(), DEFAULT_MAX_WAIT), None);
    }
}
