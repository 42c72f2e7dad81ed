//! The brief answer to `/v1/check`, for a caller that sends `Prefer: return=minimal` (RFC 7240)
//! because it only acts on the decision: whether, with what status, how long to wait, and the
//! binding limit's room. No decision per limit, no header fields, and no charge token unless
//! the check holds concurrency slots (so such a check cannot be refunded, but its slots can
//! be released): a quarter more checks a second on the memory store.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::Response;
use tollgate::{Decision, Evaluation, Verdict};

use super::check::millis;
use super::outcome::Outcome;

/// Whether the request's `Prefer` fields ask for `return=minimal`. Read as bytes, since every
/// check asks this of its headers and the preference is ASCII.
pub(super) fn wanted(headers: &HeaderMap) -> bool {
    const PREFER: HeaderName = HeaderName::from_static("prefer");
    headers.get_all(PREFER).iter().any(|value| {
        // The preference alone, as clients send it, is matched whole before the list is parsed.
        value.as_bytes().eq_ignore_ascii_case(b"return=minimal")
            || value
                .as_bytes()
                .split(|&byte| byte == b',')
                .any(|preference| {
                    let token = preference
                        .split(|&byte| byte == b';')
                        .next()
                        .unwrap_or_default();
                    token.trim_ascii().eq_ignore_ascii_case(b"return=minimal")
                })
    })
}

/// The brief answer's fields.
pub(crate) struct Brief {
    pub(super) allowed: bool,
    pub(super) verdict: &'static str,
    pub(super) status: u16,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) delay_ms: u64,
    /// The binding limit's room and reset, when a limit decided.
    pub(super) binding: Option<(u64, u64)>,
    /// The token that releases the check's concurrency slots, when it holds some.
    pub(super) charge: Option<String>,
}

impl Brief {
    fn of(allowed: bool, outcome: &Outcome<'_>, binding: Option<&Decision>) -> Self {
        Self {
            allowed,
            verdict: outcome.name,
            status: outcome.status,
            retry_after_ms: outcome.retry.map(millis),
            delay_ms: millis(outcome.delay),
            binding: binding
                .map(|decision| (decision.remaining(), millis(decision.reset_after_micros()))),
            charge: None,
        }
    }

    pub(super) fn of_verdict(verdict: &Verdict) -> Self {
        Self::of(
            verdict.is_admitted(),
            &Outcome::of_verdict(verdict),
            verdict.binding(),
        )
    }

    pub(super) fn of_evaluation(evaluation: &Evaluation) -> Self {
        let binding = evaluation
            .binding
            .and_then(|index| evaluation.applied.get(index))
            .map(|applied| &applied.decision);
        Self::of(
            evaluation.is_admitted(),
            &Outcome::of_evaluation(evaluation),
            binding,
        )
    }

    /// The response: the JSON, `Preference-Applied`, `Cache-Control: no-store`, and `Retry-After`
    /// on a denial that ends.
    pub(super) fn response(&self) -> Response {
        let mut response = Response::new(axum::body::Body::from(self.to_json()));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            HeaderName::from_static("preference-applied"),
            HeaderValue::from_static("return=minimal"),
        );
        // A decision holds for the moment it was made: never served again from a cache.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if !self.allowed
            && let Some(wait) = self.retry_after_ms
        {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(wait.div_ceil(1_000).max(1)),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefer(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("prefer", HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    /// RFC 7240: a list of preferences, each a token with parameters after `;`, in one field
    /// or several, names compared without case.
    #[test]
    fn return_minimal_is_found_among_other_preferences_in_any_field() {
        for asked in [
            &["return=minimal"][..],
            &["Return=Minimal"],
            &["respond-async, return=minimal"],
            &["respond-async,return=minimal ; ignored=1"],
            &["  return=minimal  "],
            &["wait=10", "return=minimal"],
        ] {
            assert!(wanted(&prefer(asked)), "{asked:?}");
        }
        for not_asked in [
            &[][..],
            &["return=representation"],
            &["respond-async; return=minimal"],
            &["return=minimalist"],
            &["wait=10", "handling=lenient"],
        ] {
            assert!(!wanted(&prefer(not_asked)), "{not_asked:?}");
        }
    }
}
