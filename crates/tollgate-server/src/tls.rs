//! TLS on Tollgate's own listeners: a certificate and key, optionally client certificates
//! required and checked against a CA (mutual TLS, as service meshes use), reloaded when the
//! files change or on SIGHUP without dropping a connection. rustls with the ring provider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

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
}

/// The listeners' TLS settings as last loaded; cheap to clone.
#[derive(Clone)]
pub struct Tls {
    files: TlsFiles,
    current: Arc<ArcSwap<ServerConfig>>,
}

#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    client_san: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// The TLS the flags ask for, loaded; `None` without `--tls-cert`.
    pub fn from_flags(flags: &TlsFlags) -> Result<Option<Self>, String> {
        let (Some(cert), Some(key)) = (&flags.tls_cert, &flags.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: flags.tls_client_ca.clone(),
            client_san: flags.tls_client_san.clone(),
        };
        let config = files.load()?;
        Ok(Some(Self {
            files,
            current: Arc::new(ArcSwap::from_pointee(config)),
        }))
    }

    /// An acceptor with the settings in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }

    /// Loads the files again; on an error the settings in force stay.
    pub fn reload(&self) -> Result<(), String> {
        self.current.store(Arc::new(self.files.load()?));
        Ok(())
    }

    /// The files, to watch for changes.
    pub fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.files.cert.as_path(), self.files.key.as_path()];
        paths.extend(self.files.client_ca.as_deref());
        paths
    }
}

impl TlsFiles {
    fn load(&self) -> Result<ServerConfig, String> {
        let chain = tollgate::pem::certificates(&self.cert, "--tls-cert")?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|error| format!("--tls-key {}: {error}", self.key.display()))?;
        let builder = ServerConfig::builder();
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let roots = tollgate::pem::root_store(path, "--tls-client-ca")?;
                let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
                    .build()
                    .map_err(|error| format!("--tls-client-ca {}: {error}", path.display()))?;
                match &self.client_san {
                    None => builder.with_client_cert_verifier(verifier),
                    Some(name) => builder.with_client_cert_verifier(Arc::new(
                        crate::tls_client_name::NamedClients::new(verifier, name)?,
                    )),
                }
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|error| {
            format!(
                "--tls-cert {} with --tls-key {}: {error}",
                self.cert.display(),
                self.key.display()
            )
        })?;
        // HTTP/2 first (gRPC needs it), HTTP/1.1 for everyone else.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}
