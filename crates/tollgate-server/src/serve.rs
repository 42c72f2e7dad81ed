//! `tollgate serve`: the check API and Envoy's `/json` over HTTP, Envoy's rate limit service
//! over gRPC, on one store and one set of policies.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::connection_flags::DefaultWorkers;
use crate::reload::Reloader;
use crate::serve_args::ServeArgs;
use crate::store;
use axum::http::Method;
use tollgate::policy::FailureMode;
use tollgate::{AnyStore, Limiter};
use tollgate_envoy::rlqs::{Rlqs, RlqsGrpc};
use tollgate_envoy::rls::proto::service::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use tollgate_envoy::rls::unary::Unary;
use tollgate_envoy::rls::{Rls, RlsConfig, RlsFailureMode};
use tollgate_http::admin::AdminState;
use tollgate_http::api::{AppState, app};
use tollgate_http::health::Readiness;
use tollgate_http::http_server::{ConnectionLimits, listen, serve};
use tollgate_http::lane::{App, Lane};

/// The start-up lines: where each listener is, what it serves, the store and the policies.
fn print_banner(
    args: &ServeArgs,
    bound: &Bound,
    store: &str,
    limiter: &Limiter<AnyStore>,
    connections: &ConnectionLimits,
) {
    let config = args.config.as_ref().map_or_else(
        || "built-in example (examples/policies.yaml)".to_owned(),
        |p| p.display().to_string(),
    );
    let tls = |listener| args.tls.tls_cert.is_some() && args.tls.covers(listener);
    let scheme = |listener| if tls(listener) { "https" } else { "http" };
    let over = if tls(crate::tls_flags::Listener::Grpc) {
        " over TLS"
    } else {
        ""
    };
    println!("tollgate serving");
    println!(
        "  http: {}://{} (POST /v1/check, /v1/refund, /json; GET /healthz, /readyz, /metrics, /openapi.json)",
        scheme(crate::tls_flags::Listener::Http),
        bound.http
    );
    println!(
        "  grpc: {} (envoy.service.ratelimit.v3.RateLimitService{over}, envoy.service.rate_limit_quota.v3.RateLimitQuotaService)",
        bound.grpc
    );
    match bound.admin {
        Some(admin) => println!(
            "  admin: {}://{admin} (GET /dashboard, /admin/stats, /admin/top, /admin/config, /admin/overrides; PUT, DELETE /admin/overrides; POST /admin/inspect, /admin/reset, /admin/lift, /admin/overrides/import){}",
            scheme(crate::tls_flags::Listener::Admin),
            if args.admin.admin_token.is_some() {
                "; token required"
            } else {
                ""
            }
        ),
        None => println!("  admin: off"),
    }
    if let Some(debug) = bound.debug {
        println!("  debug: http://{debug} (GET /rlconfig, /stats)");
    }
    if let Some(metrics) = bound.metrics {
        println!("  metrics: http://{metrics}{}", args.side.metrics_path);
    }
    println!("  store: {store}");
    println!(
        "  threads: {}",
        crate::runtime_threads::describe(connections.workers.as_ref())
    );
    println!(
        "  overrides: {}",
        crate::overrides::describe(limiter, &args.store.overrides)
    );
    println!("  policies: {config}");
    if let Some(directory) = &args.rls_config {
        println!(
            "  rate limit service configuration: {}",
            directory.display()
        );
    }
    if let Some(server) = &args.rls_xds.rls_xds_server {
        println!(
            "  rate limit service configuration: xDS from {server} as node {}",
            args.rls_xds.rls_xds_node_id
        );
    }
}

/// Where the listeners were bound.
struct Bound {
    http: SocketAddr,
    grpc: SocketAddr,
    admin: Option<SocketAddr>,
    debug: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

/// The listening sockets, each with the address it was bound to.
struct Listeners {
    http: tokio::net::TcpListener,
    grpc: tokio::net::TcpListener,
    admin: Option<tokio::net::TcpListener>,
    debug: Option<tokio::net::TcpListener>,
    metrics: Option<tokio::net::TcpListener>,
    bound: Bound,
}

/// Binds every listener the flags ask for.
async fn bind(args: &ServeArgs) -> Result<Listeners, String> {
    let optional = |address: Option<SocketAddr>, what: &'static str| async move {
        match address {
            Some(address) => listen(address, what).await.map(Some),
            None => Ok(None),
        }
    };
    let (http, http_address) = listen(args.http, "HTTP").await?;
    let (grpc, grpc_address) = listen(args.grpc, "gRPC").await?;
    let admin = optional(
        (!args.side.no_admin).then_some(args.admin.admin),
        "the admin API",
    )
    .await?;
    let debug = optional(args.side.debug_listen, "the debug endpoints").await?;
    let metrics = optional(args.side.metrics_listen, "the metrics").await?;
    let address =
        |bound: &Option<(tokio::net::TcpListener, SocketAddr)>| bound.as_ref().map(|b| b.1);
    let bound = Bound {
        http: http_address,
        grpc: grpc_address,
        admin: address(&admin),
        debug: address(&debug),
        metrics: address(&metrics),
    };
    Ok(Listeners {
        http,
        grpc,
        admin: admin.map(|b| b.0),
        debug: debug.map(|b| b.0),
        metrics: metrics.map(|b| b.0),
        bound,
    })
}

