//! The span around one HTTP request: the check API's and the proxy's. The caller's trace
//! context is its parent; the proxy also hands the span's context on to the upstream.

use std::task::{Context, Poll};

use http::Request;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing::instrument::Instrumented;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::propagation::{inject, parent_of};

/// Wraps every request in a check span named `name`.
#[derive(Debug, Clone, Copy)]
pub struct TraceLayer {
    name: &'static str,
    propagate: bool,
}

impl TraceLayer {
    /// Spans named `name`, for a frontend that answers itself.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            propagate: false,
        }
    }

    /// Spans named `name`, whose context replaces the caller's in the request passed on, so
    /// the upstream's spans are children of this one.
    pub fn propagating(name: &'static str) -> Self {
        Self {
            name,
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

impl<S, B> Service<Request<B>> for TraceService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let span = super::check_span(self.layer.name, parent_of(request.headers()));
        if self.layer.propagate {
            inject(&span.context(), request.headers_mut());
        }
        let future = span.in_scope(|| self.inner.call(request));
        future.instrument(span)
    }
}
