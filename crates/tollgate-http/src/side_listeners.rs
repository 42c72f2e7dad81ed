//! Listeners beside the main ones, for deployments written for envoyproxy/ratelimit: its debug
//! port (`/rlconfig`, the limits in force; `/stats`, the metrics) and its Prometheus port
//! (`USE_PROMETHEUS`, the metrics at `PROMETHEUS_PATH`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tollgate::{AnyStore, Limiter};

use tollgate_envoy::rls::Rls;

/// What the side listeners show.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The limiter, whose metrics they show.
    pub limiter: Limiter<AnyStore>,
    /// The rate limit service, whose limits `/rlconfig` lists.
    pub rls: Arc<Rls>,
    /// The quota service, when this process serves one.
    pub quotas: Option<Arc<tollgate_envoy::rlqs::Rlqs>>,
}

impl Shown {
    fn metrics(&self) -> String {
        crate::exposition::metrics_text(
            &self.limiter,
            Some(&self.rls),
            self.quotas.as_deref(),
            None,
        )
    }
}

/// The debug listener's routes, as upstream's debug port lists them at `/`.
pub fn debug_router(shown: Shown) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async {
                "/rlconfig: print out the currently loaded configuration for debugging\n\
                 /stats: print out stats\n"
            }),
        )
        .route(
            "/rlconfig",
            get(|State(shown): State<Shown>| async move {
                let mut text = shown.rls.config().describe_limits().join("\n");
                if !text.is_empty() {
                    text.push('\n');
                }
                text
            }),
        )
        .route(
            "/stats",
            get(|State(shown): State<Shown>| async move { shown.metrics() }),
        )
        .with_state(shown)
}

/// The metrics listener's one route.
pub fn metrics_router(shown: Shown, path: &str) -> Router {
    Router::new()
        .route(
            path,
            get(|State(shown): State<Shown>| async move {
                (
                    [(header::CONTENT_TYPE, crate::exposition::CONTENT_TYPE)],
                    shown.metrics(),
                )
                    .into_response()
            }),
        )
        .with_state(shown)
}