/// The rate limit service on `limiter`, with the configuration the flags name.
fn rate_limit_service(args: &ServeArgs, limiter: &Limiter<AnyStore>) -> Result<Arc<Rls>, String> {
    let rls_config = match &args.rls_config {
        Some(directory) => RlsConfig::load_dir_merging(directory, args.rls_modes.merge_domains)
            .map_err(|errors| errors.to_string())?,
        None => RlsConfig::default(),
    };
    if args.rls_config.is_some() && rls_config.domains().next().is_none() {
        tracing::warn!(
            "the rate limit service's configuration holds no domain: every descriptor is answered OK until one is loaded"
        );
    }
    // Started before an xDS server has pushed anything: an error until it has, as upstream.
    let awaiting =
        args.rls_xds.rls_xds_server.is_some() && args.rls_xds.rls_xds_start_without_config;
    let rls = Rls::new(limiter.clone(), rls_config, args.rls_response_headers);
    let rls = if awaiting { rls.awaiting_config() } else { rls };
    Ok(Arc::new(
        rls.with_failure_mode(args.rls_on_store_error)
            .with_local_nodes(args.rls_local_nodes)
            .with_limits(args.rls_limits)
            .with_modes(args.rls_modes)
            .with_header_names(args.rls_header_names.clone())
            .with_stats(args.rls_stats)
            .with_upstream_keys(args.rls_upstream_keys.counting()),
    ))
}

/// The reloader of the policy file, the rate limit configuration and the certificates.
fn reloader(
    args: &ServeArgs,
    limiter: &Limiter<AnyStore>,
    rls: &Arc<Rls>,
    tls: Option<&tollgate_http::tls::Tls>,
) -> Arc<Reloader> {
    let mut reloader = Reloader::new(
        limiter.clone(),
        Some(Arc::clone(rls)),
        args.config.clone(),
        args.rls_config.clone(),
    )
    .allowing_no_rls_domains(args.rls_allow_empty)
    .with_tls(tls.cloned());
    if let (Some(root), Some(directory)) = (&args.rls_watch_root, &args.rls_config) {
        reloader = reloader.following_root(root, directory);
    }
    Arc::new(reloader)
}

/// What the rate limit service answers while the store cannot decide, for the store's logs.
fn rls_failure_meaning(mode: RlsFailureMode) -> &'static str {
    match mode {
        RlsFailureMode::Error => "UNAVAILABLE (Envoy's failure_mode_deny decides)",
        RlsFailureMode::Decide(FailureMode::Allow) => "OK to every descriptor",
        RlsFailureMode::Decide(FailureMode::Deny) => "OVER_LIMIT to every descriptor",
        RlsFailureMode::Decide(FailureMode::Local) => {
            "each descriptor decided in process on its share of the limit"
        }
    }
}

/// Resolves with an error if the store has not answered `within` of start-up; never without
/// a limit.
async fn store_deadline(
    store: tollgate_http::store_health::StoreHealth,
    within: Option<std::time::Duration>,
) -> Result<(), String> {
    let Some(within) = within else {
        return std::future::pending().await;
    };
    tokio::time::sleep(within).await;
    if store.is_up() {
        return std::future::pending().await;
    }
    Err(format!(
        "the store did not answer within {within:?} of start-up (--redis-startup-timeout): {}",
        store.error().unwrap_or_default()
    ))
}

