//! Turning an evaluation into HTTP: refusals, and fields on admitted responses.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use tollgate::Evaluation;
use tollgate::headers::{Answer, Fields, HeaderFamily, decision_fields};
use tollgate::policy::{Action, Reason, Refusal};
use tollgate::problem::problem_json;

use crate::body::RateLimitBody;
use crate::grpc_status;
use crate::hooks::{RefusalFn, Refused};

/// How the layer answers a request it refuses: over gRPC with a status, else with the
/// application's `on_refusal` hook when it has one, else with problem+json.
#[derive(Clone, Copy)]
pub(crate) struct Answering<'a> {
    pub(crate) grpc: bool,
    pub(crate) hook: Option<&'a RefusalFn>,
    /// The refused request's head, for the hook.
    pub(crate) request: &'a http::request::Parts,
}

impl Answering<'_> {
    /// The hook's answer to `refusal` with `fields` added, each unless the hook set a field of
    /// that name itself; `None` when the hook does not answer this request.
    fn custom<B>(
        &self,
        refusal: &Refusal,
        fields: &mut Fields,
    ) -> Option<Response<RateLimitBody<B>>> {
        let hook = self.hook.filter(|_| !self.grpc)?;
        let (mut parts, body) = hook(&Refused {
            refusal,
            request: self.request,
        })
        .into_parts();
        fields.retain(|name, _| !parts.headers.contains_key(name));
        add_fields(&mut parts.headers, std::mem::take(fields));
        Some(Response::from_parts(parts, RateLimitBody::full(body)))
    }
}

/// Adds `fields` (as the renderers in `tollgate::headers` give them) to a response's headers;
/// every value is a slice of the fields' one text, not a copy, and values that are not valid
/// header text are skipped. Every frontend writes its fields with this.
pub fn add_fields(headers: &mut http::HeaderMap, fields: Fields) {
    headers.reserve(fields.len());
    let (text, entries) = fields.into_parts();
    let text = Bytes::from(text);
    for (name, range) in entries {
        if let Ok(value) = HeaderValue::from_maybe_shared(text.slice(range)) {
            headers.append(field_name(name), value);
        }
    }
}

/// The header name of a field. The renderers' names are made at compile time: made at run
/// time, `HeaderName::from_static` checks every byte of the name on every answer.
fn field_name(name: &'static str) -> HeaderName {
    match name {
        "ratelimit-policy" => const { HeaderName::from_static("ratelimit-policy") },
        "ratelimit" => const { HeaderName::from_static("ratelimit") },
        "x-ratelimit-limit" => const { HeaderName::from_static("x-ratelimit-limit") },
        "x-ratelimit-remaining" => const { HeaderName::from_static("x-ratelimit-remaining") },
        "x-ratelimit-used" => const { HeaderName::from_static("x-ratelimit-used") },
        "x-ratelimit-reset" => const { HeaderName::from_static("x-ratelimit-reset") },
        "x-ratelimit-resource" => const { HeaderName::from_static("x-ratelimit-resource") },
        "ratelimit-limit" => const { HeaderName::from_static("ratelimit-limit") },
        "ratelimit-remaining" => const { HeaderName::from_static("ratelimit-remaining") },
        "ratelimit-reset" => const { HeaderName::from_static("ratelimit-reset") },
        "retry-after" => http::header::RETRY_AFTER,
        "cache-control" => http::header::CACHE_CONTROL,
        _ => HeaderName::from_static(name),
    }
}

