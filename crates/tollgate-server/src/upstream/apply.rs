//! envoyproxy/ratelimit's settings onto `tollgate serve`'s: each variable upstream reads is
//! taken with upstream's meaning and default, refused with what to do instead, or noted as not
//! needed; a Tollgate flag or `TOLLGATE_*` variable given explicitly wins over it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::env::Env;
use crate::serve_args::ServeArgs;

/// What applying upstream's settings leaves for the caller: the log settings (logging starts
/// after this) and the lines to log once it has.
#[derive(Debug, Default)]
pub struct Applied {
    /// A log filter from `LOG_LEVEL`, when `TOLLGATE_LOG` does not give one.
    pub log_filter: Option<String>,
    /// `json` from `LOG_FORMAT`, when `--log-format` is not given.
    pub log_format: Option<String>,
    /// What the settings did beyond the obvious, one line each, for the log (INFO).
    pub notes: Vec<String>,
    /// Settings given that Tollgate does not need or use, and why, for the log (WARN).
    pub unused: Vec<String>,
}

/// Whether a Tollgate flag (by its argument id) was given on the command line or by its own
/// variable.
pub type Given<'a> = &'a dyn Fn(&str) -> bool;

/// Applies upstream's settings in `env` onto `args` where `given` says Tollgate's own are not
/// given. Every problem is returned at once.
pub(super) fn apply(
    args: &mut ServeArgs,
    given: Given<'_>,
    env: &mut Env<'_>,
) -> Result<Applied, Vec<String>> {
    let mut applied = Applied::default();
    listeners(args, given, env, &mut applied);
    grpc_tls(args, given, env, &mut applied);
    logging(env, &mut applied);
    configuration(args, given, env, &mut applied);
    backend(args, given, env, &mut applied);
    limiter(args, given, env, &mut applied);
    stats(args, given, env, &mut applied);
    tracing_settings(args, given, env, &mut applied);
    if env.errors.is_empty() {
        Ok(applied)
    } else {
        Err(std::mem::take(&mut env.errors))
    }
}

/// `host:port` as upstream binds it: an address (IPv6 without brackets, as `HOST=::`) or a
/// name, resolved now.
fn address(env: &mut Env<'_>, names: &str, host: &str, port: u16) -> SocketAddr {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return SocketAddr::new(ip, port);
    }
    match (host, port).to_socket_addrs().map(|mut found| found.next()) {
        Ok(Some(address)) => address,
        _ => {
            env.errors.push(format!(
                "{names}: {host:?} is neither an address nor a name that resolves"
            ));
            SocketAddr::from(([0, 0, 0, 0], port))
        }
    }
}

/// `HOST`/`PORT`, `GRPC_HOST`/`GRPC_PORT`, `DEBUG_HOST`/`DEBUG_PORT`, the connection age; on all
/// interfaces by default, as upstream's container listens.
fn listeners(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let (host, port) = (env.text("HOST", "0.0.0.0"), env.port("PORT", 8080));
    let http = address(env, "HOST/PORT", &host, port);
    if !given("http") {
        args.http = http;
    }
    let (host, port) = (
        env.text("GRPC_HOST", "0.0.0.0"),
        env.port("GRPC_PORT", 8081),
    );
    let grpc = address(env, "GRPC_HOST/GRPC_PORT", &host, port);
    if !given("grpc") {
        args.grpc = grpc;
    }
    if env.raw("GRPC_UDS").is_some_and(|path| !path.is_empty()) {
        env.refuse(
            "GRPC_UDS",
            "Tollgate's gRPC service listens on TCP: unset it and give GRPC_HOST and GRPC_PORT",
        );
    }
    let (host, port) = (
        env.text("DEBUG_HOST", "0.0.0.0"),
        env.port("DEBUG_PORT", 6070),
    );
    let debug = address(env, "DEBUG_HOST/DEBUG_PORT", &host, port);
    if !given("debug_listen") {
        args.side.debug_listen = Some(debug);
    }
    // Upstream has no admin API: its deployments expect nothing on Tollgate's admin port, and
    // may use it (PROMETHEUS_ADDR is :9090 by default).
    if !given("admin") {
        args.side.no_admin = true;
        applied
            .notes
            .push("the admin API is off (give --admin or TOLLGATE_ADMIN to serve it)".to_owned());
    }
    let age = env.duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600));
    if !given("max_connection_age") {
        args.connections.max_connection_age = age;
    }
    let grace = env.duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600));
    if !given("max_connection_age_grace") {
        args.connections.max_connection_age_grace = grace;
    }
}

