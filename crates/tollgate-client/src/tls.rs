//! TLS for the client's own connections (the `rustls` feature): rustls with the ring provider,
//! given to reqwest ready-made, so that no process-wide crypto provider has to be installed and
//! none is replaced.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::ClientError;

/// The CAs to verify the server with and the certificate to present, as PEM.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// PEM texts holding CA certificates; none means the system's CAs.
    pub(crate) cas: Vec<Vec<u8>>,
    /// A certificate chain and its private key, for servers that require client certificates.
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// The key is never shown.
impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("cas", &self.cas.len())
            .field("identity", &self.identity.as_ref().map(|_| "set"))
            .finish()
    }
}

impl TlsSettings {
    /// Whether anything was set (which an `http://` URL would never use).
    pub(crate) fn is_set(&self) -> bool {
        !self.cas.is_empty() || self.identity.is_some()
    }

    /// The rustls configuration for a server reached by `https` (or, with `https` false, one
    /// that is never used to verify anything: reqwest builds one for every client).
    pub(crate) fn client_config(&self, https: bool) -> Result<rustls::ClientConfig, ClientError> {
        let roots = match (self.cas.is_empty(), https) {
            (false, _) => self.own_roots()?,
            (true, true) => system_roots()?,
            (true, false) => rustls::RootCertStore::empty(),
        };
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| ClientError::Tls(error.to_string()))?
        .with_root_certificates(roots);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some((chain, key)) => {
                let chain = certificates(chain, "the client certificate")?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| {
                    ClientError::Tls(format!("the client certificate's key: {error}"))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|error| {
                    ClientError::Tls(format!(
                        "the client certificate and key do not go together: {error}"
                    ))
                })
            }
        }
    }

    fn own_roots(&self) -> Result<rustls::RootCertStore, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        for pem in &self.cas {
            for certificate in certificates(pem, "the CA")? {
                roots.add(certificate).map_err(|error| match error {
                    rustls::Error::InvalidCertificate(why) => {
                        ClientError::Tls(format!("the CA: not a usable certificate ({why:?})"))
                    }
                    error => ClientError::Tls(format!("the CA: {error}")),
                })?;
            }
        }
        Ok(roots)
    }
}

/// The system's CAs; an error when there are none, since then no server could be verified.
fn system_roots() -> Result<rustls::RootCertStore, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added == 0 {
        return Err(ClientError::Tls(
            "this machine has no CA certificates to verify the server with (install \
             ca-certificates, or give the server's CA with ca_pem)"
                .to_owned(),
        ));
    }
    Ok(roots)
}

/// Every certificate in a PEM text, at least one; `what` names it in errors.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let found = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| ClientError::Tls(format!("{what}: {error}")))?;
    if found.is_empty() {
        return Err(ClientError::Tls(format!(
            "{what}: no certificate in the PEM text (expected -----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(found)
}
