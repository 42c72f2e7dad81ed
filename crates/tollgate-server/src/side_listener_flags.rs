//! `--debug-listen`, `--metrics-listen`, `--metrics-path` and `--no-admin`: the listeners
//! beside the main ones, for deployments written for envoyproxy/ratelimit (served by
//! `tollgate_http::side_listeners`).

use std::net::SocketAddr;

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