/// `GRPC_SERVER_USE_TLS` and its files: TLS on the gRPC listener alone, as upstream serves it.
fn grpc_tls(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let on = env.boolean("GRPC_SERVER_USE_TLS", false);
    let cert = env.text("GRPC_SERVER_TLS_CERT", "");
    let key = env.text("GRPC_SERVER_TLS_KEY", "");
    let client_ca = env.text("GRPC_CLIENT_TLS_CACERT", "");
    let client_san = env.text("GRPC_CLIENT_TLS_SAN", "");
    if !on {
        if !cert.is_empty() || !client_ca.is_empty() {
            applied.unused.push(
                "GRPC_SERVER_TLS_CERT and GRPC_CLIENT_TLS_CACERT are not used: GRPC_SERVER_USE_TLS is off"
                    .to_owned(),
            );
        }
        return;
    }
    if given("tls_cert") {
        return;
    }
    if cert.is_empty() || key.is_empty() {
        env.errors.push(
            "GRPC_SERVER_USE_TLS: give the certificate and key in GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
                .to_owned(),
        );
        return;
    }
    args.tls.tls_cert = Some(PathBuf::from(cert));
    args.tls.tls_key = Some(PathBuf::from(key));
    args.tls.tls_listeners = vec![crate::tls_flags::Listener::Grpc];
    if !client_ca.is_empty() {
        args.tls.tls_client_ca = Some(PathBuf::from(client_ca));
    }
    if !client_san.is_empty() {
        if args.tls.tls_client_ca.is_none() {
            env.errors.push(
                "GRPC_CLIENT_TLS_SAN: client certificates are asked for only with GRPC_CLIENT_TLS_CACERT"
                    .to_owned(),
            );
        }
        args.tls.tls_client_san = Some(client_san);
    }
}

/// `LOG_LEVEL` (`WARN` by default) and `LOG_FORMAT`.
fn logging(env: &mut Env<'_>, applied: &mut Applied) {
    let level = env.text("LOG_LEVEL", "WARN");
    let filter = match level.to_ascii_lowercase().as_str() {
        "panic" | "fatal" | "error" => "error",
        "warn" | "warning" => "warn",
        "info" => "info",
        "debug" => "debug",
        "trace" => "trace",
        _ => {
            env.errors.push(format!(
                "LOG_LEVEL: {level:?} is not a level (panic, fatal, error, warn, info, debug, trace)"
            ));
            "warn"
        }
    };
    applied.log_filter = Some(filter.to_owned());
    if env.text("LOG_FORMAT", "text").eq_ignore_ascii_case("json") {
        applied.log_format = Some("json".to_owned());
    }
}

