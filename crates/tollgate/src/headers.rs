//! Decisions as header fields, with no HTTP framework involved (the check API, the tower layer,
//! the proxy and the Envoy service put them on their answers); `problem` renders refusals'
//! statuses and bodies.
//!
//! Families: the IETF `RateLimit` / `RateLimit-Policy` structured fields of
//! draft-ietf-httpapi-ratelimit-headers-10, the `RateLimit-Limit/Remaining/Reset` fields of
//! drafts 04 to 06, and the legacy `X-RateLimit-*` fields (reset as epoch seconds).

use std::time::Duration;

use tollgate_core::clock::{MICROS_PER_SECOND, Micros};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

mod fields;
mod structured;

pub use fields::Fields;

/// A family of rate-limit response header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderFamily {
    /// `RateLimit` and `RateLimit-Policy` structured fields, draft-ietf-httpapi-ratelimit-headers-10.
    Ietf,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (drafts 04 to 06).
    Draft,
    /// `X-RateLimit-Limit`, `-Remaining`, `-Used`, `-Reset` (epoch seconds), `-Resource`.
    Legacy,
}

/// What a quota counts, for the `qu` parameter of `RateLimit-Policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaUnit {
    /// Requests (the default).
    Requests,
    /// Bytes of request body.
    ContentBytes,
    /// Requests in flight.
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The draft's name for the unit.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
        }
    }
}

/// One limit as a response reports it.
#[derive(Debug, Clone, Copy)]
pub struct LimitView<'a> {
    /// The name shown to clients.
    pub label: &'a str,
    /// The limit.
    pub limit: &'a Limit,
    /// What its quota counts.
    pub unit: QuotaUnit,
    /// Its decision for this request.
    pub decision: Decision,
    /// The partition key to report as `pk`, for a policy that asks for it: an opaque digest of
    /// the key the limit counts by.
    pub partition: Option<&'a [u8]>,
}

fn seconds_up(micros: Micros) -> u64 {
    micros.div_ceil(MICROS_PER_SECOND)
}

impl LimitView<'_> {
    /// `q` and `w` of `RateLimit-Policy`: the most the limit admits at once, and the seconds
    /// that take to come back (a window's period; for a rate algorithm, its burst's refill time,
    /// which is the configured period when the burst is the default).
    pub fn quota_and_window(&self) -> (u64, u64) {
        let window = if self.limit.algorithm().is_rate() {
            self.limit.capacity() * self.limit.interval()
        } else {
            self.limit.period()
        };
        (self.limit.capacity(), seconds_up(window).max(1))
    }

    /// `t` of `RateLimit`: for a denying limit, the seconds until this request would fit;
    /// otherwise the seconds until the limit is fully restored.
    pub fn seconds_until_more(&self) -> u64 {
        let micros = match (self.decision.allowed(), self.decision.retry_after_micros()) {
            (false, Some(retry)) => retry,
            _ => self.decision.reset_after_micros(),
        };
        seconds_up(micros)
    }
}

/// A number as a field's text (every answer writes several).
fn number(value: u64) -> String {
    itoa::Buffer::new().format(value).to_owned()
}

