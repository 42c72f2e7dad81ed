//! TLS on Tollgate's own listeners: the check API, the admin API, the gRPC service and the
//! proxy over TLS; client certificates required with `--tls-client-ca`; certificates replaced
//! on disk are taken up without a restart. Certificates are made by the test (rcgen).

mod support;

use std::path::Path;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use support::{Tollgate, eventually};
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::Certificates;

/// An HTTPS client (hyper over rustls, each request on a new connection).
#[derive(Clone)]
struct HttpsClient(Client<HttpsConnector<HttpConnector>, Full<Bytes>>);

impl HttpsClient {
    /// Sends a request; its status, or `None` when no answer came (a TLS failure, say).
    async fn send(&self, method: Method, url: &str, body: Option<&Value>) -> Option<StatusCode> {
        let mut request = Request::builder()
            .method(method)
            .uri(url)
            .header("x-forwarded-for", "192.0.2.1");
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let body = body.map_or_else(Bytes::new, |body| Bytes::from(body.to_string()));
        let request = request.body(Full::new(body)).expect("a request");
        let response = self.0.request(request).await.ok()?;
        Some(response.status())
    }
}

/// An HTTPS client that trusts `ca` and, when given, presents `client` (certificate, key).
fn client(ca: &Path, client: Option<(&Path, &Path)>) -> HttpsClient {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).expect("the CA file") {
        roots
            .add(certificate.expect("a certificate"))
            .expect("a CA");
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .expect("the client certificate")
                    .map(|c| c.expect("a certificate"))
                    .collect(),
                PrivateKeyDer::from_pem_file(key).expect("the client key"),
            )
            .expect("a client identity"),
    };
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    HttpsClient(
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector),
    )
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Whether a check over `client` is answered.
async fn checks(client: &HttpsClient, base: &str) -> bool {
    let body = json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "100/s"}]});
    client
        .send(Method::POST, &format!("{base}/v1/check"), Some(&body))
        .await
        .is_some_and(|status| status.is_success())
}

