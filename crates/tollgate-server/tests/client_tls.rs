//! tollgate-client over TLS against the real binary: `https://` verified by a private CA, the
//! server's name checked, client certificates for mutual TLS, and a `reqwest::Client` of the
//! caller's own. Certificates are made by the test (rcgen).
//!
//! Built only with tollgate-client's `rustls` feature (`scripts/test` runs it on its own): the
//! feature leaves reqwest without a crypto provider of its own, which the plain reqwest clients
//! of the other tests here rely on.

mod support;

use std::error::Error as _;
use std::path::Path;
use std::sync::Arc;

use support::Tollgate;
use tollgate_client::{ClientError, InlineLimit, TollgateClient};
use tollgate_testkit::Certificates;

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn pem(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("a PEM file")
}

/// `tollgate serve` with the test's server certificate, and `args`.
fn serve_tls(certificates: &Certificates, args: &[&str]) -> Tollgate {
    let mut all = vec![
        "--tls-cert",
        path(&certificates.server_cert),
        "--tls-key",
        path(&certificates.server_key),
    ];
    all.extend_from_slice(args);
    Tollgate::serve(&all)
}

fn https_base(server: &Tollgate) -> String {
    format!("https://{}", server.address("http"))
}

/// The answers to three checks of a limit of two on `key`: the server's own decisions.
async fn three_checks(client: &TollgateClient, key: &str) -> Result<Vec<bool>, ClientError> {
    let limits = [InlineLimit::new(key, "fixed_window", "2/h")];
    let mut allowed = Vec::new();
    for _ in 0..3 {
        allowed.push(client.check_limits(&limits, None).await?.allowed);
    }
    Ok(allowed)
}

/// Every message in the error's chain of causes.
fn causes(error: &ClientError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Asserts that a check through `client` fails in the TLS handshake, for `why`.
async fn refused_in_the_handshake(client: &TollgateClient, why: &str) {
    let limits = [InlineLimit::new("never", "fixed_window", "2/h")];
    match client.check_limits(&limits, None).await {
        Err(error @ ClientError::Transport(_)) => {
            let text = causes(&error);
            assert!(text.contains(why), "expected {why:?} in: {text}");
        }
        other => panic!("expected a failed handshake ({why}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_private_ca_lets_the_client_check_over_https() {
    let certificates = Certificates::generate();
    let server = serve_tls(&certificates, &[]);
    let trusting = TollgateClient::builder(&https_base(&server))
        .ca_pem(pem(&certificates.ca))
        .build()
        .expect("a client");
    assert_eq!(
        three_checks(&trusting, "tls:private-ca")
            .await
            .expect("answered"),
        [true, true, false]
    );

    let other = TollgateClient::builder(&https_base(&server))
        .ca_pem(pem(&certificates.other_ca))
        .build()
        .expect("a client");
    refused_in_the_handshake(&other, "UnknownIssuer").await;

    // The same CA, but a certificate for another name than the one the client connects by.
    let elsewhere = Certificates::for_server_names(&["tollgate.example"]);
    let misnamed = serve_tls(&elsewhere, &[]);
    let client = TollgateClient::builder(&https_base(&misnamed))
        .ca_pem(pem(&elsewhere.ca))
        .build()
        .expect("a client");
    refused_in_the_handshake(&client, "certificate not valid for name").await;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certificates = Certificates::generate();
    let server = serve_tls(&certificates, &["--tls-client-ca", path(&certificates.ca)]);
    let with_certificate = TollgateClient::builder(&https_base(&server))
        .ca_pem(pem(&certificates.ca))
        .identity_pem(
            pem(&certificates.client_cert),
            pem(&certificates.client_key),
        )
        .build()
        .expect("a client");
    assert_eq!(
        three_checks(&with_certificate, "tls:mutual")
            .await
            .expect("answered"),
        [true, true, false]
    );

    let without = TollgateClient::builder(&https_base(&server))
        .ca_pem(pem(&certificates.ca))
        .build()
        .expect("a client");
    let answer = three_checks(&without, "tls:mutual-without").await;
    assert!(
        matches!(answer, Err(ClientError::Transport(_))),
        "a client without a certificate is turned away: {answer:?}"
    );
}

#[tokio::test]
async fn the_callers_own_reqwest_client_is_used_with_its_tls_settings() {
    let certificates = Certificates::generate();
    let server = serve_tls(&certificates, &[]);
    let mut roots = rustls::RootCertStore::empty();
    for certificate in
        rustls::pki_types::pem::PemObject::pem_file_iter(&certificates.ca).expect("the CA file")
    {
        roots
            .add(certificate.expect("a certificate"))
            .expect("a CA");
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let own = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("the caller's client");
    let client =
        TollgateClient::with_http_client(&https_base(&server), own.clone()).expect("a client");
    assert_eq!(
        three_checks(&client, "tls:own-client")
            .await
            .expect("answered"),
        [true, true, false]
    );

    // Without the caller's settings the client verifies by the system's CAs, which never
    // signed the test's certificate.
    let system = TollgateClient::builder(&https_base(&server)).build();
    match system {
        Ok(client) => refused_in_the_handshake(&client, "UnknownIssuer").await,
        Err(error) => assert!(matches!(error, ClientError::Tls(_)), "{error}"),
    }

    let error = TollgateClient::with_http_client("tollgate:8080", own).expect_err("not a URL");
    assert!(matches!(error, ClientError::Url { .. }), "{error}");
}
