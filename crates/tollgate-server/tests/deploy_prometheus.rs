//! A real Prometheus (Debian's `prometheus` package, which `scripts/test` installs) scrapes a
//! real `tollgate serve` on a real Redis, evaluating the shipped alert rules
//! (`deploy/helm/tollgate/files/tollgate-alerts.yaml`): nothing fires while Redis answers, and
//! `TollgateStoreDown` fires once Redis is killed, with no traffic at all. The same
//! server's `/metrics` also has every metric the alert rules and the dashboard name.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Tollgate;
use tollgate_testkit::RedisServer;

/// How long Prometheus has to scrape, evaluate and fire: its first scrape waits for a 5 s
/// target sync, then scrapes and evaluations come every second.
const PATIENCE: Duration = Duration::from_secs(60);

fn chart_files() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/tollgate/files")
}

/// `method path` on `address` over HTTP/1.1: the status code and the body.
fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    // Prometheus answers its API in chunks.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A Prometheus on a free loopback port, killed when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    directory: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr, rules: &Path) -> Prometheus {
        let directory = tempfile::tempdir().expect("a temporary directory");
        let config = directory.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 \x20 - job_name: tollgate\n\
                 \x20   static_configs: [{{targets: [\"{target}\"]}}]\n",
            ),
        )
        .expect("the configuration written");
        let check = Command::new("promtool")
            .args(["check", "config"])
            .arg(&config)
            .output()
            .unwrap_or_else(|error| {
                panic!("promtool does not run ({error}): run scripts/test or apt-get install -y prometheus")
            });
        assert!(
            check.status.success(),
            "{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let address: SocketAddr = format!("127.0.0.1:{}", support::envoy::free_port())
            .parse()
            .expect("an address");
        let log = std::fs::File::create(directory.path().join("prometheus.log")).expect("a log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                directory.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("prometheus does not run ({error}): run scripts/test or apt-get install -y prometheus")
            });
        let prometheus = Prometheus {
            child,
            address,
            directory,
        };
        prometheus.until("Prometheus is ready", || {
            http(address, "GET", "/-/ready", "").is_ok_and(|(status, _)| status == 200)
        });
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.directory.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Polls `condition` every 100 ms until it holds, within [`PATIENCE`].
    fn until(&self, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !condition() {
            assert!(
                Instant::now() < deadline,
                "never happened: {what}; Prometheus said:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn api(&self, path: &str) -> Value {
        let (status, body) = http(self.address, "GET", path, "").expect("Prometheus answers");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The alerts in `state` (`pending`, `firing`), by name.
    fn alerts(&self, state: &str) -> BTreeSet<String> {
        self.api("/api/v1/alerts")["data"]["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .filter(|alert| alert["state"] == state)
            .filter_map(|alert| alert["labels"]["alertname"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every `tollgate_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("tollgate_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

#[test]
fn prometheus_fires_the_store_alert_when_redis_is_killed() {
    let started = Instant::now();
    let redis = RedisServer::start();
    let rls = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        rls.path().join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    )
    .expect("written");
    let server = Tollgate::serve(&[
        "--redis",
        &redis.url(),
        "--rls-config",
        rls.path().to_str().expect("a UTF-8 path"),
    ]);
    let api = server.address("http");
    let admin = server.address("admin");
    let rules = chart_files().join("tollgate-alerts.yaml");
    let prometheus = Prometheus::start(admin, &rules);

    // Traffic while Redis answers: checks, an Envoy descriptor over its limit, a reload.
    let check = r#"{"policy": "login", "attributes": {"ip": "203.0.113.7"}}"#;
    let (status, body) = http(api, "POST", "/v1/check", check).expect("the check API");
    assert_eq!(status, 200, "{body}");
    let edge = r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "203.0.113.7"}]}]}"#;
    for _ in 0..2 {
        http(api, "POST", "/json", edge).expect("the rate limit service");
    }
    server.signal("HUP");
    server.wait_for_log("rate limit service configuration reloaded");

    // Scraped, evaluated, and quiet while Redis answers.
    prometheus.until("tollgate is scraped", || {
        prometheus.api("/api/v1/query?query=up")["data"]["result"]
            .as_array()
            .is_some_and(|result| result.iter().any(|r| r["value"][1] == "1"))
    });
    prometheus.until("the rules are evaluated", || {
        prometheus.api("/api/v1/rules")["data"]["groups"][0]["lastEvaluation"]
            .as_str()
            .is_some_and(|at| !at.starts_with("0001"))
    });
    assert!(
        !prometheus.alerts("firing").contains("TollgateStoreDown"),
        "the store alert fires while Redis answers"
    );
    let scraping = started.elapsed();

    // Redis killed: the store's probe fails and the alert fires without a single request.
    redis.signal("KILL");
    let killed = Instant::now();
    prometheus.until("TollgateStoreDown fires", || {
        prometheus.alerts("firing").contains("TollgateStoreDown")
    });
    server.wait_for_log("the store is lost");
    // Meanwhile a check is answered by its policy's failure mode.
    let (status, body) = http(api, "POST", "/v1/check", check).expect("the check API");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""decided_by":"fail_closed""#), "{body}");
    eprintln!(
        "Prometheus scraped and evaluated {scraping:?} after the start; the alert fired {:?} \
         after Redis was killed, with no traffic",
        killed.elapsed()
    );
    // The metrics the alert rules and the dashboard use are all there (some series appear
    // only with their first event: a store error, a reload, an Envoy descriptor over its
    // limit, all of which have happened by now).
    let (_, exposition) = http(admin, "GET", "/metrics", "").expect("metrics");
    let exported = metric_names(&exposition);
    let mut used = metric_names(&std::fs::read_to_string(&rules).expect("the rules"));
    used.extend(metric_names(
        &std::fs::read_to_string(chart_files().join("tollgate-dashboard.json"))
            .expect("the dashboard"),
    ));
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "used by the alerts or the dashboard but not exported: {missing:?}\n{exposition}"
    );
}
