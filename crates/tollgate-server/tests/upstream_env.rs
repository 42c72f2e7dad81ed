//! `tollgate serve` started as a Deployment written for envoyproxy/ratelimit's image starts
//! it: nothing but upstream's environment and its runtime directory (a mounted ConfigMap's
//! layout, `..data` link and all), or the binary run as `ratelimit`.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::{Tollgate, eventually};
use tollgate_testkit::RedisServer;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const EDGE: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";

/// `root/ratelimit/config` holding `files` as the kubelet projects a ConfigMap.
fn configmap(root: &Path, generation: u32, files: &[(&str, &str)]) -> PathBuf {
    let config = root.join("ratelimit/config");
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
        .collect();
    support::project_configmap(&config, &files, generation);
    config
}

/// Istio's sample Deployment's environment, on `redis`, with `root` as its runtime root.
fn istio_env(root: &Path, redis: &RedisServer) -> Vec<(String, String)> {
    [
        ("LOG_LEVEL", "info".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("USE_STATSD", "false".to_owned()),
        ("RUNTIME_ROOT", root.to_string_lossy().into_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
        ("HOST", "127.0.0.1".to_owned()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("PORT", tollgate_testkit::free_port().to_string()),
        ("GRPC_PORT", tollgate_testkit::free_port().to_string()),
        ("DEBUG_PORT", tollgate_testkit::free_port().to_string()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

fn start(args: &[&str], env: &[(String, String)]) -> Tollgate {
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    Tollgate::start_with_env(args, &env)
}

async fn hit(base: &str, domain: &str, address: &str) -> Value {
    reqwest::Client::new()
        .post(format!("{base}/json"))
        .json(&json!({"domain": domain, "descriptors": [{"entries": [{"key": "remote_address", "value": address}]}]}))
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_sample_deployment_runs_unchanged() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("a directory");
    configmap(root.path(), 1, &[("config.yaml", EDGE)]);
    let env = istio_env(root.path(), &redis);
    let server = start(&["serve"], &env);
    // Upstream's ports, as its environment gives them; no admin API, which upstream has not.
    let port = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .expect("set")
    };
    assert_eq!(server.address("http").port().to_string(), port("PORT"));
    assert_eq!(server.address("grpc").port().to_string(), port("GRPC_PORT"));
    assert_eq!(server.printed["admin"], "off");
    assert!(
        server.printed["store"].contains(&format!("redis at redis://127.0.0.1:{}", redis.port()))
    );
    server.wait_for_log("reading envoyproxy/ratelimit's environment");

    let base = server.http_url();
    let answers: Vec<Value> = [
        hit(&base, "edge", "10.0.0.1").await,
        hit(&base, "edge", "10.0.0.1").await,
        hit(&base, "edge", "10.0.0.1").await,
    ]
    .to_vec();
    let codes: Vec<&str> = answers
        .iter()
        .map(|answer| answer["overallCode"].as_str().expect("a code"))
        .collect();
    assert_eq!(codes, ["OK", "OK", "OVER_LIMIT"]);
    // Counted in Redis under upstream's own key (domain, entries, window start), so that
    // upstream's pods on this Redis count in the same counter.
    let keys: Vec<String> = redis
        .query(redis::cmd("KEYS").arg("edge_remote_address_10.0.0.1_*"))
        .expect("keys");
    let counted: u64 = keys
        .iter()
        .map(|key| {
            redis
                .query::<u64>(redis::cmd("GET").arg(key))
                .expect("a count")
        })
        .sum();
    assert_eq!(counted, 3, "upstream's keys hold every hit: {keys:?}");

    // Upstream's debug port lists the limits in force.
    let debug = format!("http://127.0.0.1:{}", port("DEBUG_PORT"));
    let limits = reqwest::get(format!("{debug}/rlconfig"))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    assert_eq!(
        limits,
        "edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );

    // The kubelet swaps the ConfigMap: reloaded, as upstream reloads it with these settings.
    configmap(
        root.path(),
        2,
        &[(
            "config.yaml",
            &EDGE.replace("requests_per_unit: 2", "requests_per_unit: 5"),
        )],
    );
    eventually("the swapped ConfigMap is in force", || async {
        reqwest::get(format!("{debug}/rlconfig"))
            .await
            .expect("an answer")
            .text()
            .await
            .expect("text")
            .contains("requests_per_unit=5")
    })
    .await;
    assert_eq!(
        reqwest::get(format!("{base}/healthcheck"))
            .await
            .expect("an answer")
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_run_as_ratelimit_serves_upstreams_environment() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("a directory");
    configmap(root.path(), 1, &[("config.yaml", EDGE)]);
    let bin = tempfile::tempdir().expect("a directory");
    let ratelimit = bin.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &ratelimit).expect("linked");
    let mut env = istio_env(root.path(), &redis);
    env.push(("PATH".to_owned(), bin.path().to_string_lossy().into_owned()));
    let output = std::process::Command::new(&ratelimit)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("--upstream-env"),
        "run as ratelimit, the binary is `tollgate serve`"
    );
    let mut child = std::process::Command::new(&ratelimit)
        .envs(env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .env("TOLLGATE_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let port = env
        .iter()
        .find(|(n, _)| n == "PORT")
        .map(|(_, v)| v.clone())
        .expect("set");
    let base = format!("http://127.0.0.1:{port}");
    eventually("the server answers upstream's health check", || async {
        reqwest::get(format!("{base}/healthcheck"))
            .await
            .is_ok_and(|answer| answer.status() == 200)
    })
    .await;
    assert_eq!(hit(&base, "edge", "10.0.0.9").await["overallCode"], "OK");
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_with_at_least_one_config_loaded_holds_health_until_a_domain_is() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("a directory");
    let config = configmap(root.path(), 1, &[]);
    let mut env = istio_env(root.path(), &redis);
    env.push((
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED".to_owned(),
        "true".to_owned(),
    ));
    let server = start(&["serve"], &env);
    let base = server.http_url();
    server.wait_for_log("holds no domain");
    let status = |path: &'static str| {
        let base = base.clone();
        async move {
            reqwest::get(format!("{base}{path}"))
                .await
                .expect("an answer")
                .status()
        }
    };
    assert_eq!(status("/healthcheck").await, 500);
    assert_eq!(status("/readyz").await, 503);
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.address("grpc")))
            .expect("a URL")
            .connect()
            .await
            .expect("connects");
    let health = HealthClient::new(channel);
    let probe = |mut health: HealthClient<tonic::transport::Channel>| async move {
        health
            .check(HealthCheckRequest {
                service: "ratelimit".to_owned(),
            })
            .await
            .expect("an answer")
            .into_inner()
            .status
    };
    eventually("the gRPC health service says not serving", || {
        let health = health.clone();
        async move { probe(health).await == 2 }
    })
    .await;

    std::fs::write(config.join("edge.yaml"), EDGE).expect("written");
    eventually("a domain loaded makes the server healthy", || async {
        status("/healthcheck").await == 200
    })
    .await;
    eventually("the gRPC health service follows", || {
        let health = health.clone();
        async move { probe(health).await == 1 }
    })
    .await;
}

#[test]
fn what_tollgate_does_not_do_stops_it_at_start_naming_each_setting() {
    let root = tempfile::tempdir().expect("a directory");
    configmap(root.path(), 1, &[("config.yaml", EDGE)]);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .env("RUNTIME_ROOT", root.path())
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("BACKEND_TYPE", "memcache")
        .env("MEMCACHE_HOST_PORT", "memcached:11211")
        .env("USE_STATSD", "true")
        .env("USE_DOG_STATSD", "false")
        .env("SHADOW_MODE", "on")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "envoyproxy/ratelimit's environment cannot be served as it is",
        "BACKEND_TYPE=memcache: not supported by Tollgate; use Redis",
        "USE_STATSD: not supported by Tollgate; scrape Prometheus metrics instead",
        "SHADOW_MODE: \"on\" is not a boolean",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in:\n{stderr}");
    }
    // With no runtime directory at all, upstream would serve nothing: Tollgate refuses.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .env("REDIS_URL", "127.0.0.1:6379")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("RUNTIME_SUBDIRECTORY is empty"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Told not to, `tollgate serve` reads none of it.
    let server = Tollgate::start_with_env(
        &support::serve_args(&["--upstream-env", "off"]),
        &[
            ("BACKEND_TYPE", "memcache"),
            ("RUNTIME_SUBDIRECTORY", "nowhere"),
        ],
    );
    assert_eq!(server.printed["store"], "memory (in process)");
    assert!(
        !server.stderr().contains("envoyproxy/ratelimit"),
        "{}",
        server.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_of_the_runtime_root_reloads_when_the_root_is_watched() {
    let redis = RedisServer::start();
    let top = tempfile::tempdir().expect("a directory");
    let first = top.path().join("v1");
    let second = top.path().join("v2");
    for (version, limit) in [(&first, 2), (&second, 7)] {
        let config = version.join("ratelimit/config");
        std::fs::create_dir_all(&config).expect("made");
        std::fs::write(
            config.join("config.yaml"),
            EDGE.replace(
                "requests_per_unit: 2",
                &format!("requests_per_unit: {limit}"),
            ),
        )
        .expect("written");
    }
    let current = top.path().join("current");
    std::os::unix::fs::symlink(&first, &current).expect("linked");
    let mut env = istio_env(&current, &redis);
    env.retain(|(name, _)| name != "RUNTIME_WATCH_ROOT");
    let server = start(&["serve"], &env);
    let debug = format!(
        "http://127.0.0.1:{}",
        env.iter()
            .find(|(n, _)| n == "DEBUG_PORT")
            .map(|(_, v)| v.clone())
            .expect("set")
    );
    let limits = || async {
        reqwest::get(format!("{debug}/rlconfig"))
            .await
            .expect("an answer")
            .text()
            .await
            .expect("text")
    };
    assert!(limits().await.contains("requests_per_unit=2"));
    // `ln -sfn`'s atomic form: a new link renamed over the root.
    let staged = top.path().join("current.new");
    std::os::unix::fs::symlink(&second, &staged).expect("linked");
    std::fs::rename(&staged, &current).expect("swapped");
    eventually("the new root is read", || async {
        limits().await.contains("requests_per_unit=7")
    })
    .await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_are_served_where_upstream_serves_them() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().expect("a directory");
    configmap(root.path(), 1, &[("config.yaml", EDGE)]);
    let mut env = istio_env(root.path(), &redis);
    let metrics_port = tollgate_testkit::free_port();
    env.extend([
        ("USE_PROMETHEUS".to_owned(), "true".to_owned()),
        (
            "PROMETHEUS_ADDR".to_owned(),
            format!("127.0.0.1:{metrics_port}"),
        ),
        ("PROMETHEUS_PATH".to_owned(), "/stats/prometheus".to_owned()),
    ]);
    let server = start(&["serve"], &env);
    hit(&server.http_url(), "edge", "10.0.0.3").await;
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/stats/prometheus"))
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    assert!(
        text.contains("tollgate_ratelimit_service_rate_limit_total_hits"),
        "{text}"
    );
}
