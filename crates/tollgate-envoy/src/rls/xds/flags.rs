//! `--rls-xds-*`: which management server to subscribe to and as which node, how to reach it
//! (TLS, extra metadata), how to retry, and whether the listeners wait for the first
//! configuration. The meaning is envoyproxy/ratelimit's CONFIG_GRPC_XDS_*, XDS_CLIENT_* and
//! FORCE_START_WITHOUT_INITIAL_CONFIG settings.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

/// The largest `--rls-xds-max-message-bytes` accepted.
pub const MAX_MESSAGE_BYTES: u32 = 256 << 20;

/// Where the rate limit service's configuration comes from when it is pushed over xDS.
#[derive(Debug, Clone, clap::Args)]
pub struct XdsFlags {
    /// Take the rate limit service's configuration from this xDS management server over ADS,
    /// state of the world (`host:port`; `https://host:port` for TLS), as
    /// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW with CONFIG_GRPC_XDS_SERVER_URL:
    /// Envoy Gateway pushes its limits so.
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_SERVER",
        value_name = "URL",
        value_parser = XdsServer::parse,
        conflicts_with = "rls_config"
    )]
    pub rls_xds_server: Option<XdsServer>,
    /// The node id to subscribe as: the server keeps a configuration per node id (Envoy
    /// Gateway's is `envoy-ratelimit`).
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_NODE_ID",
        default_value = "default",
        value_name = "ID"
    )]
    pub rls_xds_node_id: String,
    /// The node's metadata, `key=value` pairs separated by commas (string values).
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_NODE_METADATA",
        value_delimiter = ',',
        value_parser = node_metadata,
        value_name = "KEY=VALUE"
    )]
    pub rls_xds_node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent on the xDS stream, `name:value` (repeat the flag, or separate pairs
    /// by commas); values, which may be credentials, are never logged.
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_HEADER",
        value_delimiter = ',',
        value_parser = header,
        value_name = "NAME:VALUE"
    )]
    pub rls_xds_header: Vec<XdsHeader>,
    /// Reach the management server over TLS (also meant by an `https://` server), verifying
    /// it against the system's CAs and --rls-xds-ca.
    #[arg(long, env = "TOLLGATE_RLS_XDS_TLS")]
    pub rls_xds_tls: bool,
    /// CA certificates (PEM) that verify the management server, besides the system's.
    #[arg(long, env = "TOLLGATE_RLS_XDS_CA", value_name = "FILE")]
    pub rls_xds_ca: Option<PathBuf>,
    /// A client certificate chain (PEM) to present to the management server (Envoy Gateway's
    /// requires one).
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_CLIENT_CERT",
        value_name = "FILE",
        requires = "rls_xds_client_key"
    )]
    pub rls_xds_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "TOLLGATE_RLS_XDS_CLIENT_KEY",
        value_name = "FILE",
        requires = "rls_xds_client_cert"
    )]
    pub rls_xds_client_key: Option<PathBuf>,
    /// The name the management server's certificate must hold (and the TLS server name
    /// sent), instead of the server address's host.
    #[arg(long, env = "TOLLGATE_RLS_XDS_SERVER_NAME", value_name = "NAME")]
    pub rls_xds_server_name: Option<String>,
    /// The first wait before reconnecting to a management server that went away or could not
    /// be reached; each further attempt waits up to twice as long.
    #[arg(long, env = "TOLLGATE_RLS_XDS_BACKOFF_INITIAL", default_value = "10s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub rls_xds_backoff_initial: Duration,
    /// The longest wait between reconnection attempts.
    #[arg(long, env = "TOLLGATE_RLS_XDS_BACKOFF_MAX", default_value = "60s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub rls_xds_backoff_max: Duration,
    /// Spread the waits at random between the first wait and the doubled one, so that many
    /// instances do not reconnect at once.
    #[arg(long, env = "TOLLGATE_RLS_XDS_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub rls_xds_backoff_jitter: bool,
    /// The largest message taken from the management server, in bytes (gRPC's 4 MiB by
    /// default); a larger one breaks the stream, which is then opened again.
    #[arg(long, env = "TOLLGATE_RLS_XDS_MAX_MESSAGE_BYTES", default_value_t = 4 << 20, value_parser = clap::value_parser!(u32).range(1024..=i64::from(MAX_MESSAGE_BYTES)).map(|n| n as usize), value_name = "BYTES")]
    pub rls_xds_max_message_bytes: usize,
    /// Open the listeners at once instead of once the first configuration is in force, as
    /// envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG (which Envoy Gateway sets);
    /// until a configuration arrives, requests are answered UNAVAILABLE ("no rate limit
    /// configuration loaded"), and Envoy's failure mode decides, as upstream.
    #[arg(long, env = "TOLLGATE_RLS_XDS_START_WITHOUT_CONFIG")]
    pub rls_xds_start_without_config: bool,
}

