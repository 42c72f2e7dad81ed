//! W3C trace context (`traceparent`, `tracestate`) in HTTP header fields and gRPC metadata: read
//! from callers so a check's span joins their trace, written for the proxy's upstream so its
//! spans join the proxy's.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;

struct Fields<'a>(&'a HeaderMap);

impl Extractor for Fields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct FieldsMut<'a>(&'a mut HeaderMap);

impl Injector for FieldsMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing; leave the field out.
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// The caller's span context in `headers`, if they carry a valid `traceparent`; a missing or
/// malformed one is no parent (the span starts a trace of its own).
pub fn parent_of(headers: &HeaderMap) -> Option<opentelemetry::Context> {
    if !headers.contains_key("traceparent") {
        return None;
    }
    let context = TraceContextPropagator::new().extract(&Fields(headers));
    context.span().span_context().is_valid().then_some(context)
}

/// Replaces the trace context in `headers` with `context`'s, so the next hop is its child.
pub(crate) fn inject(context: &opentelemetry::Context, headers: &mut HeaderMap) {
    headers.remove("traceparent");
    headers.remove("tracestate");
    TraceContextPropagator::new().inject_context(context, &mut FieldsMut(headers));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(traceparent: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            HeaderValue::from_str(traceparent).expect("a valid field value"),
        );
        headers
    }

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        let parent = parent_of(&headers(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ))
        .expect("a parent");
        let span = parent.span();
        let context = span.span_context();
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_remote());
    }

    #[test]
    fn a_malformed_traceparent_is_ignored() {
        for malformed in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parent_of(&headers(malformed)).is_none(), "{malformed:?}");
        }
        assert!(parent_of(&HeaderMap::new()).is_none());
    }

    #[test]
    fn injecting_replaces_the_callers_context() {
        let parent = parent_of(&headers(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ))
        .expect("a parent");
        let mut forwarded = headers("00-11111111111111111111111111111111-2222222222222222-01");
        forwarded.insert("tracestate", HeaderValue::from_static("stale=1"));
        inject(&parent, &mut forwarded);
        assert_eq!(
            forwarded["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert!(!forwarded.contains_key("tracestate"));
    }
}