/// `CONFIG_TYPE` and the runtime directory: `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
fn configuration(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let merge = env.boolean("MERGE_DOMAIN_CONFIG", false);
    if !given("merge_domains") {
        args.rls_modes.merge_domains = merge;
    }
    let healthy_with_config = env.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false);
    if !given("ready_with_rls_domains") {
        args.health.ready_with_rls_domains = healthy_with_config;
    }
    let kind = env.text("CONFIG_TYPE", "FILE");
    match kind.as_str() {
        "FILE" => super::xds::unused(env, applied),
        "GRPC_XDS_SOTW" => {
            super::xds::apply(args, given, env, applied);
            return;
        }
        _ => {
            env.errors.push(format!(
                "CONFIG_TYPE: {kind:?} is neither FILE nor GRPC_XDS_SOTW"
            ));
            return;
        }
    }
    let root = env.text("RUNTIME_ROOT", "/srv/runtime_data/current");
    let subdirectory = env.text("RUNTIME_SUBDIRECTORY", "");
    let app = env.text("RUNTIME_APPDIRECTORY", "config");
    let watch_root = env.boolean("RUNTIME_WATCH_ROOT", true);
    let ignore_dot_files = env.boolean("RUNTIME_IGNOREDOTFILES", false);
    if env.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false) {
        applied.unused.push(
            "FORCE_START_WITHOUT_INITIAL_CONFIG: files are read before the listeners open"
                .to_owned(),
        );
    }
    if given("rls_config") {
        return;
    }
    // Upstream loads nothing at all (and answers OK to everything) in these cases.
    if watch_root && subdirectory.is_empty() {
        env.errors.push(
            "RUNTIME_SUBDIRECTORY is empty: envoyproxy/ratelimit would load no configuration and \
             answer OK to every request; set it to the directory under RUNTIME_ROOT that holds \
             RUNTIME_APPDIRECTORY (e.g. ratelimit)"
                .to_owned(),
        );
        return;
    }
    if app.is_empty() {
        env.errors.push(
            "RUNTIME_APPDIRECTORY is empty: envoyproxy/ratelimit would load no configuration; \
             set it to the directory that holds the files (config by default)"
                .to_owned(),
        );
        return;
    }
    let directory = PathBuf::from(&root).join(&subdirectory).join(&app);
    if !directory.is_dir() {
        env.errors.push(format!(
            "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY: {} is not a directory",
            directory.display()
        ));
        return;
    }
    if !ignore_dot_files {
        applied.unused.push(
            "RUNTIME_IGNOREDOTFILES is off, yet dot files and directories are skipped all the same \
             (a mounted ConfigMap's ..data would otherwise load every domain twice)"
                .to_owned(),
        );
    }
    if watch_root {
        args.rls_watch_root = Some(PathBuf::from(&root));
    }
    applied.notes.push(format!(
        "the rate limit configuration is read from {}",
        directory.display()
    ));
    args.rls_config = Some(directory);
}

/// `BACKEND_TYPE`, and with Redis its `REDIS_*` settings.
fn backend(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let backend = env.text("BACKEND_TYPE", "redis");
    let memcache_set: Vec<&str> = super::env::KNOWN
        .iter()
        .copied()
        .filter(|name| name.starts_with("MEMCACHE_"))
        .filter(|name| env.is_set(name))
        .collect();
    match backend.to_ascii_lowercase().as_str() {
        "redis" | "" => {
            if !memcache_set.is_empty() {
                applied.unused.push(format!(
                    "{} not used: BACKEND_TYPE is redis",
                    memcache_set.join(", ")
                ));
            }
        }
        // Refused, and the Redis settings still looked at, so that one start lists it all.
        "memcache" => {
            env.refuse(
                "BACKEND_TYPE=memcache",
                "use Redis (BACKEND_TYPE=redis and REDIS_URL)",
            );
        }
        _ => {
            env.errors.push(format!(
                "BACKEND_TYPE: {backend:?} is neither redis nor memcache"
            ));
        }
    }
    super::redis::apply(args, given, env, applied);
}

