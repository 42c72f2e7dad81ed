//! `tollgate serve`'s flags, apart from what runs it, so that the parts that read or fill
//! them in (envoyproxy/ratelimit's environment among them) need not import the server.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::admin_flags::AdminArgs;
use crate::connection_flags::ConnectionFlags;
use crate::store::StoreFlags;
use tollgate_envoy::rls::RlsFailureMode;

/// `tollgate serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The policy file (YAML); without it, the built-in example (examples/policies.yaml).
    #[arg(long, env = "TOLLGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A directory of envoyproxy/ratelimit configuration files for the rate limit service.
    #[arg(long, env = "TOLLGATE_RLS_CONFIG", value_name = "DIR")]
    pub rls_config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreFlags,
    /// Where the HTTP API listens.
    #[arg(
        long,
        env = "TOLLGATE_HTTP",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub http: SocketAddr,
    /// Where the gRPC rate limit service listens.
    #[arg(
        long,
        env = "TOLLGATE_GRPC",
        default_value = "127.0.0.1:8081",
        value_name = "ADDR"
    )]
    pub grpc: SocketAddr,
    /// Add RateLimit-Limit, -Remaining and -Reset to rate limit service answers, as
    /// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED does.
    #[arg(long, env = "TOLLGATE_RLS_RESPONSE_HEADERS")]
    pub rls_response_headers: bool,
    /// What the rate limit service answers when the store cannot decide: `error`
    /// (UNAVAILABLE, so that Envoy's failure_mode_deny decides), or a policy's failure mode:
    /// `allow`, `deny`, or `local` (the rules' limits decided in process, each divided among
    /// --rls-local-nodes).
    #[arg(
        long,
        env = "TOLLGATE_RLS_ON_STORE_ERROR",
        default_value = "error",
        value_name = "error|allow|deny|local"
    )]
    pub rls_on_store_error: RlsFailureMode,
    /// With --rls-on-store-error local, the nodes that each decide alone while the store
    /// cannot: each takes this share of every limit (as a policy's `local_nodes`).
    #[arg(
        long,
        env = "TOLLGATE_RLS_LOCAL_NODES",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(1..=10_000),
        value_name = "N"
    )]
    pub rls_local_nodes: u64,
    #[command(flatten)]
    pub(crate) rls_limits: tollgate_envoy::rls::RlsLimits,
    #[command(flatten)]
    pub(crate) rls_upstream_keys: tollgate_envoy::rls::UpstreamKeys,
    #[command(flatten)]
    pub(crate) rls_modes: tollgate_envoy::rls::RlsModes,
    #[command(flatten)]
    pub(crate) rls_header_names: tollgate_envoy::rls::RlsHeaderNames,
    #[command(flatten)]
    pub(crate) rls_stats: tollgate_envoy::rls::RlsStatsFlags,
    #[command(flatten)]
    pub(crate) rls_xds: tollgate_envoy::rls::xds::XdsFlags,
    #[command(flatten)]
    pub(crate) quotas: tollgate_envoy::rlqs::QuotaFlags,
    #[command(flatten)]
    pub(crate) connections: ConnectionFlags,
    #[command(flatten)]
    pub(crate) tls: crate::tls_flags::TlsFlags,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) refunds: crate::refund_flags::RefundArgs,
    #[command(flatten)]
    pub(crate) health: crate::health_flags::HealthArgs,
    /// Let a reload of the rate limit service's directory leave no domain (every Envoy limit
    /// switched off); without it such a reload is refused and the last configuration stays.
    #[arg(long, env = "TOLLGATE_RLS_ALLOW_EMPTY")]
    pub rls_allow_empty: bool,
    /// Reload only on SIGHUP, not when the configuration files change.
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    pub no_watch: bool,
    #[cfg(feature = "otel")]
    #[command(flatten)]
    pub(crate) otel: crate::otel::OtelFlags,
    #[command(flatten)]
    pub(crate) side: crate::side_listener_flags::SideListeners,
    #[command(flatten)]
    pub(crate) upstream: UpstreamFlags,
    /// A link above --rls-config whose replacement reloads it (envoyproxy/ratelimit's
    /// RUNTIME_ROOT with RUNTIME_WATCH_ROOT), from its environment.
    #[arg(skip)]
    pub(crate) rls_watch_root: Option<PathBuf>,
}

/// `--upstream-env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UpstreamMode {
    /// Read upstream's variables when one of those particular to it is set.
    #[default]
    Auto,
    /// Read them, set or not (upstream's defaults for the unset).
    On,
    /// Never read them.
    Off,
}

/// Whether `tollgate serve` reads envoyproxy/ratelimit's environment.
#[derive(Debug, Clone, clap::Args)]
pub struct UpstreamFlags {
    /// Read envoyproxy/ratelimit's environment variables (REDIS_URL, RUNTIME_ROOT, ...):
    /// `auto` when one particular to it is set, `on`, or `off`.
    #[arg(
        long,
        env = "TOLLGATE_UPSTREAM_ENV",
        value_enum,
        default_value = "auto"
    )]
    pub upstream_env: UpstreamMode,
}