/// Structured-field strings allow printable ASCII only; anything else becomes `?`.
fn sf_string(text: &str) -> std::borrow::Cow<'_, str> {
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// `RateLimit-Policy`: one item per limit, `"name";q=100;w=60`.
pub fn ietf_policy_field(views: &[LimitView<'_>]) -> Option<String> {
    ietf_list(views, policy_parameters)
}

/// `RateLimit`: one item per limit, `"name";r=50;t=30`.
pub fn ietf_field(views: &[LimitView<'_>]) -> Option<String> {
    ietf_list(views, room_parameters)
}

/// `q` and `w` (and `qu`) of one limit in `RateLimit-Policy`.
fn policy_parameters(field: &mut String, view: &LimitView<'_>) {
    let (quota, window) = view.quota_and_window();
    structured::push_integer_parameter(field, "q", quota);
    structured::push_integer_parameter(field, "w", window);
    if view.unit != QuotaUnit::Requests {
        structured::push_string_parameter(field, "qu", view.unit.as_str());
    }
}

/// `r` and `t` of one limit in `RateLimit`.
fn room_parameters(field: &mut String, view: &LimitView<'_>) {
    structured::push_integer_parameter(field, "r", view.decision.remaining());
    structured::push_integer_parameter(field, "t", view.seconds_until_more());
}

/// A list of one item per limit: its name, the parameters `write` appends, and its partition
/// key as `pk`; `None` for no limits (an empty list is no field).
fn ietf_list(
    views: &[LimitView<'_>],
    write: impl Fn(&mut String, &LimitView<'_>),
) -> Option<String> {
    if views.is_empty() {
        return None;
    }
    let mut field = String::with_capacity(48 * views.len());
    write_ietf_list(&mut field, views, write);
    Some(field)
}

/// Appends the list [`ietf_list`] makes of `views` (at least one) to `field`.
fn write_ietf_list(
    field: &mut String,
    views: &[LimitView<'_>],
    write: impl Fn(&mut String, &LimitView<'_>),
) {
    for (index, view) in views.iter().enumerate() {
        if index > 0 {
            field.push_str(", ");
        }
        structured::push_string(field, &sf_string(view.label));
        write(field, view);
        if let Some(partition) = view.partition {
            structured::push_bytes_parameter(field, "pk", partition);
        }
    }
}

/// The rate-limit header fields of `families` for the limits of a request. The older families
/// describe only the `binding` limit. `now` (the decision's time) dates the legacy reset.
pub fn rate_limit_fields(
    families: &[HeaderFamily],
    views: &[LimitView<'_>],
    binding: Option<usize>,
    now: Micros,
) -> Fields {
    // Room for every family's fields and the two a decision adds, so nothing grows.
    let mut fields = Fields::with_capacity(12, 96 + 64 * views.len());
    if views.is_empty() {
        return fields;
    }
    let bound = views.get(binding.unwrap_or(0)).unwrap_or(&views[0]);
    let (quota, _) = bound.quota_and_window();
    let remaining = bound.decision.remaining();
    for family in families {
        match family {
            HeaderFamily::Ietf => {
                fields.push_with("ratelimit-policy", |text| {
                    write_ietf_list(text, views, policy_parameters);
                });
                fields.push_with("ratelimit", |text| {
                    write_ietf_list(text, views, room_parameters);
                });
            }
            HeaderFamily::Draft => {
                fields.push_number("ratelimit-limit", quota);
                fields.push_number("ratelimit-remaining", remaining);
                fields.push_number("ratelimit-reset", bound.seconds_until_more());
                if !families.contains(&HeaderFamily::Ietf) {
                    fields.push_with("ratelimit-policy", |text| {
                        for (index, view) in views.iter().enumerate() {
                            if index > 0 {
                                text.push_str(", ");
                            }
                            let (q, w) = view.quota_and_window();
                            text.push_str(itoa::Buffer::new().format(q));
                            text.push_str(";w=");
                            text.push_str(itoa::Buffer::new().format(w));
                        }
                    });
                }
            }
            HeaderFamily::Legacy => {
                let reset_at = seconds_up(now.saturating_add(bound.decision.reset_after_micros()));
                fields.push_number("x-ratelimit-limit", quota);
                fields.push_number("x-ratelimit-remaining", remaining);
                fields.push_number("x-ratelimit-used", quota.saturating_sub(remaining));
                fields.push_number("x-ratelimit-reset", reset_at);
                fields.push("x-ratelimit-resource", &sf_string(bound.label));
            }
        }
    }
    fields
}

/// The fields envoyproxy/ratelimit adds to Envoy's answer (its `LIMIT_RESPONSE_HEADERS_ENABLED`),
/// with its names and arithmetic: one descriptor's limit per unit, what remains, and the
/// seconds until its counter resets.
pub fn envoy_fields(limit: u64, remaining: u64, reset_seconds: u64) -> [(&'static str, String); 3] {
    [
        ("RateLimit-Limit", number(limit)),
        ("RateLimit-Remaining", number(remaining)),
        ("RateLimit-Reset", number(reset_seconds)),
    ]
}

/// How a response answers its request, beyond the limits' own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Admitted; `near_limit` above a soft threshold.
    Admitted {
        /// Marks the response with `Tollgate-Near-Limit: 1`.
        near_limit: bool,
    },
    /// Refused; the request fits again after `retry_after` (never, if `None`).
    Refused {
        /// When to come back.
        retry_after: Option<Duration>,
    },
}

/// Every field a response carries about its decision, whatever the frontend: the rate-limit
/// fields of `families`, and `Retry-After` and `Cache-Control: no-store` on a refusal (a
/// refusal must not be cached and replayed to a client whose quota has come back), or
/// `Tollgate-Near-Limit` near a soft threshold.
pub fn decision_fields(
    families: &[HeaderFamily],
    views: &[LimitView<'_>],
    binding: Option<usize>,
    now: Micros,
    answer: Answer,
) -> Fields {
    let mut fields = match answer {
        Answer::Refused {
            retry_after: Some(wait),
        } => rate_limit_fields(families, &refused_views(views, binding, wait), binding, now),
        _ => rate_limit_fields(families, views, binding, now),
    };
    match answer {
        Answer::Admitted { near_limit: true } => {
            fields.push("tollgate-near-limit", "1");
        }
        Answer::Admitted { near_limit: false } => {}
        Answer::Refused { retry_after } => {
            if let Some(retry_after) = retry_after {
                fields.push_number("retry-after", retry_after_seconds(retry_after));
            }
            fields.push("cache-control", "no-store");
        }
    }
    fields
}

/// The limits of a request refused until `wait` has passed, as its fields report them: every
/// limit that refused, and the binding one (which may have room where a penalty block or a
/// concurrency cap refused), says to come back after `wait`, the time `Retry-After` names, so
/// that a client trusting any field of the answer does not come back early and find itself
/// refused again.
fn refused_views<'a>(
    views: &[LimitView<'a>],
    binding: Option<usize>,
    wait: Duration,
) -> Vec<LimitView<'a>> {
    let wait = Micros::try_from(wait.as_micros()).unwrap_or(Micros::MAX);
    views
        .iter()
        .enumerate()
        .map(|(index, view)| {
            let decision = view.decision;
            if decision.allowed() && binding != Some(index) {
                return *view;
            }
            let remaining = if decision.allowed() {
                0
            } else {
                decision.remaining()
            };
            LimitView {
                decision: Decision::new(
                    false,
                    decision.limit(),
                    remaining,
                    decision.reset_after_micros().max(wait),
                    Some(wait),
                    0,
                ),
                ..*view
            }
        })
        .collect()
}

/// `Retry-After` in whole seconds, rounded up so that a client waiting that long is admitted
/// (never earlier than the binding limit's `t`).
pub fn retry_after_seconds(retry_after: Duration) -> u64 {
    crate::refusal::seconds_to_wait(retry_after)
}

#[cfg(test)]
mod tests;
