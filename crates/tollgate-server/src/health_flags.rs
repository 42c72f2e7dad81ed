//! `--readiness`, `--shutdown-delay`, `--store-probe-interval` and
//! `--ready-with-rls-domains`: what readiness asks for and how the process stops.

/// When a pod counts as ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ReadinessMode {
    /// Ready while it serves, the store up or not: a pod that answers by its policies'
    /// failure modes is ready, so that a shared store going down does not take every pod out
    /// of rotation at once.
    #[default]
    Serving,
    /// Ready only while the store answers its probe.
    Store,
}

/// `--readiness`, `--shutdown-delay` and `--store-probe-interval`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// When `/readyz` says ready: `serving` (while the process serves, deciding by the
    /// policies' failure modes when the store is down) or `store` (only while the store
    /// answers).
    #[arg(
        long,
        env = "TOLLGATE_READINESS",
        value_enum,
        default_value = "serving"
    )]
    pub readiness: ReadinessMode,
    /// After SIGTERM, how long to keep serving while answering not ready, before closing the
    /// listeners (set it to what your load balancer takes to notice; within the pod's grace
    /// period together with --shutdown-timeout).
    #[arg(long, env = "TOLLGATE_SHUTDOWN_DELAY", default_value = "0s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub shutdown_delay: std::time::Duration,
    /// How often the store is probed for `tollgate_store_up`, `/readyz` and the store's logs.
    #[arg(long, env = "TOLLGATE_STORE_PROBE_INTERVAL", default_value = "1s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub store_probe_interval: std::time::Duration,
    /// Not ready until the rate limit service has at least one domain, as
    /// envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
    #[arg(long, env = "TOLLGATE_READY_WITH_RLS_DOMAINS")]
    pub ready_with_rls_domains: bool,
}
