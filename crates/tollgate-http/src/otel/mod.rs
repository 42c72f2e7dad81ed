//! OpenTelemetry spans of checks (the `otel` feature): one span per check from the HTTP check
//! API, the proxy and Envoy's rate limit service, a child of the caller's trace (W3C trace
//! context), named and described by the semantic conventions for HTTP and gRPC servers.
//! Nothing here opens a span until [`enable`] is called, once an exporter is installed (the
//! server does so for `--otlp-endpoint`).

mod layer;
mod propagation;

pub use layer::{TraceLayer, TraceService};
pub use propagation::parent_of;

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TraceContextExt as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target of check spans: the exporter's layer takes these and nothing else, so log
/// filters (`TOLLGATE_LOG`) neither hide them nor add other spans to the traces.
pub const TARGET: &str = "tollgate::check";

/// The target of the span that carries a check's trace and span ids into the log lines
/// written during it; the exporter does not take it.
const IDS_TARGET: &str = "tollgate::trace";

/// Set once the exporter is installed: the frontends open spans only then.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether check spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Has the frontends open check spans from now on: called once their exporter is installed.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// What a check span serves, which names it and sets its first attributes.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    /// An HTTP request; `route` as the router matched it (the proxy has none).
    Http {
        /// The request's method.
        method: &'a str,
        /// The route's template.
        route: Option<&'static str>,
        /// The request's path, without its query; none for the proxy, whose paths are its
        /// clients' data (user ids, tokens), which never leave in a span.
        path: Option<&'a str>,
    },
    /// A gRPC call.
    Grpc {
        /// The service's full name.
        service: &'static str,
        /// The method's name.
        method: &'static str,
    },
}

impl Entry<'_> {
    /// The span's name, as the semantic conventions form it: `{method} {route}` (or the
    /// method alone) for HTTP, `{service}/{method}` for gRPC.
    fn span_name(&self) -> String {
        match self {
            Entry::Http {
                method,
                route: Some(route),
                ..
            } => format!("{method} {route}"),
            Entry::Http { method, .. } => (*method).to_owned(),
            Entry::Grpc { service, method } => format!("{service}/{method}"),
        }
    }
}

/// A check span for `entry`, with empty attributes for the observer and the frontend to fill
/// in, and `parent` as its parent when the caller sent one. Its trace and span ids are set
/// on an enclosing span that only the logs see, so that every log line written within the
/// check (a refusal, a store error) can be found from its trace.
pub fn check_span(entry: Entry<'_>, parent: Option<opentelemetry::Context>) -> tracing::Span {
    // At the error level, so that any log filter short of `off` keeps the ids in the lines.
    let ids = tracing::error_span!(
        target: IDS_TARGET,
        parent: None,
        "trace",
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    let span = tracing::info_span!(
        target: TARGET,
        parent: &ids,
        "check",
        otel.name = entry.span_name(),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = tracing::field::Empty,
        http.route = tracing::field::Empty,
        url.path = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        rpc.system = tracing::field::Empty,
        rpc.service = tracing::field::Empty,
        rpc.method = tracing::field::Empty,
        rpc.grpc.status_code = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        tollgate.policy = tracing::field::Empty,
        tollgate.domain = tracing::field::Empty,
        tollgate.decision = tracing::field::Empty,
        tollgate.reason = tracing::field::Empty,
        tollgate.decided_by = tracing::field::Empty,
        tollgate.store.duration_us = tracing::field::Empty,
    );
    match entry {
        Entry::Http {
            method,
            route,
            path,
        } => {
            span.record("http.request.method", method);
            if let Some(path) = path {
                span.record("url.path", path);
            }
            if let Some(route) = route {
                span.record("http.route", route);
            }
        }
        Entry::Grpc { service, method } => {
            span.record("rpc.system", "grpc");
            span.record("rpc.service", service);
            span.record("rpc.method", method);
        }
    }
    if let Some(parent) = parent {
        // Fails only for a span no subscriber records, which then has nothing to export.
        let _ = span.set_parent(parent);
    }
    let context = span.context();
    let ids_of = context.span().span_context().clone();
    if ids_of.is_valid() {
        ids.record("trace_id", tracing::field::display(ids_of.trace_id()));
        ids.record("span_id", tracing::field::display(ids_of.span_id()));
    }
    span
}

/// Records `domain` and the decision of `answer`, the rate limit service's (over gRPC or
/// `/json`), on `span`: its overall code stands for every descriptor's decision.
pub fn record_rls(
    span: &tracing::Span,
    domain: &str,
    answer: &tollgate_envoy::rls::proto::service::RateLimitResponse,
) {
    use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
    span.record("tollgate.domain", domain);
    if answer.overall_code == Code::OverLimit as i32 {
        span.record("tollgate.decision", "refused")
            .record("tollgate.reason", "over_limit");
    } else {
        span.record("tollgate.decision", "allowed");
    }
}
