//! The deployment guides' configurations (`docs/deploy/*.md`), each a file under `deploy/` that
//! its guide includes verbatim, run for real:
//!
//! - Envoy (`deploy/envoy/envoy.yaml`, `deploy/envoy/ratelimit/edge.yaml`): a real Envoy 1.40
//!   with that bootstrap, addresses moved to loopback, asks a real `tollgate serve` with that
//!   rate limit configuration, and refuses the sixth login of a minute with 429.
//! - Istio (`deploy/istio/envoyfilter.yaml`): both EnvoyFilters are checked against Istio's
//!   schema, and their patches are applied, as Istio applies them, to an Envoy bootstrap shaped
//!   as Istio generates one for an ingress gateway (a listener whose HTTP connection manager
//!   ends with the router, the route configuration's virtual host, and the outbound cluster
//!   Istio makes for the chart's Service, HTTP/2 for its grpc port); a real Envoy runs the
//!   result against a real Tollgate with the same outcome.
//! - The proxy (`deploy/proxy/policies.yaml`, `deploy/proxy/sidecar.yaml`): the sidecar's
//!   objects are validated against the Kubernetes schemas, and its container's command line
//!   runs `tollgate proxy` with its ConfigMap's policies in front of a real upstream.
//! - Kubernetes (`deploy/kubernetes/*.yaml`): the Secret is validated; the values are rendered
//!   and validated by tests/deploy_chart.rs.
//! - Envoy Gateway (`deploy/envoy-gateway/*.yaml`): the ConfigMap is validated; its
//!   EnvoyGateway document and the Helm values run the image the chart runs as the rate limit
//!   deployment, with a Redis; every flag the guide names is one `tollgate serve` takes.
//!   tests/rls_xds.rs runs the xDS subscription against a management server set up as Envoy
//!   Gateway's (mutual TLS 1.3, HTTP/2, its node id).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use support::Tollgate;
use support::envoy::Envoy;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// `text` with `from` replaced by `to`, which must occur exactly once.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "expected {from:?} once in the configuration"
    );
    text.replacen(from, to, 1)
}

/// The chart tools' Python (`scripts/test` installs it at target/chart-tools).
fn python() -> PathBuf {
    let path = workspace().join("target/chart-tools/bin/python");
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs the chart tools",
        path.display()
    );
    path
}

