//! The connection to the management server: TCP, then, with TLS, rustls on ring verifying the
//! server against the system's CAs and --rls-xds-ca (as envoyproxy/ratelimit adds its CA file
//! to the system pool), presenting the client certificate, offering only HTTP/2 by ALPN.
//! Certificate files are read again at every connection, so renewed ones are picked up.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Channel, Endpoint};

use super::flags::{XdsFlags, XdsServer};

/// How long reaching the server (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on a quiet stream notice a server that vanished without closing it; grpc-go
/// servers (go-control-plane's, Envoy Gateway's) refuse pings more often than every 5 minutes
/// by default, so they come a little less often.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(330);
/// How long a ping may wait for its answer.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Opens connections to the management server.
#[derive(Debug)]
pub(crate) struct Connector {
    server: XdsServer,
    tls: Option<TlsFiles>,
}

/// The TLS settings, as files.
#[derive(Debug)]
struct TlsFiles {
    ca: Option<PathBuf>,
    client: Option<(PathBuf, PathBuf)>,
    server_name: ServerName<'static>,
}

/// A connection, with or without TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl Connector {
    /// A connector for the flags' server; the TLS files are read once now, so that a missing
    /// or malformed one stops the start with its error.
    pub(crate) fn new(flags: &XdsFlags, server: &XdsServer) -> Result<Self, String> {
        let tls = if flags.tls() {
            let name = flags
                .rls_xds_server_name
                .clone()
                .unwrap_or_else(|| server.host().to_owned());
            let server_name = ServerName::try_from(name.clone())
                .map_err(|_| format!("{name:?} is not a DNS name or IP address for TLS"))?;
            let files = TlsFiles {
                ca: flags.rls_xds_ca.clone(),
                client: flags
                    .rls_xds_client_cert
                    .clone()
                    .zip(flags.rls_xds_client_key.clone()),
                server_name,
            };
            files.client_config()?;
            Some(files)
        } else {
            None
        };
        Ok(Self {
            server: server.clone(),
            tls,
        })
    }

    /// A new HTTP/2 connection to the server, or why there is none.
    pub(crate) async fn connect(&self) -> Result<Channel, String> {
        let endpoint = Endpoint::from_shared(format!("http://{}", self.server.authority))
            .map_err(|error| error_chain(&error))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        let tls = match &self.tls {
            Some(files) => Some((
                tokio_rustls::TlsConnector::from(Arc::new(files.client_config()?)),
                files.server_name.clone(),
            )),
            None => None,
        };
        let authority = self.server.authority.clone();
        // Every URI the channel asks for is the server's: the connector ignores it.
        let connector = tower::service_fn(move |_: http::Uri| {
            let (authority, tls) = (authority.clone(), tls.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect(authority.as_str()).await?;
                tcp.set_nodelay(true)?;
                let io: Box<dyn Io> = match tls {
                    Some((connector, name)) => Box::new(connector.connect(name, tcp).await?),
                    None => Box::new(tcp),
                };
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(io))
            }
        });
        endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|error| error_chain(&error))
    }
}

impl TlsFiles {
    fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let mut roots = match &self.ca {
            Some(path) => tollgate::pem::root_store(path, "--rls-xds-ca")?,
            None => rustls::RootCertStore::empty(),
        };
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if roots.is_empty() {
            return Err(
                "no CA certificates to verify the xDS management server with: this machine \
                 has none, give --rls-xds-ca"
                    .to_owned(),
            );
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_root_certificates(roots);
        let mut config = match &self.client {
            Some((cert, key)) => {
                let chain = tollgate::pem::certificates(cert, "--rls-xds-client-cert")?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|error| format!("--rls-xds-client-key {}: {error}", key.display()))?;
                builder.with_client_auth_cert(chain, key).map_err(|error| {
                    format!(
                        "--rls-xds-client-cert {} with --rls-xds-client-key: {error}",
                        cert.display()
                    )
                })?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// An error and its causes, `outer: inner: ...`, each said once.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}
