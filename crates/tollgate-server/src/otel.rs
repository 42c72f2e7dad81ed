//! OpenTelemetry traces of checks (the `otel` feature, on by default): the exporter, over
//! OTLP/gRPC or OTLP/HTTP to the collector `--otlp-endpoint` names; the observer that fills in
//! a check span's attributes as the limiter decides; Envoy's rate limit service over gRPC,
//! each call in a check span. The spans and the HTTP frontends' span layer are
//! `tollgate_http::otel`'s. Nothing here runs unless `--otlp-endpoint` is given: the exporter,
//! the span layer and the observer are installed only then.

mod export;
mod http_client;
mod observer;
mod rls;

pub use export::{OtelFlags, OtlpProtocol, Tracing};
pub use observer::SpanObserver;
pub use rls::TracedRlsGrpc;