impl XdsFlags {
    /// Whether TLS is asked for: by --rls-xds-tls or an `https://` server.
    pub(crate) fn tls(&self) -> bool {
        self.rls_xds_tls || self.rls_xds_server.as_ref().is_some_and(|s| s.https)
    }

    /// The problems clap cannot see or should not report: TLS files without TLS, a malformed
    /// header, backoff bounds out of order.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.tls() {
            let given = [
                ("--rls-xds-ca", self.rls_xds_ca.is_some()),
                ("--rls-xds-client-cert", self.rls_xds_client_cert.is_some()),
                ("--rls-xds-server-name", self.rls_xds_server_name.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
                return Err(format!(
                    "{flag} is for TLS: add --rls-xds-tls (or give an https:// server)"
                ));
            }
        }
        if let Some(why) = self.rls_xds_header.iter().find_map(|h| h.entry().err()) {
            return Err(why.to_owned());
        }
        if self.rls_xds_backoff_initial.is_zero() {
            return Err("--rls-xds-backoff-initial must be longer than zero".to_owned());
        }
        if self.rls_xds_backoff_max < self.rls_xds_backoff_initial {
            return Err(format!(
                "--rls-xds-backoff-max ({:?}) is shorter than --rls-xds-backoff-initial ({:?})",
                self.rls_xds_backoff_max, self.rls_xds_backoff_initial
            ));
        }
        Ok(())
    }
}

/// The management server's address: `host:port`, optionally after `http://`, `https://`
/// (which asks for TLS) or grpc-go's `dns:///`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsServer {
    /// `host:port`, the host a name, an IPv4 address or a bracketed IPv6 address.
    pub(crate) authority: http::uri::Authority,
    /// Given as `https://`.
    pub(crate) https: bool,
}

impl XdsServer {
    /// Parses an address as --rls-xds-server takes it (also for CONFIG_GRPC_XDS_SERVER_URL).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (rest, https) = match text.split_once("://") {
            Some(("https", rest)) => (rest, true),
            Some(("http", rest)) => (rest, false),
            Some(("dns", rest)) => (rest.trim_start_matches('/'), false),
            Some((scheme, _)) => {
                return Err(format!(
                    "{text:?}: {scheme}:// is none of http://, https:// or dns:///"
                ));
            }
            None => (text, false),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let authority: http::uri::Authority = rest
            .parse()
            .map_err(|_| format!("{text:?} is not HOST:PORT"))?;
        if authority.port_u16().is_none() || authority.host().is_empty() || rest.contains('@') {
            return Err(format!("{text:?} is not HOST:PORT (the port is needed)"));
        }
        Ok(Self { authority, https })
    }

    /// The host without an IPv6 address's brackets: the name the certificate must hold.
    pub(crate) fn host(&self) -> &str {
        self.authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
    }
}

impl std::fmt::Display for XdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https://" } else { "" };
        write!(f, "{scheme}{}", self.authority)
    }
}