/// The limiter's settings beside the store.
fn limiter(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let ratio = env.float("NEAR_LIMIT_RATIO", 0.8);
    if !(0.0..=1.0).contains(&ratio) {
        env.errors
            .push(format!("NEAR_LIMIT_RATIO: {ratio} is not from 0 to 1"));
    } else if !given("near_limit_ratio") {
        args.rls_stats.near_limit_ratio = ratio as f32;
    }
    let flags = [
        ("SHADOW_MODE", "shadow"),
        ("QUOTA_MODE", "quota"),
        ("RESPONSE_DYNAMIC_METADATA", "dynamic_metadata"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "rls_response_headers"),
    ];
    for (name, id) in flags {
        let value = env.boolean(name, false);
        if given(id) {
            continue;
        }
        match id {
            "shadow" => args.rls_modes.shadow = value,
            "quota" => args.rls_modes.quota = value,
            "dynamic_metadata" => args.rls_modes.dynamic_metadata = value,
            _ => args.rls_response_headers = value,
        }
    }
    let headers = [
        ("LIMIT_LIMIT_HEADER", "limit", "RateLimit-Limit"),
        ("LIMIT_REMAINING_HEADER", "remaining", "RateLimit-Remaining"),
        ("LIMIT_RESET_HEADER", "reset", "RateLimit-Reset"),
    ];
    for (name, id, default) in headers {
        let value = env.text(name, default);
        if http::HeaderName::from_bytes(value.as_bytes()).is_err() {
            env.errors
                .push(format!("{name}: {value:?} is not a header field name"));
            continue;
        }
        if given(id) {
            continue;
        }
        match id {
            "limit" => args.rls_header_names.limit = value,
            "remaining" => args.rls_header_names.remaining = value,
            _ => args.rls_header_names.reset = value,
        }
    }
    super::counters::apply(args, given, env, applied);
}

/// The statistics sinks: Prometheus is served, statsd and dogstatsd are refused.
fn stats(args: &mut ServeArgs, given: Given<'_>, env: &mut Env<'_>, applied: &mut Applied) {
    let disabled = env.boolean("DISABLE_STATS", false);
    let dog = env.boolean("USE_DOG_STATSD", false);
    let statsd_set = env.is_set("USE_STATSD");
    let statsd = env.boolean("USE_STATSD", true);
    let prometheus = env.boolean("USE_PROMETHEUS", false);
    let address = env.text("PROMETHEUS_ADDR", ":9090");
    let path = env.text("PROMETHEUS_PATH", "/metrics");
    let instead = "scrape Prometheus metrics instead: USE_PROMETHEUS=true (PROMETHEUS_ADDR, \
                   PROMETHEUS_PATH) or /metrics on the HTTP port";
    if disabled {
        applied
            .unused
            .push("DISABLE_STATS: metrics are still kept and served on /metrics".to_owned());
    } else if dog {
        env.refuse("USE_DOG_STATSD", instead);
    } else if statsd && statsd_set {
        env.refuse("USE_STATSD", instead);
    } else if statsd {
        applied.unused.push(
            "statsd (upstream's default sink) is not spoken: metrics are served on /metrics"
                .to_owned(),
        );
    }
    if !env.map("EXTRA_TAGS").is_empty() {
        env.refuse(
            "EXTRA_TAGS",
            "add labels to the series in Prometheus' scrape configuration (or the ServiceMonitor)",
        );
    }
    for name in [
        "STATSD_HOST",
        "STATSD_PORT",
        "STATS_FLUSH_INTERVAL",
        "USE_DOG_STATSD_MOGRIFIERS",
        "PROMETHEUS_MAPPER_YAML",
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    ] {
        if env.is_set(name) {
            applied.unused.push(format!(
                "{name} is not needed: the metrics are Tollgate's own, served as Prometheus text"
            ));
        }
    }
    if prometheus && !given("metrics_listen") {
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.to_owned()),
            None => (String::new(), address.clone()),
        };
        match super::values::integer(&port)
            .ok()
            .and_then(|p| u16::try_from(p).ok())
        {
            Some(port) => {
                let listen = self::address(env, "PROMETHEUS_ADDR", &host, port);
                args.side.metrics_listen = Some(listen);
            }
            None => env.errors.push(format!(
                "PROMETHEUS_ADDR: {address:?} is not HOST:PORT or :PORT"
            )),
        }
        if !path.starts_with('/') {
            env.errors
                .push(format!("PROMETHEUS_PATH: {path:?} does not start with /"));
        } else if !given("metrics_path") {
            args.side.metrics_path = path;
        }
    }
}

