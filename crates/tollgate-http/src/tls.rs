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

/// The listeners' TLS settings as last loaded; cheap to clone.
#[derive(Clone)]
pub struct Tls {
    files: TlsFiles,
    current: Arc<ArcSwap<ServerConfig>>,
}

/// The files TLS is loaded from, and the name client certificates must carry.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// The CAs client certificates must be signed by (PEM): mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`, the DNS name client certificates must also name.
    pub client_san: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// TLS loaded from `files`.
    pub fn load(files: TlsFiles) -> Result<Self, String> {
        let config = files.load()?;
        Ok(Self {
            files,
            current: Arc::new(ArcSwap::from_pointee(config)),
        })
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