/// One `key=value` of --rls-xds-node-metadata.
fn node_metadata(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// One gRPC metadata entry for the xDS stream; its value is marked sensitive, so that it is
/// neither printed nor kept in HTTP/2's header tables. A malformed one is kept with why, and
/// refused by [`subscribe`](super::subscribe): clap's own error would quote the value, which
/// may be a credential.
#[derive(Clone)]
pub struct XdsHeader(Result<(AsciiMetadataKey, AsciiMetadataValue), String>);

impl XdsHeader {
    /// A `name:value` as --rls-xds-header takes it; a malformed one is kept with why.
    pub fn parse(text: &str) -> Self {
        Self(parse_header(text))
    }

    /// The name and value, or why the flag is malformed.
    pub fn entry(&self) -> Result<(&AsciiMetadataKey, &AsciiMetadataValue), &str> {
        match &self.0 {
            Ok((name, value)) => Ok((name, value)),
            Err(why) => Err(why),
        }
    }
}

impl std::fmt::Debug for XdsHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok((name, _)) => write!(f, "{name}: <not shown>"),
            Err(why) => write!(f, "<malformed: {why}>"),
        }
    }
}

/// One `name:value` of --rls-xds-header; never fails (see [`XdsHeader`]).
fn header(text: &str) -> Result<XdsHeader, String> {
    Ok(XdsHeader::parse(text))
}

fn parse_header(text: &str) -> Result<(AsciiMetadataKey, AsciiMetadataValue), String> {
    // Nothing of the value is quoted back.
    let Some((name, value)) = text.split_once(':') else {
        return Err("--rls-xds-header: a header is NAME:VALUE".to_owned());
    };
    let name = name.trim();
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("grpc-") || matches!(lower.as_str(), "content-type" | "te") {
        return Err(format!("--rls-xds-header: {name:?} is gRPC's own header"));
    }
    let name = AsciiMetadataKey::from_bytes(name.as_bytes()).map_err(|_| {
        format!("--rls-xds-header: {name:?} is not a gRPC metadata name (nor a binary -bin one)")
    })?;
    let mut value = AsciiMetadataValue::try_from(value.trim()).map_err(|_| {
        format!("--rls-xds-header: the value of {name} holds characters other than visible ASCII")
    })?;
    value.set_sensitive(true);
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_take_the_forms_grpc_users_write() {
        let parsed = |text: &str| XdsServer::parse(text).map(|s| (s.to_string(), s.https));
        assert_eq!(
            parsed("envoy-gateway:18001"),
            Ok(("envoy-gateway:18001".into(), false))
        );
        assert_eq!(
            parsed("https://xds.example:443/"),
            Ok(("https://xds.example:443".into(), true))
        );
        assert_eq!(parsed("dns:///xds:18000"), Ok(("xds:18000".into(), false)));
        assert_eq!(
            XdsServer::parse("[::1]:18000").map(|s| s.host().to_owned()),
            Ok("::1".into())
        );
        for bad in [
            "xds",
            "xds:",
            ":18000",
            "ftp://xds:1",
            "user@xds:1",
            "xds:1/path",
        ] {
            assert!(XdsServer::parse(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn header_values_are_never_shown() {
        let parsed = parse_header("Authorization: Bearer s3cret").expect("a header");
        assert_eq!(parsed.0.as_str(), "authorization");
        let flag = header("Authorization: Bearer s3cret").expect("kept");
        assert!(!format!("{flag:?}").contains("s3cret"));
        for bad in ["x-token: s3cret\u{7}", "no-colon s3cret"] {
            let error = parse_header(bad).expect_err("refused");
            assert!(!error.contains("s3cret"), "{error}");
            let flag = header(bad).expect("kept, to be refused by check");
            assert!(!format!("{flag:?}").contains("s3cret"));
        }
        assert!(parse_header("grpc-timeout:1S").is_err());
        assert!(parse_header("x-data-bin:AAAA").is_err());
    }

    #[test]
    fn node_metadata_needs_a_key_and_keeps_equals_in_values() {
        assert_eq!(node_metadata("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(node_metadata("a:b").is_err());
        assert!(node_metadata("=b").is_err());
    }
}