/// The documents of a YAML file, as JSON.
fn documents(path: &str) -> Vec<Value> {
    let output = Command::new(python())
        .args([
            "-c",
            "import json, sys, yaml; \
             print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
        ])
        .arg(workspace().join(path))
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// Validates `path` with the manifests' validator (Kubernetes schemas, Istio's, the operator's).
fn validate(path: &str) -> String {
    let output = Command::new(python())
        .arg(workspace().join("crates/tollgate-server/tests/deploy/validate_manifests.py"))
        .args(["--kube-version", "1.25.0", "--kube-version", "1.37.0"])
        .arg(workspace().join(path))
        .output()
        .expect("python runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{path}: {said}");
    said
}

/// An upstream answering `200 ok` to anything, counting what reaches it.
async fn upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    let app = axum::Router::new().fallback(move || {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, count)
}

/// Six logins from one client: five reach the upstream, the sixth is refused with 429 and the
/// rate limit headers; other paths still pass.
async fn six_logins(base: &str, upstream: &AtomicUsize) -> reqwest::Response {
    let client = reqwest::Client::new();
    let before = upstream.load(Ordering::SeqCst);
    for attempt in 1..=5 {
        let response = client
            .post(format!("{base}/login"))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200, "login {attempt}");
    }
    let refused = client
        .post(format!("{base}/login"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), 429, "the sixth login of the minute");
    assert_eq!(
        upstream.load(Ordering::SeqCst),
        before + 5,
        "a refused login reached the upstream"
    );
    let other = client
        .get(format!("{base}/api/items"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(other.status(), 200);
    refused
}

#[test]
fn every_guide_includes_its_configuration_files_verbatim() {
    let expected: [(&str, &[&str]); 6] = [
        (
            "docs/deploy/envoy-gateway.md",
            &[
                "deploy/envoy-gateway/values.yaml",
                "deploy/envoy-gateway/envoy-gateway-config.yaml",
            ],
        ),
        (
            "docs/deploy/from-envoy-ratelimit.md",
            &["deploy/from-envoy-ratelimit/ratelimit.yaml"],
        ),
        (
            "docs/deploy/envoy.md",
            &[
                "deploy/envoy/envoy.yaml",
                "deploy/envoy/ratelimit/edge.yaml",
            ],
        ),
        ("docs/deploy/istio.md", &["deploy/istio/envoyfilter.yaml"]),
        (
            "docs/deploy/proxy.md",
            &["deploy/proxy/policies.yaml", "deploy/proxy/sidecar.yaml"],
        ),
        (
            "docs/deploy/kubernetes.md",
            &[
                "deploy/kubernetes/redis-secret.yaml",
                "deploy/kubernetes/values-production.yaml",
            ],
        ),
    ];
    for (guide, files) in expected {
        let text = read(guide);
        let mut included = Vec::new();
        let mut lines = text.lines();
        // `<!-- include: PATH -->`, then a fenced block holding the file.
        while let Some(line) = lines.next() {
            let Some(path) = line
                .trim()
                .strip_prefix("<!-- include: ")
                .and_then(|rest| rest.strip_suffix(" -->"))
            else {
                continue;
            };
            let fence = lines.next().unwrap_or_default();
            assert!(
                fence.starts_with("```"),
                "{guide}: no code block after {line}"
            );
            let mut block = String::new();
            for line in lines.by_ref() {
                if line == "```" {
                    break;
                }
                block.push_str(line);
                block.push('\n');
            }
            assert_eq!(
                block,
                read(path),
                "{guide}'s copy of {path} differs from the file: copy the file into the guide"
            );
            included.push(path.to_owned());
        }
        for file in files {
            assert!(
                included.iter().any(|path| path == file),
                "{guide} does not include {file}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_with_the_guides_bootstrap_refuses_through_tollgate() {
    let rls = workspace().join("deploy/envoy/ratelimit");
    let server = Tollgate::serve(&["--rls-config", rls.to_str().expect("a UTF-8 path")]);
    let grpc = server.address("grpc");
    let (api, reached) = upstream().await;
    let bootstrap = read("deploy/envoy/envoy.yaml");
    let envoy = Envoy::start(|listen, admin| {
        let config = replace_once(
            &bootstrap,
            "port_value: 9901",
            &format!("port_value: {admin}"),
        );
        let config = replace_once(
            &config,
            "address: 0.0.0.0, port_value: 10000",
            &format!("address: 127.0.0.1, port_value: {listen}"),
        );
        let config = replace_once(
            &config,
            "address: api.example.svc.cluster.local, port_value: 8000",
            &format!("address: {}, port_value: {}", api.ip(), api.port()),
        );
        replace_once(
            &config,
            "address: tollgate-headless.ratelimit.svc.cluster.local, port_value: 8081",
            &format!("address: {}, port_value: {}", grpc.ip(), grpc.port()),
        )
    });
    envoy.ready().await;
    let refused = six_logins(&envoy.url(""), &reached).await;
    // enable_x_ratelimit_headers: Envoy's own fields from Tollgate's answer.
    let headers = refused.headers();
    assert_eq!(headers["x-envoy-ratelimited"], "true");
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    assert!(
        headers["x-ratelimit-limit"]
            .to_str()
            .expect("text")
            .starts_with('5'),
        "{headers:?}"
    );
}

/// An Envoy bootstrap shaped as Istio generates one for an ingress gateway: a listener whose
/// HTTP connection manager ends with the router, one virtual host routing to the API, and the
/// outbound cluster Istio makes for the chart's Service `tollgate.ratelimit` (HTTP/2, for the
/// port's appProtocol grpc).
fn istio_gateway(
    listen: u16,
    admin: u16,
    api: std::net::SocketAddr,
    grpc: std::net::SocketAddr,
) -> Value {
    let endpoint = |address: std::net::SocketAddr| {
        json!({"lb_endpoints": [{"endpoint": {"address": {"socket_address": {
            "address": address.ip().to_string(), "port_value": address.port()}}}}]})
    };
    json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [{
                "name": "0.0.0.0_8080",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": listen}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "outbound_0.0.0.0_8080",
                        "use_remote_address": true,
                        "route_config": {
                            "name": "http.8080",
                            "virtual_hosts": [{
                                "name": "api.example.com:80",
                                "domains": ["*"],
                                "routes": [{
                                    "match": {"prefix": "/"},
                                    "route": {"cluster": "outbound|80||api.example.svc.cluster.local"}
                                }]
                            }]
                        },
                        "http_filters": [{
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}
                        }]
                    }
                }]}]
            }],
            "clusters": [
                {
                    "name": "outbound|80||api.example.svc.cluster.local",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": "outbound|80||api.example.svc.cluster.local",
                        "endpoints": [endpoint(api)]
                    }
                },
                {
                    "name": "outbound|8081||tollgate.ratelimit.svc.cluster.local",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}}
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "outbound|8081||tollgate.ratelimit.svc.cluster.local",
                        "endpoints": [endpoint(grpc)]
                    }
                }
            ]
        }
    })
}

