//! envoyproxy/ratelimit's environments as its users' manifests set them, applied onto
//! `tollgate serve`'s defaults.

use std::collections::HashMap;
use std::net::SocketAddr;

use clap::{Args, FromArgMatches};

use super::apply::{Applied, apply};
use super::env::{Env, KNOWN};
use crate::serve_args::ServeArgs;

/// `tollgate serve`'s flags with nothing given.
fn defaults() -> ServeArgs {
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    let matches = command
        .try_get_matches_from(["serve"])
        .expect("the defaults parse");
    ServeArgs::from_arg_matches(&matches).expect("the defaults")
}

/// `vars` applied onto the defaults, nothing given on Tollgate's side.
fn applied(vars: &[(&str, &str)]) -> Result<(ServeArgs, Applied), Vec<String>> {
    applied_given(vars, &|_| false)
}

fn applied_given(
    vars: &[(&str, &str)],
    given: &dyn Fn(&str) -> bool,
) -> Result<(ServeArgs, Applied), Vec<String>> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let lookup = move |name: &str| map.get(name).cloned();
    let mut env = Env::new(&lookup);
    let mut args = defaults();
    apply(&mut args, given, &mut env).map(|applied| (args, applied))
}

/// A runtime directory laid out as upstream's examples lay it out: `root/ratelimit/config`.
fn runtime() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("a directory");
    std::fs::create_dir_all(root.path().join("ratelimit/config")).expect("made");
    root
}

fn address(text: &str) -> SocketAddr {
    text.parse().expect("an address")
}

#[test]
fn every_variable_upstream_reads_is_read() {
    let root = runtime();
    let lookup = |name: &str| match name {
        "RUNTIME_ROOT" => Some(root.path().to_string_lossy().into_owned()),
        "RUNTIME_SUBDIRECTORY" => Some("ratelimit".to_owned()),
        _ => None,
    };
    let mut env = Env::new(&lookup);
    let mut args = defaults();
    apply(&mut args, &|_| false, &mut env).expect("the defaults apply");
    let unread: Vec<&&str> = KNOWN
        .iter()
        .filter(|name| !env.read.contains(*name))
        .collect();
    assert!(unread.is_empty(), "never read: {unread:?}");
}

/// Istio's `samples/ratelimit/rate-limit-service.yaml`, the manifest most users start from.
#[test]
fn istios_sample_deployment_serves_on_upstreams_ports_from_its_runtime_directory() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let (args, applied) = applied(&[
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("USE_STATSD", "false"),
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("HOST", "::"),
        ("GRPC_HOST", "::"),
    ])
    .expect("the sample applies");
    assert_eq!(args.http, address("[::]:8080"));
    assert_eq!(args.grpc, address("[::]:8081"));
    assert_eq!(args.side.debug_listen, Some(address("0.0.0.0:6070")));
    assert!(args.side.no_admin);
    assert_eq!(
        args.store.redis.as_ref().map(tollgate::RedisUrl::expose),
        Some("redis://redis:6379")
    );
    assert_eq!(
        args.rls_config,
        Some(root.path().join("ratelimit").join("config"))
    );
    assert_eq!(args.rls_watch_root, None);
    assert_eq!(applied.log_filter.as_deref(), Some("debug"));
    assert_eq!(
        args.connections.max_connection_age,
        std::time::Duration::from_secs(24 * 3600)
    );
    assert!(applied.unused.is_empty(), "{:?}", applied.unused);
}

#[test]
fn the_defaults_are_upstreams() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let (args, applied) = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ])
    .expect("applies");
    assert_eq!(args.http, address("0.0.0.0:8080"));
    assert_eq!(args.grpc, address("0.0.0.0:8081"));
    // Upstream's default Redis: twemproxy's socket.
    assert_eq!(
        args.store.redis.as_ref().map(tollgate::RedisUrl::expose),
        Some("redis+unix:///var/run/nutcracker/ratelimit.sock")
    );
    // Watching the root by default: a swap of the root reloads.
    assert_eq!(args.rls_watch_root, Some(root.path().to_path_buf()));
    assert_eq!(applied.log_filter.as_deref(), Some("warn"));
    assert!(!args.rls_modes.shadow && !args.rls_modes.quota);
    assert!(
        applied.unused.iter().any(|line| line.contains("statsd")),
        "{:?}",
        applied.unused
    );
}

#[test]
fn tollgates_own_flags_win() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let (args, _) = applied_given(
        &[
            ("RUNTIME_ROOT", &root_text),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("PORT", "9999"),
            ("REDIS_URL", "10.0.0.1:6379"),
            ("SHADOW_MODE", "true"),
        ],
        &|id| matches!(id, "http" | "redis" | "shadow"),
    )
    .expect("applies");
    assert_eq!(args.http, address("127.0.0.1:8080"));
    assert_eq!(args.store.redis, None);
    assert!(!args.rls_modes.shadow);
}

