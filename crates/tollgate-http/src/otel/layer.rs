//! The span around one HTTP request: the check API's and the proxy's. The caller's trace
//! context is its parent; the proxy also hands the span's context on to the upstream. The
//! response's status is recorded on it, and a server error marks it as one.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::Entry;
use super::propagation::{inject, parent_of};

/// Wraps every request in a check span.
#[derive(Debug, Clone, Copy)]
pub struct TraceLayer {
    /// The route the requests came by, when the router has one.
    route: Option<&'static str>,
    propagate: bool,
}

impl TraceLayer {
    /// Spans for a route that answers itself, such as `/v1/check`.
    pub fn new(route: &'static str) -> Self {
        Self {
            route: Some(route),
            propagate: false,
        }
    }

    /// Spans whose context replaces the caller's in the request passed on, so the upstream's
    /// spans are children of this one (the proxy, which has no routes of its own).
    pub fn propagating() -> Self {
        Self {
            route: None,
            propagate: true,
        }
    }
}

impl<S> Layer<S> for TraceLayer {
    type Service = TraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceService {
            inner,
            layer: *self,
        }
    }
}

/// The service of a [`TraceLayer`].
#[derive(Debug, Clone)]
pub struct TraceService<S> {
    inner: S,
    layer: TraceLayer,
}

impl<S, B, R> Service<Request<B>> for TraceService<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let entry = Entry::Http {
            method: request.method().as_str(),
            route: self.layer.route,
            path: self.layer.route.map(|_| request.uri().path()),
        };
        let span = super::check_span(entry, parent_of(request.headers()));
        if self.layer.propagate {
            inject(&span.context(), request.headers_mut());
        }
        let future = span.in_scope(|| self.inner.call(request));
        let answered = span.clone();
        Box::pin(
            async move {
                let result = future.await;
                if let Ok(response) = &result {
                    record_status(&answered, response.status().as_u16());
                }
                result
            }
            .instrument(span),
        )
    }
}

/// The response's status, and for a server error its class as the error's type.
fn record_status(span: &tracing::Span, status: u16) {
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("error.type", status.to_string().as_str());
        span.record("otel.status_code", "error");
    }
}