/// `TRACING_*`: spans over OTLP, to the collector the standard `OTEL_EXPORTER_OTLP_*` name.
#[cfg(feature = "otel")]
fn tracing_settings(
    args: &mut ServeArgs,
    given: Given<'_>,
    env: &mut Env<'_>,
    applied: &mut Applied,
) {
    use crate::otel::OtlpProtocol;

    let enabled = env.boolean("TRACING_ENABLED", false);
    let protocol_name = env.text("TRACING_EXPORTER_PROTOCOL", "http");
    let protocol = match protocol_name.as_str() {
        "http" | "" => OtlpProtocol::HttpProtobuf,
        "grpc" => OtlpProtocol::Grpc,
        _ => {
            env.errors.push(format!(
                "TRACING_EXPORTER_PROTOCOL: {protocol_name:?} is neither http nor grpc"
            ));
            OtlpProtocol::HttpProtobuf
        }
    };
    let service = env.text("TRACING_SERVICE_NAME", "RateLimit");
    let namespace = env.text("TRACING_SERVICE_NAMESPACE", "");
    let instance = env.text("TRACING_SERVICE_INSTANCE_ID", "");
    let rate = env.float("TRACING_SAMPLING_RATE", 1.0);
    if !(0.0..=1.0).contains(&rate) {
        env.errors
            .push(format!("TRACING_SAMPLING_RATE: {rate} is not from 0 to 1"));
    }
    if !enabled {
        if args.otel.otlp_endpoint.is_some() && !given("otlp_endpoint") {
            applied.unused.push(
                "OTEL_EXPORTER_OTLP_ENDPOINT is set but TRACING_ENABLED is not: no spans are exported, as upstream exports none"
                    .to_owned(),
            );
            args.otel.otlp_endpoint = None;
        }
        return;
    }
    if args.otel.otlp_endpoint.is_none() {
        // The OpenTelemetry SDK's default collector, as upstream's exporter falls back to.
        args.otel.otlp_endpoint = Some(match protocol {
            OtlpProtocol::HttpProtobuf => "http://localhost:4318".to_owned(),
            OtlpProtocol::Grpc => "http://localhost:4317".to_owned(),
        });
    }
    if !given("otlp_protocol") {
        args.otel.otlp_protocol = protocol;
    }
    if !given("otel_service_name") {
        args.otel.otel_service_name = service;
    }
    if !namespace.is_empty() && !given("otel_service_namespace") {
        args.otel.otel_service_namespace = Some(namespace);
    }
    if !instance.is_empty() && !given("otel_service_instance_id") {
        args.otel.otel_service_instance_id = Some(instance);
    }
    if !given("otel_sampling_ratio") {
        args.otel.otel_sampling_ratio = rate;
    }
}

/// Without the `otel` feature, tracing asked for cannot be given.
#[cfg(not(feature = "otel"))]
fn tracing_settings(
    _args: &mut ServeArgs,
    _given: Given<'_>,
    env: &mut Env<'_>,
    _applied: &mut Applied,
) {
    if env.boolean("TRACING_ENABLED", false) {
        env.refuse(
            "TRACING_ENABLED",
            "this build has no OpenTelemetry: use a build with the default features",
        );
    }
    for name in [
        "TRACING_SERVICE_NAME",
        "TRACING_SERVICE_NAMESPACE",
        "TRACING_SERVICE_INSTANCE_ID",
        "TRACING_EXPORTER_PROTOCOL",
        "TRACING_SAMPLING_RATE",
    ] {
        let _ = env.raw(name);
    }
}