/// The response for a refused request: HTTP with problem+json, or a gRPC trailers-only
/// `RESOURCE_EXHAUSTED` (or `UNAVAILABLE` when the limiter cannot decide).
pub(crate) fn refusal<B>(
    evaluation: &Evaluation,
    families: &[HeaderFamily],
    answering: Answering<'_>,
) -> Response<RateLimitBody<B>> {
    let Action::Refuse(refusal) = &evaluation.action else {
        unreachable!("refusal() is only called for refusals")
    };
    let mut fields = evaluation.header_fields(families);
    if let Some(response) = answering.custom(refusal, &mut fields) {
        return response;
    }
    if answering.grpc {
        let code = grpc_status::of_refusal(refusal.reason);
        let mut response = Response::new(RateLimitBody::full(Bytes::new()));
        fields.push("content-type", "application/grpc");
        fields.push("grpc-status", code);
        fields.push(
            "grpc-message",
            &refusal
                .detail
                .replace(|c: char| !c.is_ascii_graphic() && c != ' ', "?"),
        );
        if let Some(retry_after) = refusal.retry_after {
            let millis = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX);
            fields.push_number("grpc-retry-pushback-ms", millis);
        }
        add_fields(response.headers_mut(), fields);
        return response;
    }
    let body = evaluation.problem_body().unwrap_or_default();
    let mut response = Response::new(RateLimitBody::full(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    fields.push("content-type", "application/problem+json");
    add_fields(response.headers_mut(), fields);
    response
}

/// The answer to a request the limiter could not decide, as the error's refusal says: `503`
/// (`UNAVAILABLE` over gRPC) when it cannot decide at all (its store failed), `500`
/// (`INTERNAL`) when the layer is served so that it cannot (a policy keyed by client address,
/// and no address: the server was not given `ConnectInfo` or a `PeerAddr`). The latter is
/// logged as an error the first time, so that the mistake is seen at once rather than every
/// client sharing one bucket.
pub(crate) fn undecidable<B>(
    error: &tollgate::Error,
    answering: Answering<'_>,
) -> Response<RateLimitBody<B>> {
    let refusal = error.refusal();
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if refusal.reason == Reason::Misconfigured
        && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::error!("rate limiting is misconfigured, every such request fails: {error}");
    }
    undecided(&refusal, answering)
}

/// The answer to a request the limiter did not decide, refused as `refusal` says.
pub(crate) fn undecided<B>(
    refusal: &Refusal,
    answering: Answering<'_>,
) -> Response<RateLimitBody<B>> {
    if answering.grpc {
        let mut response = Response::new(RateLimitBody::full(Bytes::new()));
        let mut fields = Fields::with_capacity(3, 64);
        fields.push("content-type", "application/grpc");
        fields.push("grpc-status", grpc_status::of_refusal(refusal.reason));
        fields.push("grpc-message", refusal.reason.as_str());
        add_fields(response.headers_mut(), fields);
        return response;
    }
    let mut fields = decision_fields(
        &[],
        &[],
        None,
        0,
        Answer::Refused {
            retry_after: refusal.retry_after,
        },
    );
    if let Some(response) = answering.custom(refusal, &mut fields) {
        return response;
    }
    let body = problem_json(refusal, &[]);
    let mut response = Response::new(RateLimitBody::full(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    fields.push("content-type", "application/problem+json");
    add_fields(response.headers_mut(), fields);
    response
}

/// The status a response reports: the gRPC status mapped to HTTP classes for gRPC responses
/// (an error status counts as a 5xx), else the HTTP status.
pub(crate) fn effective_status<B>(response: &Response<B>) -> u16 {
    match response
        .headers()
        .get(crate::grpc_status::GRPC_STATUS)
        .and_then(|v| v.to_str().ok())
    {
        None => response.status().as_u16(),
        Some(status) => grpc_status::http_class(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_status_in_the_head_decides_the_effective_status() {
        let answer = |status: Option<&'static str>| {
            let mut response = Response::new(());
            if let Some(status) = status {
                response
                    .headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static(status));
            }
            effective_status(&response)
        };
        assert_eq!(answer(None), 200, "no gRPC status: the HTTP status");
        assert_eq!(answer(Some("14")), 503, "a trailers-only UNAVAILABLE");
        assert_eq!(answer(Some("0")), 200);
        assert_eq!(answer(Some("4")), 400, "the client's own deadline");
    }

    #[test]
    fn every_field_name_is_the_name_it_reads() {
        for name in [
            "ratelimit-policy",
            "ratelimit",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-used",
            "x-ratelimit-reset",
            "x-ratelimit-resource",
            "ratelimit-limit",
            "ratelimit-remaining",
            "ratelimit-reset",
            "retry-after",
            "cache-control",
            "tollgate-near-limit",
            "content-type",
        ] {
            assert_eq!(field_name(name), HeaderName::from_static(name), "{name}");
            assert_eq!(field_name(name).as_str(), name);
        }
    }
}
