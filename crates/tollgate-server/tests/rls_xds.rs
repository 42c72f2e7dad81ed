//! The rate limit service's configuration pushed over xDS (state of the world, ADS), as Envoy
//! Gateway pushes it to envoyproxy/ratelimit: the real `tollgate serve` subscribed to a
//! management server (tests/xds_server) that pushes domains, replaces them, sends a bad
//! resource (NACKed with why, the previous limits still answering), withdraws every domain,
//! goes away (the last configuration keeps serving) and comes back (Tollgate subscribes
//! again), while rate limit requests flow over gRPC; the listeners wait for the first
//! configuration unless told not to; readiness follows the domains; mutual TLS 1.3 to the
//! management server.

mod support;
mod xds_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use support::{Tollgate, eventually};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor as Descriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::Certificates;
use xds_server::{ManagementServer, TYPE_URL};

/// Quick reconnection, so that the tests do not wait for the defaults' 10 s.
const QUICK_BACKOFF: [&str; 4] = [
    "--rls-xds-backoff-initial",
    "20ms",
    "--rls-xds-backoff-max",
    "100ms",
];

/// A descriptor `key` (=`value`, if not empty) limited to `requests` per `unit`.
fn limit(key: &str, value: &str, unit: RateLimitUnit, requests: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.to_owned(),
        value: value.to_owned(),
        rate_limit: Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: requests,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

/// A domain as Envoy Gateway names it: the resource is named after its domain.
fn domain(name: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
    RateLimitConfig {
        name: name.to_owned(),
        domain: name.to_owned(),
        descriptors,
    }
}

/// A gRPC client of the rate limit service.
#[derive(Clone)]
struct Rls(RateLimitServiceClient<tonic::transport::Channel>);

impl Rls {
    async fn connect(server: &Tollgate) -> Self {
        let address = server.address("grpc");
        Self(
            RateLimitServiceClient::connect(format!("http://{address}"))
                .await
                .expect("the gRPC listener"),
        )
    }

    /// The overall code for one hit on `(key, value)` in `domain`.
    async fn code(&self, domain: &str, key: &str, value: &str) -> Result<Code, tonic::Status> {
        let answer = self
            .0
            .clone()
            .should_rate_limit(RateLimitRequest {
                domain: domain.to_owned(),
                descriptors: vec![Descriptor {
                    entries: vec![Entry {
                        key: key.to_owned(),
                        value: value.to_owned(),
                    }],
                    ..Descriptor::default()
                }],
                hits_addend: 0,
            })
            .await?;
        Ok(answer.into_inner().overall_code())
    }

    /// Hits `(key, value)` until refused: how many were allowed (at most `cap`).
    async fn allowed(&self, domain: &str, key: &str, value: &str, cap: u32) -> u32 {
        for allowed in 0..=cap {
            match self.code(domain, key, value).await.expect("an answer") {
                Code::Ok => {}
                Code::OverLimit => return allowed,
                other => panic!("{other:?} for {domain}/{key}={value}"),
            }
        }
        cap + 1
    }
}

/// Requests that keep flowing during a test: each must be answered.
struct Traffic {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Traffic {
    /// Asks about a descriptor no configuration limits, again and again.
    fn start(rls: &Rls) -> Self {
        let (stop, answered) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (rls, stopping, counting) = (rls.clone(), Arc::clone(&stop), Arc::clone(&answered));
        let task = tokio::spawn(async move {
            let mut failures = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match rls.code("edge", "traffic", "t").await {
                    Ok(Code::Ok) => {
                        counting.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.push(format!("{other:?}")),
                }
            }
            failures
        });
        Self {
            stop,
            answered,
            task,
        }
    }

    /// Waits until `more` further requests were answered.
    async fn flows(&self, more: u64) {
        let from = self.answered.load(Ordering::Relaxed);
        eventually("rate limit requests are answered", || async {
            self.answered.load(Ordering::Relaxed) >= from + more
        })
        .await;
    }

    /// Stops, asserting every request was answered OK.
    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.task.await.expect("the traffic task");
        assert!(
            failures.is_empty(),
            "requests not answered OK: {failures:?}"
        );
        assert!(self.answered.load(Ordering::Relaxed) > 0);
    }
}

/// The value of a metric line starting with `prefix` on the admin listener.
async fn metric(server: &Tollgate, prefix: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", server.address("admin")))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
}

fn xds_args<'a>(xds: &'a str, node: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--rls-xds-server", xds, "--rls-xds-node-id", node];
    args.extend_from_slice(&QUICK_BACKOFF);
    args.extend_from_slice(more);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn domains_are_pushed_replaced_refused_and_withdrawn_while_requests_flow() {
    let xds = ManagementServer::start();
    xds.set(
        "tollgate-test",
        "1",
        &[domain(
            "edge",
            vec![limit("client", "", RateLimitUnit::Hour, 2)],
        )],
    );
    let address = xds.address().to_string();
    let server = Tollgate::serve(&xds_args(
        &address,
        "tollgate-test",
        &[
            "--rls-xds-node-metadata",
            "zone=eu-1,role=ratelimit",
            "--rls-xds-header",
            "x-tenant:acme",
            "--rls-xds-header",
            "authorization:Bearer s3cret-token",
        ],
    ));
    // Serving means the first configuration is in force (the listeners waited for it).
    let rls = Rls::connect(&server).await;
    assert_eq!(rls.allowed("edge", "client", "a", 5).await, 2);
    let traffic = Traffic::start(&rls);

    // The subscription: ADS, wildcard, this node with its metadata, the extra headers.
    let requests = xds.requests();
    let first = &requests[0];
    assert_eq!(first.request.type_url, TYPE_URL);
    assert!(
        first.request.resource_names.is_empty(),
        "a wildcard subscription"
    );
    assert_eq!(
        (
            first.request.version_info.as_str(),
            first.request.response_nonce.as_str()
        ),
        ("", "")
    );
    let node = first.request.node.clone().expect("a node");
    assert_eq!(node.id, "tollgate-test");
    let metadata = node.metadata.expect("node metadata");
    let text = |name: &str| match &metadata.fields[name].kind {
        Some(prost_types::value::Kind::StringValue(text)) => text.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(
        (text("zone"), text("role")),
        ("eu-1".to_owned(), "ratelimit".to_owned())
    );
    assert_eq!(
        first.metadata.get("x-tenant").map(|v| v.to_str().ok()),
        Some(Some("acme"))
    );
    assert_eq!(
        first.metadata.get("authorization").map(|v| v.to_str().ok()),
        Some(Some("Bearer s3cret-token"))
    );
    let ack = xds.request("the ACK of version 1", |r| r.acks("1")).await;
    assert_eq!(ack.request.response_nonce, format!("{}-1", ack.stream));
    server.wait_for_log("rate limit service configuration reloaded: 1 domains; added edge");

    // A new version replaces the whole configuration.
    xds.set(
        "tollgate-test",
        "2",
        &[
            domain("edge", vec![limit("client", "", RateLimitUnit::Hour, 1)]),
            domain("api", vec![limit("user", "", RateLimitUnit::Minute, 3)]),
        ],
    );
    xds.request("the ACK of version 2", |r| r.acks("2")).await;
    assert_eq!(rls.allowed("edge", "client", "b", 5).await, 1);
    assert_eq!(rls.allowed("api", "user", "u", 5).await, 3);
    server.wait_for_log("rate limit service configuration reloaded: 2 domains; added api");
    traffic.flows(10).await;

    // A bad resource: refused whole, with why; version 2 stays in force.
    let mut unknown_unit = limit("path", "/login", RateLimitUnit::Unknown, 5);
    unknown_unit.descriptors = Vec::new();
    let mut bad_edge = domain("edge", vec![limit("client", "", RateLimitUnit::Hour, 100)]);
    bad_edge.descriptors[0].descriptors = vec![unknown_unit];
    xds.set(
        "tollgate-test",
        "3",
        &[
            bad_edge,
            domain("api", vec![limit("user", "", RateLimitUnit::Minute, 100)]),
        ],
    );
    let nack = xds
        .request("the NACK of version 3", |r| r.refusal().is_some())
        .await;
    assert_eq!(
        nack.request.version_info, "2",
        "a NACK names the version in force"
    );
    assert!(
        nack.request.response_nonce.ends_with("-3"),
        "{:?}",
        nack.request
    );
    let why = nack.refusal().expect("a refusal");
    assert!(
        why.starts_with(
            "resource \"edge\": descriptor \"client.path_/login\": rate_limit.unit: UNKNOWN"
        ),
        "{why}"
    );
    assert_eq!(
        rls.allowed("edge", "client", "c", 5).await,
        1,
        "version 2's limit"
    );
    assert_eq!(
        rls.allowed("api", "user", "v", 5).await,
        3,
        "version 2's limit"
    );
    server.wait_for_log("rate limit service configuration refused, the previous one stays in force: resource \"edge\"");
    traffic.flows(10).await;

    // An empty response: no domain at all.
    xds.set("tollgate-test", "4", &[]);
    xds.request("the ACK of version 4", |r| r.acks("4")).await;
    assert_eq!(
        rls.allowed("edge", "client", "d", 5).await,
        6,
        "no limit any more"
    );
    assert_eq!(
        rls.allowed("api", "user", "w", 5).await,
        6,
        "no limit any more"
    );
    server.wait_for_log("rate limit service configuration reloaded: 0 domains; removed api, edge");

    assert!(metric(&server, "tollgate_config_reloads_total{result=\"success\"}").await >= 3.0);
    assert!(metric(&server, "tollgate_config_reloads_total{result=\"failure\"}").await >= 1.0);
    assert!(
        !server.stderr().contains("s3cret"),
        "a header value was logged"
    );
    traffic.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_configuration_serves_while_the_management_server_is_away() {
    let mut xds = ManagementServer::start();
    let address = xds.address();
    xds.set(
        "tollgate-test",
        "1",
        &[domain(
            "edge",
            vec![limit("client", "", RateLimitUnit::Hour, 1)],
        )],
    );
    let address_text = address.to_string();
    let server = Tollgate::serve(&xds_args(&address_text, "tollgate-test", &[]));
    let rls = Rls::connect(&server).await;
    xds.request("the ACK of version 1", |r| r.acks("1")).await;
    let traffic = Traffic::start(&rls);

    xds.stop();
    server.wait_for_log("cannot reach the xDS management server");
    server.wait_for_log(
        "the rate limit configuration in force (version \"1\", 1 domains) keeps serving",
    );
    assert_eq!(
        rls.allowed("edge", "client", "a", 5).await,
        1,
        "version 1 still in force"
    );
    traffic.flows(10).await;

    // Back on the same address with other limits: Tollgate subscribes again, saying which
    // version it has, and takes the new one.
    let xds = ManagementServer::start_on(address, None);
    xds.set(
        "tollgate-test",
        "2",
        &[domain(
            "api",
            vec![limit("user", "", RateLimitUnit::Hour, 2)],
        )],
    );
    let again = xds
        .request("a new subscription", |r| {
            r.request.response_nonce.is_empty()
        })
        .await;
    assert_eq!(again.request.version_info, "1", "the version in force");
    xds.request("the ACK of version 2", |r| r.acks("2")).await;
    assert_eq!(rls.allowed("api", "user", "u", 5).await, 2);
    assert_eq!(
        rls.allowed("edge", "client", "b", 5).await,
        6,
        "edge is gone"
    );
    traffic.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listeners_open_once_the_first_configuration_is_in_force() {
    let xds = ManagementServer::start();
    let address = xds.address().to_string();
    let http = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        probe.local_addr().expect("an address")
    };
    let args: Vec<String> = xds_args(&address, "late", &["--http", &http.to_string()])
        .into_iter()
        .map(str::to_owned)
        .collect();
    let starting = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Tollgate::serve(&args)
    });
    xds.request("the subscription of node late", |r| {
        r.request.node.as_ref().is_some_and(|n| n.id == "late")
    })
    .await;
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "the HTTP listener is open before the first configuration"
    );
    xds.set(
        "late",
        "1",
        &[domain(
            "edge",
            vec![limit("client", "", RateLimitUnit::Hour, 1)],
        )],
    );
    let server = starting.await.expect("tollgate starts");
    assert_eq!(server.address("http"), http);
    let rls = Rls::connect(&server).await;
    assert_eq!(
        rls.allowed("edge", "client", "a", 5).await,
        1,
        "limited from the first request"
    );

    // Asked to stop while waiting, it ends cleanly.
    let mut waiting = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(support::serve_args(&xds_args(&address, "never", &[])))
        .env_remove("TOLLGATE_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tollgate starts");
    xds.request("the subscription of node never", |r| {
        r.request.node.as_ref().is_some_and(|n| n.id == "never")
    })
    .await;
    let pid = waiting.id().to_string();
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(signalled.success());
    let status = tokio::task::spawn_blocking(move || waiting.wait())
        .await
        .expect("joined")
        .expect("the exit status");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_without_configuration_it_is_ready_only_with_domains() {
    let xds = ManagementServer::start();
    let address = xds.address().to_string();
    let server = Tollgate::serve(&xds_args(
        &address,
        "early",
        &["--rls-xds-start-without-config", "--ready-with-rls-domains"],
    ));
    let readyz = format!("{}/readyz", server.http_url());
    let status = || async {
        reqwest::get(&readyz)
            .await
            .expect("an answer")
            .status()
            .as_u16()
    };
    let rls = Rls::connect(&server).await;
    assert_eq!(status().await, 503, "no domain yet");
    // Nothing pushed yet: an error Envoy's failure mode decides, not a silent OK.
    let early = rls
        .code("edge", "client", "a")
        .await
        .expect_err("no configuration yet");
    assert_eq!(early.code(), tonic::Code::Unavailable);
    assert_eq!(early.message(), "no rate limit configuration loaded");

    xds.request("the subscription of node early", |r| {
        r.request.version_info.is_empty()
    })
    .await;
    xds.set(
        "early",
        "1",
        &[domain(
            "edge",
            vec![limit("client", "", RateLimitUnit::Hour, 1)],
        )],
    );
    eventually("ready once a domain is in force", || async {
        status().await == 200
    })
    .await;
    assert_eq!(rls.allowed("edge", "client", "b", 3).await, 1);

    xds.set("early", "2", &[]);
    eventually("not ready once every domain is withdrawn", || async {
        status().await == 503
    })
    .await;
    // A configuration of no domain is one: every descriptor is OK, as upstream answers it.
    assert_eq!(rls.code("edge", "client", "c").await.ok(), Some(Code::Ok));
}

/// A management server as Envoy Gateway runs its own: TLS 1.3 only, a client certificate
/// signed by its CA required, HTTP/2 by ALPN, a certificate for its Service's names.
fn envoy_gateway_like(certificates: &Certificates) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for certificate in
        rustls::pki_types::CertificateDer::pem_file_iter(&certificates.ca).expect("the CA")
    {
        roots
            .add(certificate.expect("a certificate"))
            .expect("a CA");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .expect("a client verifier");
    let chain = rustls::pki_types::CertificateDer::pem_file_iter(&certificates.server_cert)
        .expect("the certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("certificates");
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_file(&certificates.server_key).expect("the key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("a server configuration");
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_to_the_management_server_as_envoy_gateway_requires_it() {
    let certificates = Certificates::for_server_names(&[
        "envoy-gateway",
        "envoy-gateway.envoy-gateway-system",
        "envoy-gateway.envoy-gateway-system.svc",
    ]);
    let xds = ManagementServer::start_on(
        "127.0.0.1:0".parse::<SocketAddr>().expect("an address"),
        Some(envoy_gateway_like(&certificates)),
    );
    xds.set(
        "envoy-ratelimit",
        "1",
        &[domain(
            "edge",
            vec![limit("client", "", RateLimitUnit::Hour, 1)],
        )],
    );
    let address = xds.address().to_string();
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8").to_owned();
    let (ca, cert, key) = (
        path(&certificates.ca),
        path(&certificates.client_cert),
        path(&certificates.client_key),
    );
    let tls = ["--rls-xds-tls", "--rls-xds-ca", &ca];
    let named = ["--rls-xds-server-name", "envoy-gateway"];
    let identity = ["--rls-xds-client-cert", &cert, "--rls-xds-client-key", &key];

    // Without a client certificate, the server refuses the handshake.
    let anonymous = Tollgate::serve(&xds_args(
        &address,
        "envoy-ratelimit",
        &[&tls[..], &named[..], &["--rls-xds-start-without-config"]].concat(),
    ));
    xds.handshake("a handshake refused", |h| h.outcome.is_err())
        .await;
    anonymous.wait_for_log("CertificateRequired");
    drop(anonymous);

    // Dialled by address without the server name, the certificate does not match.
    let unnamed = Tollgate::serve(&xds_args(
        &address,
        "envoy-ratelimit",
        &[&tls[..], &identity[..], &["--rls-xds-start-without-config"]].concat(),
    ));
    unnamed.wait_for_log("not valid for name");
    drop(unnamed);

    // With both, the configuration arrives over TLS 1.3 and HTTP/2.
    let server = Tollgate::serve(&xds_args(
        &address,
        "envoy-ratelimit",
        &[&tls[..], &named[..], &identity[..]].concat(),
    ));
    let handshake = xds
        .handshake("a handshake agreed", |h| h.outcome.is_ok())
        .await;
    assert_eq!(handshake.outcome, Ok(Some("h2".to_owned())));
    assert_eq!(handshake.version, Some(rustls::ProtocolVersion::TLSv1_3));
    xds.request("the ACK of version 1", |r| r.acks("1")).await;
    let rls = Rls::connect(&server).await;
    assert_eq!(rls.allowed("edge", "client", "a", 5).await, 1);
}

/// Envoy Gateway's rate limit Deployment with Tollgate's image: the binary run as
/// `/bin/ratelimit` with nothing but the environment Envoy Gateway writes (its order and
/// values; the addresses moved to loopback, Redis to the test's, and the xDS server's name
/// given with CONFIG_GRPC_XDS_SERVER_TLS_SAN because `envoy-gateway` does not resolve here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// One scenario end to end, its steps in the order they happen.
#[allow(clippy::too_many_lines)]
async fn envoy_gateways_own_environment_runs_the_image_as_ratelimit() {
    let xds_certificates = Certificates::for_server_names(&["envoy-gateway"]);
    let own = Certificates::generate();
    let xds = ManagementServer::start_on(
        "127.0.0.1:0".parse::<SocketAddr>().expect("an address"),
        Some(envoy_gateway_like(&xds_certificates)),
    );
    let redis = tollgate_testkit::RedisServer::start();
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8").to_owned();
    let (http, grpc) = (tollgate_testkit::free_port(), tollgate_testkit::free_port());
    let env: Vec<(&str, String)> = vec![
        ("RUNTIME_ROOT", "/data".to_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("LOG_LEVEL", "info".to_owned()),
        ("USE_STATSD", "false".to_owned()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        ("CONFIG_GRPC_XDS_SERVER_URL", xds.address().to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".to_owned()),
        ("GRPC_SERVER_USE_TLS", "true".to_owned()),
        ("GRPC_SERVER_TLS_CERT", path(&own.server_cert)),
        ("GRPC_SERVER_TLS_KEY", path(&own.server_key)),
        ("GRPC_SERVER_TLS_CA_CERT", path(&own.ca)),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            path(&xds_certificates.client_cert),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            path(&xds_certificates.client_key),
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            path(&xds_certificates.ca),
        ),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("USE_PROMETHEUS", "true".to_owned()),
        (
            "PROMETHEUS_ADDR",
            format!("127.0.0.1:{}", tollgate_testkit::free_port()),
        ),
        (
            "PROMETHEUS_MAPPER_YAML",
            "/etc/statsd-exporter/conf.yaml".to_owned(),
        ),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway".to_owned()),
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", http.to_string()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("GRPC_PORT", grpc.to_string()),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_PORT", tollgate_testkit::free_port().to_string()),
    ];
    let bin = tempfile::tempdir().expect("a directory");
    let ratelimit = bin.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &ratelimit).expect("linked");
    let mut child = std::process::Command::new(&ratelimit)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    // Envoy Gateway's probes ask /healthcheck on port 8080, in plain HTTP.
    let base = format!("http://127.0.0.1:{http}");
    eventually("the health check answers", || async {
        reqwest::get(format!("{base}/healthcheck"))
            .await
            .is_ok_and(|answer| answer.status() == 200)
    })
    .await;
    xds.request("the subscription of node envoy-ratelimit", |r| {
        r.request
            .node
            .as_ref()
            .is_some_and(|node| node.id == "envoy-ratelimit")
    })
    .await;
    xds.set(
        "envoy-ratelimit",
        "1",
        &[domain(
            "default/eg/http",
            vec![limit("client", "", RateLimitUnit::Hour, 2)],
        )],
    );
    xds.request("the ACK of version 1", |r| r.acks("1")).await;
    // Envoy reaches the gRPC listener over TLS.
    let channel = tonic::transport::Channel::from_shared(format!("https://localhost:{grpc}"))
        .expect("a URI")
        .tls_config(tonic::transport::ClientTlsConfig::new().ca_certificate(
            tonic::transport::Certificate::from_pem(std::fs::read(&own.ca).expect("the CA")),
        ))
        .expect("TLS")
        .connect()
        .await
        .expect("gRPC over TLS");
    let rls = Rls(RateLimitServiceClient::new(channel));
    assert_eq!(rls.allowed("default/eg/http", "client", "a", 5).await, 2);
    let _ = child.kill();
    let _ = child.wait();
}
