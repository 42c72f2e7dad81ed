//! Listeners beside the main ones, for deployments written for envoyproxy/ratelimit: its debug
//! port (`/rlconfig`, the limits in force; `/stats`, the metrics) and its Prometheus port
//! (`USE_PROMETHEUS`, the metrics at `PROMETHEUS_PATH`); and turning the admin API off.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tollgate::{AnyStore, Limiter};

use tollgate_envoy::rls::Rls;

/// `--debug-listen`, `--metrics-listen`, `--metrics-path` and `--no-admin`.
#[derive(Debug, Clone, clap::Args)]
pub struct SideListeners {
    /// Serve envoyproxy/ratelimit's debug endpoints here: `/rlconfig` (the limits in force)
    /// and `/stats` (the metrics).
    #[arg(long, env = "TOLLGATE_DEBUG_LISTEN", value_name = "ADDR")]
    pub debug_listen: Option<SocketAddr>,
    /// Serve the metrics (Prometheus text) here too, at --metrics-path, without a token.
    #[arg(long, env = "TOLLGATE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// The path of the metrics on --metrics-listen.
    #[arg(
        long,
        env = "TOLLGATE_METRICS_PATH",
        default_value = "/metrics",
        value_name = "PATH"
    )]
    pub metrics_path: String,
    /// Do not serve the admin API and dashboard.
    #[arg(long, env = "TOLLGATE_NO_ADMIN")]
    pub no_admin: bool,
}

/// What the side listeners show.
#[derive(Clone)]
pub(crate) struct Shown {
    pub(crate) limiter: Limiter<AnyStore>,
    pub(crate) rls: Arc<Rls>,
    pub(crate) quotas: Option<Arc<tollgate_envoy::rlqs::Rlqs>>,
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
pub(crate) fn debug_router(shown: Shown) -> Router {
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
pub(crate) fn metrics_router(shown: Shown, path: &str) -> Router {
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