/// What readiness asks for: the process not stopping, the store reachable (probed in the
/// background from now on) and, if asked, a rate limit domain configured.
fn readiness(
    args: &ServeArgs,
    limiter: &Limiter<AnyStore>,
    rls: &Arc<Rls>,
    stopping: tollgate_http::health::Stopping,
) -> Readiness {
    let store_health = tollgate_http::store_health::watch(
        limiter,
        args.health.store_probe_interval,
        Some(rls_failure_meaning(args.rls_on_store_error)),
    );
    Readiness {
        stopping,
        store: store_health,
        needs_store: args.health.readiness == crate::health_flags::ReadinessMode::Store,
        rls_domains: args.health.ready_with_rls_domains.then(|| Arc::clone(rls)),
    }
}

/// The limiter on its store (with the store's description), and the rate limit and quota
/// services on it.
async fn open_services(
    args: &ServeArgs,
) -> Result<(Limiter<AnyStore>, String, Arc<Rls>, Arc<Rlqs>), String> {
    let (limiter, store_description) =
        store::open_limiter(args.config.as_deref(), &args.store).await?;
    store::sweep_expired(&limiter, std::time::Duration::from_secs(10));
    let rls = rate_limit_service(args, &limiter)?;
    store::connect_per_second(&limiter, &args.store, &args.rls_upstream_keys).await?;
    let quotas = Arc::new(Rlqs::new(
        limiter.clone(),
        Arc::clone(&rls),
        args.quotas.tuning(),
    )?);
    Ok((limiter, store_description, rls, quotas))
}

/// The debug and metrics listeners' routes.
fn side_apps(
    args: &ServeArgs,
    limiter: &Limiter<AnyStore>,
    rls: &Arc<Rls>,
    quotas: &Arc<Rlqs>,
) -> (axum::Router, axum::Router) {
    let shown = tollgate_http::side_listeners::Shown {
        limiter: limiter.clone(),
        rls: Arc::clone(rls),
        quotas: Some(Arc::clone(quotas)),
    };
    (
        tollgate_http::side_listeners::debug_router(shown.clone()),
        tollgate_http::side_listeners::metrics_router(shown, &args.side.metrics_path),
    )
}

/// What the listeners serve: the limiter and the two Envoy services.
struct Served<'a> {
    limiter: &'a Limiter<AnyStore>,
    rls: &'a Arc<Rls>,
    quotas: &'a Arc<Rlqs>,
}

/// The check API's routes, and the admin listener's if there is one (`admin_bound` is then
/// the address it is bound to, if known): behind its token, answering the hosts it allows.
fn http_apps(
    args: &ServeArgs,
    served: Served<'_>,
    charges: Arc<tollgate_http::api::Charges>,
    readiness: Readiness,
    admin_bound: Option<Option<SocketAddr>>,
) -> Result<(App, Option<axum::Router>), String> {
    let Served {
        limiter,
        rls,
        quotas,
    } = served;
    let app = app(AppState::new(tollgate_http::api::Shared {
        limiter: limiter.clone(),
        rls: Arc::clone(rls),
        quotas: Some(Arc::clone(quotas)),
        charges,
        readiness: readiness.clone(),
    }));
    let Some(bound) = admin_bound else {
        return Ok((app, None));
    };
    let state = AdminState {
        limiter: limiter.clone(),
        rls: Some(Arc::clone(rls)),
        quotas: Some(Arc::clone(quotas)),
        config: args.config.clone(),
        built_in_policies: crate::policies::BUILT_IN,
        readiness,
        proxy_metrics: None,
    };
    let admin_app = tollgate_http::admin::router(
        state,
        args.admin.tokens(),
        args.admin
            .allowed_hosts(bound.unwrap_or(args.admin.admin))?,
    );
    Ok((app, Some(admin_app)))
}

/// The gRPC services: Envoy's rate limit service (each call traced when traces are exported)
/// beside `others`, answered without a `Date` field (gRPC clients read none).
fn grpc_app(rls: Arc<Rls>, others: tonic::service::Routes) -> App {
    #[cfg(feature = "otel")]
    if tollgate_http::otel::enabled() {
        return rls_beside(crate::otel::TracedRlsGrpc::server(rls), others, None);
    }
    let server = tollgate_envoy::rls::RlsGrpc::server(Arc::clone(&rls));
    rls_beside(server, others, Some(rls))
}