#[test]
fn redis_in_each_of_upstreams_forms() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let base = [
        ("RUNTIME_ROOT", root_text.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut vars = base.to_vec();
        vars.extend_from_slice(extra);
        applied(&vars).expect("applies").0
    };
    let args = with(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.internal:6380"),
        ("REDIS_AUTH", "limiter:s3cret"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", "/certs/ca.pem"),
    ]);
    assert_eq!(
        args.store.redis.as_ref().map(tollgate::RedisUrl::expose),
        Some("rediss://redis.internal:6380")
    );
    assert_eq!(args.store.redis_username.as_deref(), Some("limiter"));
    assert_eq!(args.store.redis_password.as_deref(), Some("s3cret"));
    assert_eq!(args.store.redis_ca, Some("/certs/ca.pem".into()));
    let args = with(&[
        ("REDIS_AUTH", "only-a-password"),
        ("REDIS_URL", "redis://r:6379/2"),
    ]);
    assert_eq!(
        args.store.redis.as_ref().map(tollgate::RedisUrl::expose),
        Some("redis://r:6379/2")
    );
    assert_eq!(args.store.redis_username, None);
    assert_eq!(
        args.store.redis_password.as_deref(),
        Some("only-a-password")
    );
    let args = with(&[
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
        ("REDIS_SENTINEL_AUTH", "sentinel-pass"),
    ]);
    assert_eq!(
        args.store.redis_sentinel_master.as_deref(),
        Some("mymaster")
    );
    let sentinels: Vec<&str> = args
        .store
        .redis_sentinel
        .iter()
        .map(tollgate::RedisUrl::expose)
        .collect();
    assert_eq!(
        sentinels,
        [
            "redis://:sentinel-pass@s1:26379",
            "redis://:sentinel-pass@s2:26379"
        ]
    );
    let args = with(&[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "n1:7000,n2:7001")]);
    let nodes: Vec<&str> = args
        .store
        .redis_cluster
        .iter()
        .map(tollgate::RedisUrl::expose)
        .collect();
    assert_eq!(nodes, ["redis://n1:7000", "redis://n2:7001"]);
}

#[test]
fn grpc_tls_is_on_the_grpc_listener_alone() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let (args, _) = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.example"),
    ])
    .expect("applies");
    assert_eq!(args.tls.tls_cert, Some("/certs/tls.crt".into()));
    assert_eq!(args.tls.tls_listeners, [crate::tls_flags::Listener::Grpc]);
    assert_eq!(args.tls.tls_client_ca, Some("/certs/ca.crt".into()));
    assert_eq!(args.tls.tls_client_san.as_deref(), Some("envoy.example"));
}

#[test]
fn what_tollgate_does_not_do_is_refused_all_at_once_with_what_to_do() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let errors = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("BACKEND_TYPE", "memcache"),
        ("USE_STATSD", "true"),
        ("EXTRA_TAGS", "team:edge"),
        ("GRPC_UDS", "/run/ratelimit.sock"),
        ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ("SHADOW_MODE", "yes"),
        ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
        ("PORT", "80800"),
    ])
    .expect_err("refused");
    let text = errors.join("\n");
    for expected in [
        "BACKEND_TYPE=memcache: not supported by Tollgate; use Redis",
        "USE_STATSD: not supported by Tollgate; scrape Prometheus metrics instead",
        "EXTRA_TAGS: not supported",
        "GRPC_UDS: not supported",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: not supported",
        "SHADOW_MODE: \"yes\" is not a boolean",
        "REDIS_POOL_ON_EMPTY_BEHAVIOR: CREATE is refused",
        "PORT: 80800 is not a port",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
}

#[test]
fn a_configuration_upstream_would_not_load_is_refused_rather_than_served_empty() {
    let missing = applied(&[
        ("RUNTIME_ROOT", "/nowhere"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ])
    .expect_err("refused");
    assert!(
        missing[0].contains("/nowhere/ratelimit/config is not a directory"),
        "{missing:?}"
    );
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let unset = applied(&[("RUNTIME_ROOT", &root_text)]).expect_err("refused");
    assert!(
        unset[0].contains("RUNTIME_SUBDIRECTORY is empty"),
        "{unset:?}"
    );
    // Without watching the root, upstream reads ROOT/APPDIRECTORY when the subdirectory is
    // empty: so does Tollgate.
    std::fs::create_dir_all(root.path().join("config")).expect("made");
    let (args, _) = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_WATCH_ROOT", "false"),
    ])
    .expect("applies");
    assert_eq!(args.rls_config, Some(root.path().join("config")));
    let bad = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("CONFIG_TYPE", "file"),
    ])
    .expect_err("refused");
    assert!(bad[0].contains("CONFIG_TYPE: \"file\""), "{bad:?}");
}

#[test]
fn prometheus_is_served_where_upstream_serves_it() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let (args, _) = applied(&[
        ("RUNTIME_ROOT", &root_text),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
        ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
    ])
    .expect("applies");
    assert_eq!(args.side.metrics_listen, Some(address("0.0.0.0:19001")));
    assert_eq!(args.side.metrics_path, "/stats/prometheus");
    assert!(args.health.ready_with_rls_domains);
}