#[tokio::test]
async fn every_listener_serves_tls_and_takes_up_a_new_certificate() {
    let certificates = Certificates::generate();
    let directory = tempfile::tempdir().expect("a directory");
    let (cert, key) = (
        directory.path().join("tls.pem"),
        directory.path().join("tls-key.pem"),
    );
    std::fs::copy(&certificates.server_cert, &cert).expect("copy the certificate");
    std::fs::copy(&certificates.server_key, &key).expect("copy the key");
    let server = Tollgate::serve(&["--tls-cert", path(&cert), "--tls-key", path(&key)]);
    assert!(
        server.printed["http"].starts_with("https://"),
        "{:?}",
        server.printed
    );
    let base = format!("https://{}", server.address("http"));
    let trusting = client(&certificates.ca, None);
    assert!(checks(&trusting, &base).await, "a check over TLS");
    let admin = trusting
        .send(
            Method::GET,
            &format!("https://{}/admin/stats", server.address("admin")),
            None,
        )
        .await;
    assert!(admin.is_some_and(|status| status.is_success()), "{admin:?}");
    let plain = reqwest::Client::new()
        .post(format!("http://{}/v1/check", server.address("http")))
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    let untrusting = client(&certificates.other_ca, None);
    assert!(
        !checks(&untrusting, &base).await,
        "a certificate the client does not trust"
    );

    let channel = tonic::transport::Channel::from_shared(format!(
        "https://localhost:{}",
        server.address("grpc").port()
    ))
    .expect("a URI")
    .tls_config(tonic::transport::ClientTlsConfig::new().ca_certificate(
        tonic::transport::Certificate::from_pem(std::fs::read(&certificates.ca).expect("the CA")),
    ))
    .expect("TLS for gRPC")
    .connect()
    .await
    .expect("gRPC over TLS connects");
    let answer = RateLimitServiceClient::new(channel)
        .should_rate_limit(RateLimitRequest {
            domain: "none".to_owned(),
            descriptors: Vec::new(),
            hits_addend: 0,
        })
        .await;
    assert!(
        !matches!(&answer, Err(status) if status.code() == tonic::Code::Unavailable),
        "the gRPC service answers over TLS: {answer:?}"
    );

    // A new certificate from another CA, written over the files: taken up without a restart.
    let renewed = Certificates::generate();
    std::fs::copy(&renewed.server_key, &key).expect("replace the key");
    std::fs::copy(&renewed.server_cert, &cert).expect("replace the certificate");
    let trusting_renewed = client(&renewed.ca, None);
    eventually("the renewed certificate is served", || {
        checks(&trusting_renewed, &base)
    })
    .await;
    // Connections made before keep going; a new one gets the new certificate.
    let trusting_old = client(&certificates.ca, None);
    assert!(
        !checks(&trusting_old, &base).await,
        "the old certificate is gone"
    );
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_from_the_client_ca() {
    let certificates = Certificates::generate();
    let server = Tollgate::serve(&[
        "--tls-cert",
        path(&certificates.server_cert),
        "--tls-key",
        path(&certificates.server_key),
        "--tls-client-ca",
        path(&certificates.ca),
    ]);
    let base = format!("https://{}", server.address("http"));
    let anonymous = client(&certificates.ca, None);
    assert!(
        !checks(&anonymous, &base).await,
        "no client certificate, no answer"
    );
    let identified = client(
        &certificates.ca,
        Some((&certificates.client_cert, &certificates.client_key)),
    );
    assert!(
        checks(&identified, &base).await,
        "a client certificate signed by the CA"
    );
}

#[tokio::test]
async fn the_proxy_listens_over_tls_and_reaches_an_https_upstream() {
    let certificates = Certificates::generate();
    let tls = [
        "--tls-cert",
        path(&certificates.server_cert),
        "--tls-key",
        path(&certificates.server_key),
    ];
    let upstream = Tollgate::serve(&tls);
    let upstream_url = format!("https://localhost:{}", upstream.address("http").port());
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/proxy.yaml");
    let mut args = vec![
        "--config",
        config,
        "--upstream",
        &upstream_url,
        "--upstream-ca",
        path(&certificates.ca),
    ];
    args.extend(tls);
    let proxy = Tollgate::proxy(&args);
    assert!(
        proxy.printed["listen"].starts_with("https://"),
        "{:?}",
        proxy.printed
    );
    assert_eq!(proxy.printed["upstream"], upstream_url);
    let healthz = format!("https://{}/healthz", proxy.address("listen"));
    let answer = client(&certificates.ca, None)
        .send(Method::GET, &healthz, None)
        .await;
    assert!(
        answer.is_some_and(|status| status.is_success()),
        "{answer:?}"
    );

    // An upstream whose certificate the proxy cannot verify is a 502, not a plain connection.
    let mut untrusting = args.clone();
    let position = untrusting
        .iter()
        .position(|arg| *arg == "--upstream-ca")
        .expect("the flag");
    untrusting[position + 1] = path(&certificates.other_ca);
    let proxy = Tollgate::proxy(&untrusting);
    let healthz = format!("https://{}/healthz", proxy.address("listen"));
    let answer = client(&certificates.ca, None)
        .send(Method::GET, &healthz, None)
        .await;
    assert_eq!(answer, Some(StatusCode::BAD_GATEWAY));
}

/// Sockets that never complete a TLS handshake used to keep their places under the cap until
/// the header timeout: with `--max-connections 20`, 20 of them locked every client out (0 of 3
/// probes answered). A connection still in its handshake is idle, and makes room like any
/// idle connection on a plain listener.
#[tokio::test]
async fn handshake_less_sockets_filling_the_cap_make_room_for_clients() {
    let certificates = Certificates::generate();
    let server = Tollgate::start_with_env(
        &support::serve_args(&[
            "--tls-cert",
            path(&certificates.server_cert),
            "--tls-key",
            path(&certificates.server_key),
            "--max-connections",
            "20",
            "--header-timeout",
            "1h",
        ]),
        &[("TOLLGATE_LOG", "info,tollgate_http::http_server=debug")],
    );
    let address = server.address("http");
    let mut silent = Vec::new();
    for _ in 0..20 {
        let socket = tokio::net::TcpStream::connect(address)
            .await
            .expect("connects");
        let peer = socket.local_addr().expect("an address");
        eventually("the silent socket is accepted", || async {
            server
                .stderr()
                .contains(&format!("connection accepted peer={peer}"))
        })
        .await;
        silent.push(socket);
    }
    let base = format!("https://{address}");
    let trusting = client(&certificates.ca, None);
    for probe in 0..3 {
        assert!(checks(&trusting, &base).await, "probe {probe} is answered");
    }
    assert!(
        server
            .stderr()
            .contains("closing a connection still in its TLS handshake to make room"),
        "{}",
        server.stderr()
    );
}

/// TLS on the gRPC listener alone, as envoyproxy/ratelimit's GRPC_SERVER_USE_TLS serves it,
/// with client certificates that must also name one client (GRPC_CLIENT_TLS_SAN).
#[tokio::test]
async fn tls_on_grpc_alone_with_a_named_client() {
    let certificates = Certificates::generate();
    let grpc_check = |san: &'static str| {
        let certificates = &certificates;
        async move {
            let server = Tollgate::serve(&[
                "--tls-cert",
                path(&certificates.server_cert),
                "--tls-key",
                path(&certificates.server_key),
                "--tls-client-ca",
                path(&certificates.ca),
                "--tls-client-san",
                san,
                "--tls-listeners",
                "grpc",
            ]);
            // The HTTP listener stays plain (probes, /json).
            let health = reqwest::get(format!("http://{}/healthcheck", server.address("http")))
                .await
                .expect("a plain answer");
            assert_eq!(health.status(), StatusCode::OK);
            let identity = tonic::transport::Identity::from_pem(
                std::fs::read(&certificates.client_cert).expect("the certificate"),
                std::fs::read(&certificates.client_key).expect("the key"),
            );
            let channel = tonic::transport::Channel::from_shared(format!(
                "https://localhost:{}",
                server.address("grpc").port()
            ))
            .expect("a URI")
            .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(
                        std::fs::read(&certificates.ca).expect("the CA"),
                    ))
                    .identity(identity),
            )
            .expect("TLS for gRPC")
            .connect()
            .await;
            match channel {
                Err(_) => false,
                Ok(channel) => RateLimitServiceClient::new(channel)
                    .should_rate_limit(RateLimitRequest {
                        domain: "none".to_owned(),
                        descriptors: vec![Default::default()],
                        hits_addend: 0,
                    })
                    .await
                    .is_ok(),
            }
        }
    };
    assert!(
        grpc_check("tollgate-client").await,
        "the client certificate names tollgate-client"
    );
    assert!(
        !grpc_check("envoy.example").await,
        "a certificate from the CA that names another client is refused"
    );
}
