//! The proxy's routes: every request through the rate limit layer (and the body digest layer)
//! to the upstream, its answer counted, so an upstream is protected without a change to its
//! code. What the policies admit is forwarded ([`crate::forward`]).

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse as _;
use tollgate::{AnyStore, Limiter};
use tollgate_tower::RateLimitLayer;
use tower::ServiceExt as _;

use crate::forward::{ForwardSettings, Forwarder, Upstream};
use crate::lane::{App, Lane};
use crate::proxy_metrics::ProxyMetrics;

/// The proxy's routes on `limiter`, forwarding to `upstream` as `settings` say, the answers
/// counted in `metrics`. Every request takes the same way, so it goes in a lane past the
/// router (see [`Lane`]), unless requests are traced: the trace layer sits on the router.
pub fn app(
    limiter: &Limiter<AnyStore>,
    upstream: Upstream,
    settings: ForwardSettings,
    metrics: &Arc<ProxyMetrics>,
) -> Result<App, String> {
    let forwarder = Arc::new(Forwarder::new(upstream, settings, Arc::clone(metrics))?);
    let forward = tower::service_fn(move |request| {
        let forwarder = Arc::clone(&forwarder);
        async move { Ok::<_, std::convert::Infallible>(forwarder.forward(request).await) }
    });
    let counted = Arc::clone(metrics);
    let service = tower::ServiceBuilder::new()
        .map_response(move |response: axum::http::Response<_>| {
            counted.answered(response.status().as_u16());
            response
        })
        .layer(tollgate_tower::BodyDigestLayer::new(limiter.clone()))
        .layer(RateLimitLayer::new(limiter.clone()))
        .service(forward);
    let router = Router::new().fallback_service(service.clone());
    #[cfg(feature = "otel")]
    if crate::otel::enabled() {
        return Ok(router.layer(crate::otel::TraceLayer::propagating()).into());
    }
    let every = Lane::every(move |request| {
        let service = service.clone();
        Box::pin(async move {
            let Ok(response) = service.oneshot(request).await;
            response.into_response()
        })
    });
    Ok(App::new(router, [every]))
}
