//! OpenTelemetry traces of checks (the `otel` feature): one span per check from the HTTP check
//! API, the proxy and Envoy's rate limit service, a child of the caller's trace (W3C trace
//! context), exported over OTLP/gRPC. Nothing here runs unless `--otlp-endpoint` is given: the
//! exporter, the span layer and the observer are installed only then.

mod export;
mod layer;
mod observer;
mod propagation;
mod rls;

pub use export::{OtelFlags, Tracing};
pub use layer::{TraceLayer, TraceService};
pub use observer::SpanObserver;
pub use propagation::parent_of;
pub use rls::record_rls;

use std::sync::atomic::{AtomicBool, Ordering};

/// The target of check spans: the exporter's layer takes these and nothing else, so log
/// filters (`TOLLGATE_LOG`) neither hide them nor add other spans to the traces.
pub const TARGET: &str = "tollgate::check";

/// Set once the exporter is installed: the frontends open spans only then.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether check spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A check span named `name` (the exported span's name), with empty attributes for the
/// observer and the frontend to fill in, and `parent` as its parent when the caller sent one.
pub fn check_span(name: &'static str, parent: Option<opentelemetry::Context>) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "check",
        otel.name = name,
        otel.kind = "server",
        tollgate.policy = tracing::field::Empty,
        tollgate.domain = tracing::field::Empty,
        tollgate.decision = tracing::field::Empty,
        tollgate.reason = tracing::field::Empty,
        tollgate.decided_by = tracing::field::Empty,
        tollgate.store.duration_us = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        // Fails only for a span no subscriber records, which then has nothing to export.
        let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, parent);
    }
    span
}
