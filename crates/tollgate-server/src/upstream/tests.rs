//! envoyproxy/ratelimit's environments as its users' manifests set them, applied onto
//! `tollgate serve`'s defaults.

use std::collections::HashMap;
use std::net::SocketAddr;

use clap::{Args, FromArgMatches};

use super::apply::{Applied, apply};
use super::env::{Env, KNOWN};
use crate::serve::ServeArgs;

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
    assert_eq!(args.tls.tls_listeners, [crate::tls::Listener::Grpc]);
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
