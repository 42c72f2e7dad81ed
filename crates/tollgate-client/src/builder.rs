//! Building a [`TollgateClient`] with connections of its own: a timeout, and TLS settings.

use std::time::Duration;

use crate::api::base_url;
use crate::{ClientError, TollgateClient};

/// How long a call may take unless [`TollgateClientBuilder::timeout`] says otherwise: a check
/// stands in front of other work, so a server that does not answer should be noticed soon.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings for a [`TollgateClient`]; [`build`](Self::build) checks them all at once.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # #[cfg(feature = "rustls")] {
/// let client = tollgate_client::TollgateClient::builder("https://tollgate.internal:8080")
///     .ca_pem(std::fs::read("/etc/tollgate/ca.pem")?)
///     .timeout(std::time::Duration::from_millis(500))
///     .build()?;
/// # }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TollgateClientBuilder {
    base: String,
    timeout: Duration,
    #[cfg(feature = "rustls")]
    tls: crate::tls::TlsSettings,
}

impl TollgateClientBuilder {
    pub(crate) fn new(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            #[cfg(feature = "rustls")]
            tls: crate::tls::TlsSettings::default(),
        }
    }

    /// How long each call may take, connecting included. Default [`DEFAULT_TIMEOUT`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Verifies the server by the CA certificates in `pem` (one or several) instead of the
    /// system's: for a server whose certificate a private CA signed. May be called again to
    /// trust more.
    #[cfg(feature = "rustls")]
    pub fn ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.tls.cas.push(pem.as_ref().to_vec());
        self
    }

    /// Presents the certificate chain `certificate_pem` (the client's certificate first) with
    /// its private key, for a server that requires client certificates (mutual TLS).
    #[cfg(feature = "rustls")]
    pub fn identity_pem(
        mut self,
        certificate_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Self {
        self.tls.identity = Some((certificate_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// The client. Fails on a URL that is not `http://` or `https://`, on TLS settings that
    /// cannot be used (certificates that do not parse, TLS settings for an `http://` URL), and,
    /// without the `rustls` feature, on an `https://` URL.
    pub fn build(self) -> Result<TollgateClient, ClientError> {
        let (url, _) = base_url(&self.base)?;
        let https = url.scheme() == "https";
        let builder = reqwest::Client::builder()
            .timeout(self.timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true);
        #[cfg(feature = "rustls")]
        let builder = {
            if !https && self.tls.is_set() {
                return Err(ClientError::Tls(format!(
                    "TLS settings are given for {}, which is not an https:// URL",
                    self.base
                )));
            }
            // Given ready-made, for http:// too: reqwest would otherwise look for a process-wide
            // crypto provider when it builds the client.
            builder.tls_backend_preconfigured(self.tls.client_config(https)?)
        };
        #[cfg(not(feature = "rustls"))]
        if https {
            return Err(ClientError::Url {
                url: self.base,
                reason: "https:// needs tollgate-client's `rustls` feature, or a reqwest::Client \
                         of your own that speaks TLS (TollgateClient::with_http_client)"
                    .to_owned(),
            });
        }
        let http = builder.build().map_err(ClientError::Transport)?;
        TollgateClient::with_http_client(&self.base, http)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reqwest client of the caller's own (with the `rustls` feature, reqwest has no crypto
    /// provider of its own and is given its TLS settings).
    fn plain_reqwest() -> reqwest::Client {
        let builder = reqwest::Client::builder();
        #[cfg(feature = "rustls")]
        let builder = builder.tls_backend_preconfigured(
            crate::tls::TlsSettings::default()
                .client_config(false)
                .expect("TLS settings"),
        );
        builder.build().expect("a reqwest client")
    }

    #[test]
    fn urls_that_are_not_http_are_refused() {
        for base in ["ftp://example.com", "not a url", ""] {
            let error = TollgateClient::builder(base).build().unwrap_err();
            assert!(matches!(error, ClientError::Url { .. }), "{base}: {error}");
        }
        let error =
            TollgateClient::with_http_client("localhost:8080", plain_reqwest()).unwrap_err();
        assert!(matches!(error, ClientError::Url { .. }), "{error}");
    }

    #[cfg(not(feature = "rustls"))]
    #[test]
    fn https_without_the_rustls_feature_says_what_to_do() {
        let error = TollgateClient::builder("https://127.0.0.1:8080")
            .build()
            .unwrap_err();
        assert!(error.to_string().contains("`rustls` feature"), "{error}");
    }

    #[cfg(feature = "rustls")]
    mod tls {
        use super::*;

        const NOT_PEM: &[u8] = b"this is not a certificate";

        fn tls_error(builder: TollgateClientBuilder) -> String {
            match builder.build() {
                Err(ClientError::Tls(reason)) => reason,
                other => panic!("expected a TLS error, got {other:?}"),
            }
        }

        #[test]
        fn a_ca_that_is_not_pem_is_an_error_not_a_panic() {
            let reason = tls_error(TollgateClient::builder("https://127.0.0.1:1").ca_pem(NOT_PEM));
            assert!(reason.starts_with("the CA: no certificate"), "{reason}");
            let reason = tls_error(
                TollgateClient::builder("https://127.0.0.1:1").ca_pem(
                    "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
                ),
            );
            assert!(reason.starts_with("the CA: "), "{reason}");
        }

        #[test]
        fn a_client_certificate_without_a_usable_key_is_an_error() {
            let reason = tls_error(
                TollgateClient::builder("https://127.0.0.1:1").identity_pem(NOT_PEM, NOT_PEM),
            );
            assert!(reason.starts_with("the client certificate: "), "{reason}");
        }

        #[test]
        fn tls_settings_for_a_plain_url_are_refused() {
            let reason = tls_error(TollgateClient::builder("http://127.0.0.1:1").ca_pem(NOT_PEM));
            assert!(reason.contains("not an https:// URL"), "{reason}");
        }

        #[test]
        fn a_plain_url_needs_no_process_wide_crypto_provider() {
            // reqwest without a provider of its own panics when it builds a client unless it
            // is handed its TLS settings; this client hands them over.
            assert!(
                TollgateClient::builder("http://127.0.0.1:1")
                    .build()
                    .is_ok()
            );
        }

        #[test]
        fn the_key_is_never_shown() {
            let builder = TollgateClient::builder("https://127.0.0.1:1")
                .identity_pem("CERTIFICATE", "-----BEGIN PRIVATE KEY-----secret");
            let shown = format!("{builder:?}");
            assert!(!shown.contains("secret"), "{shown}");
        }
    }
}
