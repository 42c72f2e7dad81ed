//! `tollgate serve`: the check API and Envoy's `/json` over HTTP, Envoy's rate limit service
//! over gRPC, on one store and one set of policies.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::admin::{AdminArgs, AdminState};
use crate::api::{AppState, router};
use crate::http_server::{ConnectionLimits, listen, serve};
use crate::reload::Reloader;
use crate::rlqs::{Rlqs, RlqsGrpc};
use crate::rls::{Rls, RlsConfig, RlsGrpc};
use crate::store::{self, StoreFlags};

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
    /// (UNAVAILABLE, so that Envoy's failure_mode_deny decides), `allow` or `deny`.
    #[arg(
        long,
        env = "TOLLGATE_RLS_ON_STORE_ERROR",
        value_enum,
        default_value = "error"
    )]
    pub rls_on_store_error: crate::rls::RlsFailureMode,
    #[command(flatten)]
    pub(crate) rls_limits: crate::rls::RlsLimits,
    #[command(flatten)]
    pub(crate) rls_modes: crate::rls::RlsModes,
    #[command(flatten)]
    pub(crate) rls_header_names: crate::rls::RlsHeaderNames,
    #[command(flatten)]
    pub(crate) rls_stats: crate::rls::RlsStatsFlags,
    #[command(flatten)]
    pub(crate) quotas: crate::rlqs::QuotaFlags,
    #[command(flatten)]
    pub(crate) connections: ConnectionLimits,
    #[command(flatten)]
    pub(crate) tls: crate::tls::TlsFlags,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    #[command(flatten)]
    pub(crate) refunds: crate::api::RefundArgs,
    #[command(flatten)]
    pub(crate) health: crate::health::HealthArgs,
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
}

/// The start-up lines: where each listener is, what it serves, the store and the policies.
fn print_banner(args: &ServeArgs, [http, grpc, admin]: [SocketAddr; 3], store: &str) {
    let config = args.config.as_ref().map_or_else(
        || "built-in example (examples/policies.yaml)".to_owned(),
        |p| p.display().to_string(),
    );
    let scheme = if args.tls.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let over = if args.tls.tls_cert.is_some() {
        " over TLS"
    } else {
        ""
    };
    println!("tollgate serving");
    println!(
        "  http: {scheme}://{http} (POST /v1/check, /v1/refund, /json; GET /healthz, /readyz, /metrics, /openapi.json)"
    );
    println!(
        "  grpc: {grpc} (envoy.service.ratelimit.v3.RateLimitService{over}, envoy.service.rate_limit_quota.v3.RateLimitQuotaService)"
    );
    println!(
        "  admin: {scheme}://{admin} (GET /dashboard, /admin/stats, /admin/top, /admin/config; POST /admin/inspect, /admin/reset, /admin/lift{})",
        if args.admin.admin_token.is_some() {
            "; token required"
        } else {
            ""
        }
    );
    println!("  store: {store}");
    println!("  policies: {config}");
    if let Some(directory) = &args.rls_config {
        println!(
            "  rate limit service configuration: {}",
            directory.display()
        );
    }
}

/// Runs the server until SIGTERM or SIGINT.
pub async fn run(args: ServeArgs) -> Result<(), String> {
    let rls_config = match &args.rls_config {
        Some(directory) => RlsConfig::load_dir_merging(directory, args.rls_modes.merge_domains)
            .map_err(|errors| errors.to_string())?,
        None => RlsConfig::default(),
    };
    let (limiter, store_description) =
        store::open_limiter(args.config.as_deref(), &args.store).await?;
    store::sweep_expired(&limiter, std::time::Duration::from_secs(10));
    let rls = Arc::new(
        Rls::new(limiter.clone(), rls_config, args.rls_response_headers)
            .with_failure_mode(args.rls_on_store_error)
            .with_limits(args.rls_limits)
            .with_modes(args.rls_modes)
            .with_header_names(args.rls_header_names.clone())
            .with_stats(args.rls_stats),
    );
    let quotas = Arc::new(Rlqs::new(
        limiter.clone(),
        Arc::clone(&rls),
        args.quotas.tuning(),
    )?);
    let assigning = tokio::spawn(Arc::clone(&quotas).run());
    args.admin.validate()?;
    let charges = Arc::new(args.refunds.charges()?);
    let tls = crate::tls::Tls::from_flags(&args.tls)?;
    let (http, http_address) = listen(args.http, "HTTP").await?;
    let (admin, admin_address) = listen(args.admin.admin, "the admin API").await?;
    let admin_hosts = args.admin.allowed_hosts(admin_address)?;
    let (grpc, grpc_address) = listen(args.grpc, "gRPC").await?;
    let reloader = Arc::new(
        Reloader::new(
            limiter.clone(),
            Some(Arc::clone(&rls)),
            args.config.clone(),
            args.rls_config.clone(),
        )
        .allowing_no_rls_domains(args.rls_allow_empty)
        .with_tls(tls.clone()),
    );
    Arc::clone(&reloader).start(!args.no_watch);
    let (health, stopping) = crate::health::service(crate::shutdown::signal()).await;
    let shutdown = crate::shutdown::Shutdown::after_signal(args.health.shutdown_delay);
    let rls_mode = match args.rls_on_store_error {
        crate::rls::RlsFailureMode::Error => "UNAVAILABLE (Envoy's failure_mode_deny decides)",
        crate::rls::RlsFailureMode::Allow => "OK to every descriptor",
        crate::rls::RlsFailureMode::Deny => "OVER_LIMIT to every descriptor",
    };
    let readiness = crate::health::Readiness {
        stopping,
        store: crate::store_health::watch(
            &limiter,
            args.health.store_probe_interval,
            Some(rls_mode),
        ),
        mode: args.health.readiness,
    };
    let app = router(AppState::new(crate::api::Shared {
        limiter: limiter.clone(),
        rls: Arc::clone(&rls),
        quotas: Some(Arc::clone(&quotas)),
        charges,
        readiness: readiness.clone(),
    }));
    let admin_app = crate::admin::router(
        AdminState {
            limiter: limiter.clone(),
            rls: Some(Arc::clone(&rls)),
            quotas: Some(Arc::clone(&quotas)),
            config: args.config.clone(),
            readiness,
            proxy_metrics: None,
        },
        args.admin.admin_token.clone(),
        admin_hosts,
    );
    let tls = tls.as_ref();
    let http_server = serve(http, app, &args.connections, tls, shutdown.wait());
    let admin_server = serve(admin, admin_app, &args.connections, tls, shutdown.wait());
    // The gRPC services go through the same accept loop as HTTP, with the same bounds: a
    // connection cap, and a client that never sends its preface (or goes idle) is closed.
    let grpc_app = tonic::service::Routes::new(RlsGrpc::server(rls))
        .add_service(RlqsGrpc::server(quotas))
        .add_service(health)
        .into_axum_router();
    let grpc_server = serve(grpc, grpc_app, &args.connections, tls, shutdown.wait());
    // Announced once the reload and stop signals have their handlers.
    print_banner(
        &args,
        [http_address, grpc_address, admin_address],
        &store_description,
    );
    tokio::join!(http_server, admin_server, grpc_server);
    assigning.abort();
    // Leased quota this node did not spend goes back for the other nodes.
    limiter.return_leases().await;
    Ok(())
}