/// Merges `patch` into `target` as Istio's MERGE does for these values (protobuf merge):
/// messages field by field, repeated fields appended, scalars replaced.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (Value::Array(target), Value::Array(patch)) => target.extend(patch.iter().cloned()),
        (target, patch) => *target = patch.clone(),
    }
}

/// Applies an EnvoyFilter's patches to `bootstrap`: the operations these filters use, each
/// where Istio applies it, and nothing else (an unknown patch fails the test).
fn apply(bootstrap: &mut Value, filter: &Value) {
    let listeners = bootstrap["static_resources"]["listeners"]
        .as_array_mut()
        .expect("listeners");
    for patch in filter["spec"]["configPatches"].as_array().expect("patches") {
        let operation = patch["patch"]["operation"].as_str().expect("an operation");
        let value = &patch["patch"]["value"];
        assert_eq!(patch["match"]["context"], "GATEWAY");
        match (patch["applyTo"].as_str().expect("applyTo"), operation) {
            ("HTTP_FILTER", "INSERT_BEFORE") => {
                let chain = &patch["match"]["listener"]["filterChain"]["filter"];
                assert_eq!(
                    chain["name"],
                    "envoy.filters.network.http_connection_manager"
                );
                let before = chain["subFilter"]["name"].as_str().expect("a sub-filter");
                let mut applied = 0;
                for listener in listeners.iter_mut() {
                    for chain in listener["filter_chains"].as_array_mut().expect("chains") {
                        for network in chain["filters"].as_array_mut().expect("filters") {
                            let filters = network["typed_config"]["http_filters"]
                                .as_array_mut()
                                .expect("HTTP filters");
                            let at = filters
                                .iter()
                                .position(|f| f["name"] == before)
                                .expect("the sub-filter");
                            filters.insert(at, value.clone());
                            applied += 1;
                        }
                    }
                }
                assert_eq!(applied, 1);
            }
            ("VIRTUAL_HOST", "MERGE") => {
                assert_eq!(
                    patch["match"]["routeConfiguration"]["vhost"]["route"]["action"],
                    "ANY"
                );
                let mut applied = 0;
                for listener in listeners.iter_mut() {
                    for chain in listener["filter_chains"].as_array_mut().expect("chains") {
                        for network in chain["filters"].as_array_mut().expect("filters") {
                            for host in network["typed_config"]["route_config"]["virtual_hosts"]
                                .as_array_mut()
                                .expect("virtual hosts")
                            {
                                merge(host, value);
                                applied += 1;
                            }
                        }
                    }
                }
                assert_eq!(applied, 1);
            }
            (applies, operation) => panic!("this test cannot apply {applies} {operation}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_istio_envoyfilters_patch_a_gateway_that_refuses_through_tollgate() {
    let said = validate("deploy/istio/envoyfilter.yaml");
    assert!(said.contains("2 EnvoyFilter"), "{said}");
    let filters = documents("deploy/istio/envoyfilter.yaml");
    let rls = workspace().join("deploy/envoy/ratelimit");
    let server = Tollgate::serve(&["--rls-config", rls.to_str().expect("a UTF-8 path")]);
    let grpc = server.address("grpc");
    let (api, reached) = upstream().await;
    let envoy = Envoy::start(|listen, admin| {
        let mut bootstrap = istio_gateway(listen, admin, api, grpc);
        for filter in &filters {
            apply(&mut bootstrap, filter);
        }
        serde_json::to_string_pretty(&bootstrap).expect("JSON, which Envoy reads as YAML")
    });
    envoy.ready().await;
    let refused = six_logins(&envoy.url(""), &reached).await;
    assert_eq!(refused.headers()["x-envoy-ratelimited"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_sidecars_command_line_and_policies_refuse_the_sixth_login() {
    let said = validate("deploy/proxy/sidecar.yaml");
    assert!(said.contains("1 Deployment"), "{said}");
    let objects = documents("deploy/proxy/sidecar.yaml");
    let configmap = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("the ConfigMap");
    let policies = read("deploy/proxy/policies.yaml");
    assert_eq!(
        configmap["data"]["policies.yaml"],
        policies.as_str(),
        "the sidecar's ConfigMap holds deploy/proxy/policies.yaml"
    );
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the Deployment");
    let container = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "tollgate")
        .expect("the tollgate container");

    let (api, reached) = upstream().await;
    let policy_file = workspace().join("deploy/proxy/policies.yaml");
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| {
            let arg = arg.as_str().expect("text");
            match arg.split_once('=') {
                Some(("--config", _)) => format!("--config={}", policy_file.display()),
                Some(("--upstream", _)) => format!("--upstream=http://{api}"),
                Some(("--listen" | "--admin", _)) => {
                    format!("{}=127.0.0.1:0", arg.split_once('=').map_or("", |(f, _)| f))
                }
                _ => arg.to_owned(),
            }
        })
        .collect();
    assert_eq!(args[0], "proxy");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proxy = Tollgate::start(&args);
    let refused = six_logins(&proxy.http_url(), &reached).await;
    assert!(refused.headers().contains_key("retry-after"));
    assert!(refused.headers().contains_key("x-ratelimit-limit"));
}

#[test]
fn the_kubernetes_guides_secret_validates() {
    let said = validate("deploy/kubernetes/redis-secret.yaml");
    assert!(said.contains("1 Secret"), "{said}");
}

/// Istio's sample Deployment of envoyproxy/ratelimit, its image swapped for Tollgate's and
/// nothing else: its command (`/bin/ratelimit`), its environment and its ConfigMap, mounted as
/// the kubelet mounts it. The test moves only what a test must: the mount under a temporary
/// root, the listeners to free loopback ports, Redis to the test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn the_deployment_written_for_upstreams_image_runs_tollgate_unchanged() {
    let path = "deploy/from-envoy-ratelimit/ratelimit.yaml";
    validate(path);
    let documents = documents(path);
    let kind = |kind: &str| {
        documents
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {path}"))
    };
    let container = &kind("Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"], json!(["/bin/ratelimit"]));
    let mount = container["volumeMounts"][0]["mountPath"]
        .as_str()
        .expect("a mount");
    let files: Vec<(String, String)> = kind("ConfigMap")["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(name, text)| (name.clone(), text.as_str().expect("text").to_owned()))
        .collect();
    let root = tempfile::tempdir().expect("a directory");
    let moved = |path: &str| root.path().join(path.trim_start_matches('/'));
    support::project_configmap(&moved(mount), &files, 1);

    let redis = tollgate_testkit::RedisServer::start();
    let http_port = tollgate_testkit::free_port();
    let mut env: Vec<(String, String)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|variable| {
            let name = variable["name"].as_str().expect("a name").to_owned();
            let value = variable["value"].as_str().expect("a value").to_owned();
            let value = match name.as_str() {
                "RUNTIME_ROOT" => moved(&value).to_string_lossy().into_owned(),
                "REDIS_URL" => format!("127.0.0.1:{}", redis.port()),
                "HOST" | "GRPC_HOST" => "127.0.0.1".to_owned(),
                _ => value,
            };
            (name, value)
        })
        .collect();
    env.extend([
        ("PORT".to_owned(), http_port.to_string()),
        (
            "GRPC_PORT".to_owned(),
            tollgate_testkit::free_port().to_string(),
        ),
        ("DEBUG_HOST".to_owned(), "127.0.0.1".to_owned()),
        (
            "DEBUG_PORT".to_owned(),
            tollgate_testkit::free_port().to_string(),
        ),
    ]);
    // The command, as the container runs it: the image's /bin/ratelimit is a link to tollgate.
    let bin = tempfile::tempdir().expect("a directory");
    let ratelimit = bin.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &ratelimit).expect("linked");
    let mut child = Command::new(&ratelimit)
        .env_clear()
        .envs(env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let base = format!("http://127.0.0.1:{http_port}");
    let probe = container["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .expect("a probe");
    support::eventually("the readiness probe passes", || async {
        reqwest::get(format!("{base}{probe}"))
            .await
            .is_ok_and(|answer| answer.status() == 200)
    })
    .await;
    let ask = || async {
        reqwest::Client::new()
            .post(format!("{base}/json"))
            .json(&json!({"domain": "ratelimit", "descriptors": [{"entries": [{"key": "PATH", "value": "/productpage"}]}]}))
            .send()
            .await
            .expect("an answer")
            .json::<Value>()
            .await
            .expect("JSON")["overallCode"]
            .clone()
    };
    assert_eq!(ask().await, "OK");
    assert_eq!(ask().await, "OVER_LIMIT", "1 a minute for /productpage");
    let _ = child.kill();
    let _ = child.wait();
}

/// The image Tollgate's chart runs: `repository:appVersion`.
fn tollgate_image() -> String {
    let chart = &documents("deploy/helm/tollgate/Chart.yaml")[0];
    let values = &documents("deploy/helm/tollgate/values.yaml")[0];
    format!(
        "{}:{}",
        values["image"]["repository"]
            .as_str()
            .expect("a repository"),
        chart["appVersion"].as_str().expect("an appVersion")
    )
}

#[test]
fn envoy_gateways_configuration_runs_tollgates_image_with_a_redis() {
    let path = "deploy/envoy-gateway/envoy-gateway-config.yaml";
    let said = validate(path);
    assert!(said.contains("1 ConfigMap"), "{said}");
    let config_map = &documents(path)[0];
    assert_eq!(config_map["metadata"]["name"], "envoy-gateway-config");
    let embedded = tempfile::tempdir().expect("a directory");
    let file = embedded.path().join("envoy-gateway.yaml");
    let text = config_map["data"]["envoy-gateway.yaml"]
        .as_str()
        .expect("the EnvoyGateway document");
    std::fs::write(&file, text).expect("written");
    let envoy_gateway = &documents(file.to_str().expect("UTF-8"))[0];
    assert_eq!(
        envoy_gateway["apiVersion"],
        "gateway.envoyproxy.io/v1alpha1"
    );
    assert_eq!(envoy_gateway["kind"], "EnvoyGateway");
    assert_eq!(envoy_gateway["provider"]["type"], "Kubernetes");
    let image = tollgate_image();
    assert_eq!(
        envoy_gateway["provider"]["kubernetes"]["rateLimitDeployment"]["container"]["image"],
        image.as_str()
    );
    let rate_limit = &envoy_gateway["rateLimit"];
    assert_eq!(rate_limit["backend"]["type"], "Redis");
    assert!(
        rate_limit["backend"]["redis"]["url"]
            .as_str()
            .is_some_and(|url| !url.is_empty()),
        "{rate_limit}"
    );

    let helm = &documents("deploy/envoy-gateway/values.yaml")[0];
    assert_eq!(
        helm["global"]["images"]["ratelimit"]["image"],
        image.as_str()
    );
    assert_eq!(&helm["config"]["envoyGateway"]["rateLimit"], rate_limit);
}

#[test]
fn every_flag_the_envoy_gateway_guide_names_is_tollgates() {
    let guide = read("docs/deploy/envoy-gateway.md");
    let (status, help, _) = support::run(&["serve", "--help"]);
    assert!(status.success());
    let flags: Vec<&str> = guide
        .split('`')
        .filter_map(|quoted| quoted.split_whitespace().next())
        .filter(|word| word.starts_with("--"))
        .collect();
    assert!(flags.contains(&"--rls-xds-server"), "{flags:?}");
    for flag in flags {
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "the guide names {flag}, which tollgate serve does not take"
        );
    }
}