/// Envoy Gateway's environment for its rate limit Deployment: the limits from its xDS server.
#[test]
fn envoy_gateways_environment_subscribes_to_its_xds_server() {
    let (args, applied) = applied(&[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=edge"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:acme"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
    ])
    .expect("applies");
    let xds = &args.rls_xds;
    assert_eq!(
        xds.rls_xds_server
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("envoy-gateway:18001")
    );
    assert_eq!(xds.rls_xds_node_id, "envoy-ratelimit");
    assert_eq!(
        xds.rls_xds_node_metadata,
        [
            ("zone".to_owned(), "a".to_owned()),
            ("team".to_owned(), "edge".to_owned())
        ]
    );
    assert_eq!(xds.rls_xds_header.len(), 1);
    assert!(xds.rls_xds_tls);
    assert_eq!(xds.rls_xds_client_cert, Some("/certs/tls.crt".into()));
    assert_eq!(xds.rls_xds_ca, Some("/certs/ca.crt".into()));
    assert!(xds.rls_xds_start_without_config);
    assert_eq!(
        xds.rls_xds_backoff_initial,
        std::time::Duration::from_secs(2)
    );
    // Nothing is read from the runtime directory, which Envoy Gateway does not mount.
    assert_eq!(args.rls_config, None);
    assert!(
        applied
            .unused
            .iter()
            .any(|line| line.contains("RUNTIME_ROOT") && line.contains("GRPC_XDS_SOTW")),
        "{:?}",
        applied.unused
    );
    let errors = super::tests::applied(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "ftp://x:1"),
    ])
    .expect_err("refused");
    let text = errors.join("\n");
    assert!(
        text.contains("CONFIG_GRPC_XDS_NODE_METADATA: \"zone\" is not KEY=VALUE"),
        "{text}"
    );
    assert!(text.contains("CONFIG_GRPC_XDS_SERVER_URL:"), "{text}");
}

#[test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
fn counters_are_kept_under_upstreams_keys_with_its_settings() {
    let root = runtime();
    let root_text = root.path().to_string_lossy().into_owned();
    let base = [
        ("RUNTIME_ROOT", root_text.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ];
    let (args, _) = applied(&base).expect("applies");
    let keys = &args.rls_upstream_keys;
    assert!(
        keys.enabled,
        "upstream's environment shares upstream's keys"
    );
    assert_eq!(
        keys.counting(),
        Some(tollgate_envoy::rls::UpstreamCounting::default()),
        "with upstream's defaults"
    );
    assert!(keys.per_second_redis.is_none());
    let mut vars = base.to_vec();
    vars.extend_from_slice(&[
        ("CACHE_KEY_PREFIX", "ratelimit:"),
        ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TYPE", "SENTINEL"),
        ("REDIS_PERSECOND_URL", "persecond,s1:26379,s2:26379"),
        ("REDIS_PERSECOND_AUTH", "fast:pw"),
    ]);
    let (args, _) = applied(&vars).expect("applies");
    let keys = &args.rls_upstream_keys;
    let counting = keys.counting().expect("on");
    assert_eq!(counting.prefix, "ratelimit:");
    assert_eq!(counting.expiration_jitter, std::time::Duration::ZERO);
    assert!(counting.stop_increment_over_limit);
    assert!(counting.local_cache);
    assert_eq!(
        keys.per_second_redis_sentinel_master.as_deref(),
        Some("persecond")
    );
    let sentinels: Vec<&str> = keys
        .per_second_redis_sentinel
        .iter()
        .map(tollgate::RedisUrl::expose)
        .collect();
    assert_eq!(sentinels, ["redis://s1:26379", "redis://s2:26379"]);
    assert_eq!(keys.per_second_redis_username.as_deref(), Some("fast"));
    assert_eq!(keys.per_second_redis_password.as_deref(), Some("pw"));

    let mut vars = base.to_vec();
    vars.extend_from_slice(&[
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "fast-redis:6379"),
    ]);
    let (args, _) = applied(&vars).expect("applies");
    assert_eq!(
        args.rls_upstream_keys
            .per_second_redis
            .as_ref()
            .map(tollgate::RedisUrl::expose),
        Some("redis://fast-redis:6379")
    );

    let mut vars = base.to_vec();
    vars.extend_from_slice(&[
        ("EXPIRATION_JITTER_MAX_SECONDS", "-1"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TYPE", "ring"),
    ]);
    let problems = applied(&vars).expect_err("refused").join("\n");
    assert!(
        problems.contains("EXPIRATION_JITTER_MAX_SECONDS: -1"),
        "{problems}"
    );
    assert!(
        problems.contains("REDIS_PERSECOND_TYPE: \"ring\""),
        "{problems}"
    );

    let given = |id: &str| id == "enabled";
    let (args, _) = applied_given(&base, &given).expect("applies");
    assert!(
        !args.rls_upstream_keys.enabled,
        "--rls-upstream-keys given (false by TOLLGATE_RLS_UPSTREAM_KEYS) wins"
    );
}
