//! TLS on Tollgate's own listeners: the check API, the admin API, the gRPC service and the
//! proxy over TLS; client certificates required with `--tls-client-ca`; certificates replaced
//! on disk are taken up without a restart. Certificates are made by the test (rcgen).

mod support;

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use support::{Tollgate, eventually};
use tollgate_server::rls::proto::service::RateLimitRequest;
use tollgate_server::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_testkit::Certificates;

/// An HTTPS client that trusts `ca` and, when given, presents `client` (certificate, key).
fn client(ca: &Path, client: Option<(&Path, &Path)>) -> reqwest::Client {
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
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .expect("a client")
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Whether a check over `client` is answered.
async fn checks(client: &reqwest::Client, base: &str) -> bool {
    let body = json!({"limits": [{"key": "k", "algorithm": "gcra", "quota": "100/s"}]});
    client
        .post(format!("{base}/v1/check"))
        .json(&body)
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
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
        .get(format!("https://{}/admin/stats", server.address("admin")))
        .send()
        .await
        .expect("the admin API over TLS");
    assert!(admin.status().is_success(), "{}", admin.status());
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
async fn the_proxy_listens_over_tls() {
    let certificates = Certificates::generate();
    let upstream = Tollgate::serve(&[]);
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/proxy.yaml");
    let proxy = Tollgate::proxy(&[
        "--config",
        config,
        "--upstream",
        &upstream.http_url(),
        "--tls-cert",
        path(&certificates.server_cert),
        "--tls-key",
        path(&certificates.server_key),
    ]);
    assert!(
        proxy.printed["listen"].starts_with("https://"),
        "{:?}",
        proxy.printed
    );
    let answer = client(&certificates.ca, None)
        .get(format!("https://{}/healthz", proxy.address("listen")))
        .header("x-forwarded-for", "192.0.2.1")
        .send()
        .await
        .expect("the proxy answers over TLS");
    assert!(answer.status().is_success(), "{}", answer.status());
}
