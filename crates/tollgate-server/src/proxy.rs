//! `tollgate proxy`: a reverse proxy that applies the policies to every request and forwards
//! what they admit, so an upstream is protected without a change to its code. Its flags, and
//! its listeners wired up; the routes are `tollgate_http::proxy`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tollgate_http::admin::AdminState;
use tollgate_http::forward::{ForwardSettings, Upstream};
use tollgate_http::http_server::{Workers, listen, serve};

use crate::admin_flags::AdminArgs;
use crate::connection_flags::{ConnectionFlags, DefaultWorkers};
use crate::reload::Reloader;
use crate::store::{self, StoreFlags};

/// `tollgate proxy` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyArgs {
    /// The policy file (YAML).
    #[arg(long, env = "TOLLGATE_CONFIG", value_name = "FILE")]
    pub config: PathBuf,
    /// Where admitted requests go, e.g. http://127.0.0.1:3000 (a path is prefixed to requests).
    #[arg(long, env = "TOLLGATE_UPSTREAM", value_name = "URL")]
    pub upstream: String,
    /// Where the proxy listens.
    #[arg(
        long,
        env = "TOLLGATE_LISTEN",
        default_value = "127.0.0.1:8000",
        value_name = "ADDR"
    )]
    pub listen: SocketAddr,
    /// How long the upstream has to connect and send its response head.
    #[arg(long, env = "TOLLGATE_UPSTREAM_TIMEOUT", default_value = "60s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub upstream_timeout: Duration,
    /// Speak HTTP/2 to the upstream without upgrade (gRPC upstreams).
    #[arg(long, env = "TOLLGATE_UPSTREAM_HTTP2")]
    pub upstream_http2: bool,
    /// For an https:// upstream: the CA certificates (PEM) to verify it with, instead of the
    /// system's.
    #[arg(long, env = "TOLLGATE_UPSTREAM_CA", value_name = "FILE")]
    pub upstream_ca: Option<std::path::PathBuf>,
    /// Reload only on SIGHUP, not when the configuration files change.
    #[arg(long, env = "TOLLGATE_NO_WATCH")]
    pub no_watch: bool,
    #[command(flatten)]
    pub(crate) store: StoreFlags,
    #[command(flatten)]
    pub(crate) connections: ConnectionFlags,
    #[command(flatten)]
    pub(crate) tls: crate::tls_flags::TlsFlags,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) health: crate::health_flags::HealthArgs,
    #[cfg(feature = "otel")]
    #[command(flatten)]
    pub(crate) otel: crate::otel::OtelFlags,
}

/// Runs the proxy until SIGTERM or SIGINT.
pub async fn run(args: ProxyArgs) -> Result<(), String> {
    let upstream = Upstream::parse(&args.upstream)?;
    let (limiter, store_description) = store::open_limiter(Some(&args.config), &args.store).await?;
    store::sweep_expired(&limiter, std::time::Duration::from_secs(10));
    args.admin.validate()?;
    let tls = args.tls.load()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (listener, address) = listen(args.listen, "the proxy").await?;
    let (admin, admin_address) = listen(args.admin.admin, "the admin API").await?;
    let admin_hosts = args.admin.allowed_hosts(admin_address)?;
    let reloader = Arc::new(
        Reloader::new(limiter.clone(), None, Some(args.config.clone()), None).with_tls(tls.clone()),
    );
    reloader.start(!args.no_watch);
    let shutdown = crate::shutdown::Shutdown::after_signal(args.health.shutdown_delay);
    let connections = args.connections.limits(DefaultWorkers::PerCore)?;
    let banner = format!(
        "tollgate proxying\n  listen: {scheme}://{address}\n  upstream: {upstream}\n  admin: {scheme}://{admin_address} (GET /dashboard, /metrics, /admin/...)\n  store: {store_description}\n  threads: {}\n  overrides: {}\n  policies: {}",
        crate::runtime_threads::describe(connections.workers.as_ref()),
        crate::overrides::describe(&limiter, &args.store.overrides),
        args.config.display()
    );
    let proxy_metrics = Arc::new(tollgate_http::proxy_metrics::ProxyMetrics::new());
    let app = tollgate_http::proxy::app(
        &limiter,
        upstream,
        ForwardSettings {
            timeout: args.upstream_timeout,
            http2: args.upstream_http2,
            upstream_ca: args.upstream_ca.clone(),
            listener_tls: tls.is_some() && args.tls.covers(crate::tls_flags::Listener::Http),
            worker_threads: connections.workers.as_ref().map_or(1, Workers::threads),
        },
        &proxy_metrics,
    )?;
    let admin_app = tollgate_http::admin::router(
        AdminState {
            limiter: limiter.clone(),
            rls: None,
            quotas: None,
            config: Some(args.config.clone()),
            built_in_policies: crate::policies::BUILT_IN,
            proxy_metrics: Some(proxy_metrics),
            readiness: tollgate_http::health::Readiness {
                stopping: tollgate_http::health::Stopping::on(crate::shutdown::signal()),
                store: tollgate_http::store_health::watch(
                    &limiter,
                    args.health.store_probe_interval,
                    None,
                ),
                needs_store: args.health.readiness == crate::health_flags::ReadinessMode::Store,
                rls_domains: None,
            },
        },
        args.admin.tokens(),
        admin_hosts,
    );
    let tls_for = |listener| tls.as_ref().filter(|_| args.tls.covers(listener));
    let proxy_server = serve(
        listener,
        app,
        &connections,
        tls_for(crate::tls_flags::Listener::Http),
        shutdown.wait(),
    );
    let admin_server = serve(
        admin,
        admin_app.into(),
        &connections,
        tls_for(crate::tls_flags::Listener::Admin),
        shutdown.wait(),
    );
    // Announced once the reload and stop signals have their handlers.
    println!("{banner}");
    tokio::join!(proxy_server, admin_server);
    // Leased quota this node did not spend goes back for the other nodes.
    limiter.return_leases().await;
    Ok(())
}
