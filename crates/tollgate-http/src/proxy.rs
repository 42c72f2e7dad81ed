//! The proxy's routes: every request through the rate limit layer (and the body digest layer)
//! to the upstream, its answer counted, so an upstream is protected without a change to its
//! code. What the policies admit is forwarded ([`crate::forward`]).

use std::sync::Arc;

use axum::Router;
use tollgate::{AnyStore, Limiter};
use tollgate_tower::RateLimitLayer;

use crate::forward::{ForwardSettings, Forwarder, Upstream};
use crate::proxy_metrics::ProxyMetrics;

/// The proxy's routes on `limiter`, forwarding to `upstream` as `settings` say, the answers
/// counted in `metrics`.
pub fn router(
    limiter: &Limiter<AnyStore>,
    upstream: Upstream,
    settings: ForwardSettings,
    metrics: &Arc<ProxyMetrics>,
) -> Result<Router, String> {
    let forwarder = Arc::new(Forwarder::new(upstream, settings, Arc::clone(metrics))?);
    let forward = tower::service_fn(move |request| {
        let forwarder = Arc::clone(&forwarder);
        async move { Ok::<_, std::convert::Infallible>(forwarder.forward(request).await) }
    });
    let counted = Arc::clone(metrics);
    let app = Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_response(move |response: axum::http::Response<_>| {
                counted.answered(response.status().as_u16());
                response
            })
            .layer(tollgate_tower::BodyDigestLayer::new(limiter.clone()))
            .layer(RateLimitLayer::new(limiter.clone()))
            .service(forward),
    );
    #[cfg(feature = "otel")]
    let app = if crate::otel::enabled() {
        app.layer(crate::otel::TraceLayer::propagating())
    } else {
        app
    };
    Ok(app)
}
