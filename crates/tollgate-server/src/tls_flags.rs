//! `--tls-cert`, `--tls-key`, `--tls-client-ca`, `--tls-client-san` and `--tls-listeners`:
//! which of the listeners are served over TLS, and with what (loaded by `tollgate_http::tls`).

use std::path::PathBuf;

use tollgate_http::tls::{Tls, TlsFiles};

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsFlags {
    /// Serve every listener over TLS with this certificate chain (PEM); reloaded when the file
    /// changes.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        env = "TOLLGATE_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM): mutual TLS.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca, also require the client certificate to name this DNS name, as
    /// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN.
    #[arg(
        long,
        env = "TOLLGATE_TLS_CLIENT_SAN",
        value_name = "NAME",
        requires = "tls_client_ca"
    )]
    pub tls_client_san: Option<String>,
    /// The listeners served over TLS, comma-separated: `http`, `grpc`, `admin` (all by
    /// default; envoyproxy/ratelimit's GRPC_SERVER_USE_TLS is `grpc` alone).
    #[arg(
        long,
        env = "TOLLGATE_TLS_LISTENERS",
        value_enum,
        value_delimiter = ',',
        default_value = "http,grpc,admin",
        value_name = "LISTENERS"
    )]
    pub tls_listeners: Vec<Listener>,
}

/// A listener TLS may be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Listener {
    /// The HTTP API (and the proxy's listener).
    Http,
    /// Envoy's gRPC services.
    Grpc,
    /// The admin API and dashboard.
    Admin,
}

impl TlsFlags {
    /// Whether `listener` is served over TLS, when TLS is on.
    pub fn covers(&self, listener: Listener) -> bool {
        self.tls_listeners.contains(&listener)
    }

    /// The TLS the flags ask for, loaded; `None` without `--tls-cert`.
    pub fn load(&self) -> Result<Option<Tls>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        Tls::load(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
            client_san: self.tls_client_san.clone(),
        })
        .map(Some)
    }
}