/// The rate limit service `service` beside `others`. `ShouldRateLimit`, which every check
/// calls, goes to the service in a lane of its own, past the router (see [`Lane`]), and with
/// `plain` (the service untraced) a plain call is answered there without tonic's streaming
/// codec (`tollgate_envoy::rls::unary`); the service's other paths and the other services are
/// routed.
fn rls_beside<S: RateLimitService>(
    service: RateLimitServiceServer<S>,
    others: tonic::service::Routes,
    plain: Option<Arc<Rls>>,
) -> App {
    let router = others.add_service(service.clone()).into_axum_router();
    let should_rate_limit = Lane::exact(Method::POST, SHOULD_RATE_LIMIT, move |request| {
        let mut service = service.clone();
        let plain = plain.clone();
        Box::pin(async move {
            let request = match plain {
                Some(rls) => {
                    match tollgate_envoy::rls::unary::should_rate_limit(&rls, request).await {
                        Unary::Answered(response) => return response,
                        Unary::Declined(request) => request,
                    }
                }
                None => request,
            };
            let Ok(response) = tonic::codegen::Service::call(&mut service, request).await;
            response.map(axum::body::Body::new)
        })
    })
    .without_addresses();
    App::new(router, [should_rate_limit]).without_date()
}

/// The path of Envoy's `ShouldRateLimit` call.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Runs the server until SIGTERM or SIGINT.
pub async fn run(args: ServeArgs) -> Result<(), String> {
    let (limiter, store_description, rls, quotas) = open_services(&args).await?;
    let assigning = tokio::spawn(Arc::clone(&quotas).run());
    args.admin.validate()?;
    let charges = Arc::new(args.refunds.charges()?);
    let tls = args.tls.load()?;
    // Limits pushed over xDS: by default the listeners open once the first is in force.
    if tollgate_envoy::rls::xds::subscribe(&args.rls_xds, &rls, &limiter, crate::shutdown::signal)
        .await?
        .is_break()
    {
        return Ok(());
    }
    let listeners = bind(&args).await?;
    Arc::clone(&reloader(&args, &limiter, &rls, tls.as_ref())).start(!args.no_watch);
    let (health, stopping, reporter) =
        tollgate_http::health::service(crate::shutdown::signal()).await;
    let shutdown = crate::shutdown::Shutdown::after_signal(args.health.shutdown_delay);
    let readiness = readiness(&args, &limiter, &rls, stopping);
    let store_health = readiness.store.clone();
    tollgate_http::health::follow(
        reporter,
        readiness.clone(),
        std::time::Duration::from_secs(1),
    );
    let (debug_app, metrics_app) = side_apps(&args, &limiter, &rls, &quotas);
    let (app, admin_app) = http_apps(
        &args,
        Served {
            limiter: &limiter,
            rls: &rls,
            quotas: &quotas,
        },
        charges,
        readiness,
        listeners.admin.as_ref().map(|_| listeners.bound.admin),
    )?;
    let tls_for = |listener| tls.as_ref().filter(|_| args.tls.covers(listener));
    let connections = args.connections.limits(DefaultWorkers::Shared)?;
    let admin_server = listeners.admin.zip(admin_app).map(|(admin, admin_app)| {
        let tls = tls_for(crate::tls_flags::Listener::Admin);
        serve(admin, admin_app.into(), &connections, tls, shutdown.wait())
    });
    // The gRPC services go through the same accept loop as HTTP, with the same bounds: a
    // connection cap, and a client that never sends its preface (or goes idle) is closed.
    let others =
        tonic::service::Routes::new(RlqsGrpc::server(Arc::clone(&quotas))).add_service(health);
    let grpc_app = grpc_app(rls, others);
    let side = |listener: Option<tokio::net::TcpListener>, app: axum::Router| {
        listener.map(|listener| serve(listener, app.into(), &connections, None, shutdown.wait()))
    };
    let main =
        |listener, app, which| serve(listener, app, &connections, tls_for(which), shutdown.wait());
    let servers = futures_util::future::join_all(
        [
            Some(main(listeners.http, app, crate::tls_flags::Listener::Http)),
            Some(main(
                listeners.grpc,
                grpc_app,
                crate::tls_flags::Listener::Grpc,
            )),
            admin_server,
            side(listeners.debug, debug_app),
            side(listeners.metrics, metrics_app),
        ]
        .into_iter()
        .flatten(),
    );
    // Announced once the reload and stop signals have their handlers.
    print_banner(
        &args,
        &listeners.bound,
        &store_description,
        &limiter,
        &connections,
    );
    let outcome = tokio::select! {
        _ = servers => Ok(()),
        failed = store_deadline(store_health, args.store.redis_startup_timeout) => failed,
    };
    assigning.abort();
    // Leased quota this node did not spend goes back for the other nodes.
    limiter.return_leases().await;
    outcome
}
