//! Forwarding to the upstream: the request and the response stream through untouched but for
//! the hop-by-hop fields (RFC 9110 §7.6.1), which belong to each connection, and the
//! `X-Forwarded-*` fields, which tell the upstream who asked.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header};
use axum::response::IntoResponse;
use bytes::Bytes;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::api::ApiError;
use crate::http1_pool::Http1Pool;
use crate::proxy_metrics::UpstreamFailure;

/// Where requests go: `http://host:port/base` or `https://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    base_path: String,
}

impl Upstream {
    /// Parses an upstream URL, `http://` or `https://`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|error| format!("--upstream {url:?}: not a URL: {error}"))?;
        let scheme = match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS => scheme.clone(),
            Some(other) => {
                return Err(format!(
                    "--upstream {url:?}: the scheme {other} is not supported; give an http:// or https:// URL"
                ));
            }
            None => {
                return Err(format!(
                    "--upstream {url:?}: give a URL such as http://127.0.0.1:3000"
                ));
            }
        };
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("--upstream {url:?}: the URL has no host"))?;
        if uri.query().is_some() {
            return Err(format!(
                "--upstream {url:?}: a query belongs to requests, not to the upstream"
            ));
        }
        Ok(Self {
            scheme,
            authority,
            base_path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The `Host` field of a request to the upstream over HTTP/1, as the HTTP client would
    /// write it: the host, and the port unless it is the scheme's own.
    fn host_field(&self) -> Option<HeaderValue> {
        let default_port = if self.scheme == Scheme::HTTPS {
            443
        } else {
            80
        };
        let host = self.authority.host();
        let field = match self.authority.port_u16() {
            Some(port) if port != default_port => format!("{host}:{port}"),
            _ => host.to_owned(),
        };
        HeaderValue::from_str(&field).ok()
    }

    /// The path and query a request goes to on the upstream: the base path, then its own.
    fn path_for(
        &self,
        path_and_query: Option<&PathAndQuery>,
    ) -> Result<PathAndQuery, axum::http::Error> {
        Ok(match path_and_query {
            // Without a base path the request's own path and query go as they are.
            Some(path_and_query) if self.base_path.is_empty() => path_and_query.clone(),
            _ => {
                let tail = path_and_query.map_or("/", PathAndQuery::as_str);
                PathAndQuery::try_from(format!("{}{tail}", self.base_path))?
            }
        })
    }

    /// The upstream's URI for a request's path and query.
    fn uri_for(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, axum::http::Error> {
        let mut parts = axum::http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(self.path_for(path_and_query)?);
        Ok(Uri::from_parts(parts)?)
    }

    /// Where to connect for plain HTTP: `host:port`.
    fn address(&self) -> String {
        let port = self.authority.port_u16().unwrap_or(80);
        format!("{}:{port}", self.authority.host())
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// The fields that describe one connection and are never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes the hop-by-hop fields, and those the `Connection` field names. `TE: trailers` is
/// kept when `keep_te_trailers`, as gRPC needs it to reach the upstream.
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_te_trailers: bool) {
    // Most messages carry none of them: one look at the names, and nothing else to do.
    if !headers
        .keys()
        .any(|name| name == header::TE || HOP_BY_HOP.contains(name))
    {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    let te_trailers = headers
        .get(header::TE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case("trailers"))
        });
    headers.remove(header::TE);
    if keep_te_trailers && te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Appends the client to `X-Forwarded-For` and records the original host and scheme (`https`
/// when the client reached the proxy over TLS).
fn add_forwarded(
    headers: &mut HeaderMap,
    peer: Option<SocketAddr>,
    original_host: Option<HeaderValue>,
    tls: bool,
) {
    if let Some(peer) = peer {
        let mut chain = String::with_capacity(64);
        if let Some(earlier) = headers
            .get(X_FORWARDED_FOR)
            .and_then(|v| v.to_str().ok())
            .filter(|earlier| !earlier.trim().is_empty())
        {
            chain.push_str(earlier);
            chain.push_str(", ");
        }
        push_ip(&mut chain, peer.ip().to_canonical());
        if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(chain)) {
            headers.insert(X_FORWARDED_FOR, value);
        }
    }
    if let Some(host) = original_host {
        headers.insert(X_FORWARDED_HOST, host);
    }
    let proto = if tls { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
}

/// Writes `ip` as `Display` does; an IPv4 address (most clients) without `fmt`, which costs
/// about a thousand instructions a request for four numbers.
fn push_ip(text: &mut String, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (index, octet) in v4.octets().into_iter().enumerate() {
                if index > 0 {
                    text.push('.');
                }
                text.push_str(itoa::Buffer::new().format(octet));
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(text, "{v6}");
        }
    }
}

/// How the proxy speaks to its upstream, and what it tells it.
#[derive(Debug, Clone)]
pub struct ForwardSettings {
    /// How long the upstream has to connect and send its response head.
    pub timeout: Duration,
    /// Speak HTTP/2 without upgrade (for gRPC upstreams).
    pub http2: bool,
    /// For an `https://` upstream: the CAs (PEM) to verify it with instead of the system's.
    pub upstream_ca: Option<std::path::PathBuf>,
    /// Whether clients reach the proxy over TLS (`X-Forwarded-Proto: https`).
    pub listener_tls: bool,
    /// How many worker threads serve the proxy's connections
    /// ([`crate::http_server::Workers`]; 1 on the shared runtime): idle connections to a
    /// plain `http://` upstream are kept per thread.
    pub worker_threads: usize,
}

/// The TLS client settings for the upstream: its CA file's certificates, else the system's
/// (read only for an `https://` upstream).
fn upstream_tls(
    upstream: &Upstream,
    ca: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, String> {
    let roots = match ca {
        Some(path) => tollgate::pem::root_store(path, "--upstream-ca")?,
        None if upstream.scheme == Scheme::HTTPS => {
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                return Err(format!(
                    "--upstream {upstream}: this machine has no CA certificates to verify it \
                     with (install ca-certificates, or give --upstream-ca)"
                ));
            }
            roots
        }
        None => rustls::RootCertStore::empty(),
    };
    Ok(rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// How requests reach the upstream.
#[derive(Debug)]
enum Route {
    /// A plain `http://` upstream without `--upstream-http2`: every connection is HTTP/1, kept
    /// in the proxy's own pool, and the `Host` field is made once.
    Http1 {
        pool: Arc<Http1Pool>,
        host: Option<HeaderValue>,
    },
    /// Over TLS (where ALPN may pick HTTP/2) or HTTP/2: hyper-util's pooled client.
    Client(Box<Client<HttpsConnector<HttpConnector>, Body>>),
}

/// The upstream client and where it sends requests.
#[derive(Debug)]
pub struct Forwarder {
    route: Route,
    upstream: Upstream,
    settings: ForwardSettings,
    metrics: Arc<crate::proxy_metrics::ProxyMetrics>,
}

impl Forwarder {
    /// A forwarder to `upstream`. An `https://` upstream is verified against the system's
    /// roots or `settings.upstream_ca`; an error says why neither can be used.
    pub fn new(
        upstream: Upstream,
        settings: ForwardSettings,
        metrics: Arc<crate::proxy_metrics::ProxyMetrics>,
    ) -> Result<Self, String> {
        let tls = upstream_tls(&upstream, settings.upstream_ca.as_deref())?;
        let route = if upstream.scheme == Scheme::HTTP && !settings.http2 {
            Route::Http1 {
                pool: Http1Pool::new(upstream.address(), settings.worker_threads),
                host: upstream.host_field(),
            }
        } else {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            connector.set_connect_timeout(Some(settings.timeout));
            connector.enforce_http(false);
            let connector = HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .enable_http2()
                .wrap_connector(connector);
            Route::Client(Box::new(
                Client::builder(TokioExecutor::new())
                    .http2_only(settings.http2)
                    .pool_idle_timeout(crate::http1_pool::IDLE_TIMEOUT)
                    .build(connector),
            ))
        };
        Ok(Self {
            route,
            upstream,
            settings,
            metrics,
        })
    }

    /// The request's URI on the upstream in the form its route sends: the origin form on the
    /// proxy's own HTTP/1 connections, the absolute form for hyper-util's client.
    fn target(&self, path_and_query: Option<&PathAndQuery>) -> Result<Uri, axum::http::Error> {
        match &self.route {
            Route::Http1 { .. } => Ok(Uri::from(self.upstream.path_for(path_and_query)?)),
            Route::Client(_) => self.upstream.uri_for(path_and_query),
        }
    }

    /// Sends `parts` and `body` by the forwarder's route.
    async fn send(
        &self,
        mut parts: axum::http::request::Parts,
        body: Body,
    ) -> Result<Response<Body>, Box<dyn std::error::Error + Send + Sync>> {
        match &self.route {
            Route::Http1 { pool, host } => {
                if let Some(host) = host {
                    parts.headers.insert(header::HOST, host.clone());
                }
                parts.version = axum::http::Version::HTTP_11;
                Ok(pool.send(Request::from_parts(parts, body)).await?)
            }
            Route::Client(client) => {
                // The client's version is its connection's business; the upstream's is chosen
                // here.
                parts.version = if self.settings.http2 {
                    axum::http::Version::HTTP_2
                } else {
                    axum::http::Version::HTTP_11
                };
                let response = client.request(Request::from_parts(parts, body)).await?;
                Ok(response.map(Body::new))
            }
        }
    }

    /// Sends `request` upstream and streams the answer back; a failure to reach the upstream
    /// is a `502`, no answer within the timeout a `504`, both as problem details.
    pub async fn forward(self: Arc<Self>, request: Request<Body>) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let target = match self.target(parts.uri.path_and_query()) {
            Ok(uri) => uri,
            Err(error) => {
                return ApiError::bad_request(format!("cannot address the upstream: {error}"))
                    .into_response();
            }
        };
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| *address);
        let original_host = parts.headers.remove(header::HOST).or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        strip_hop_by_hop(&mut parts.headers, true);
        add_forwarded(
            &mut parts.headers,
            peer,
            original_host,
            self.settings.listener_tls,
        );
        parts.uri = target;
        let started = tokio::time::Instant::now();
        let answered = tokio::time::timeout(self.settings.timeout, self.send(parts, body)).await;
        let status = match &answered {
            Ok(Ok(response)) => Ok(response.status().as_u16()),
            Ok(Err(_)) => Err(UpstreamFailure::Error),
            Err(_) => Err(UpstreamFailure::Timeout),
        };
        self.metrics.upstream(status, started.elapsed());
        match answered {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers, false);
                // The client's connection has its own version.
                parts.version = axum::http::Version::HTTP_11;
                Response::from_parts(parts, body)
            }
            Ok(Err(error)) => {
                tracing::warn!(upstream = %self.upstream, "upstream request failed: {error}");
                ApiError {
                    status: StatusCode::BAD_GATEWAY,
                    detail: format!(
                        "the upstream at {} could not be reached: {error}",
                        self.upstream
                    ),
                }
                .into_response()
            }
            Err(_) => ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                detail: format!(
                    "the upstream at {} did not answer within {:?}",
                    self.upstream, self.settings.timeout
                ),
            }
            .into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked_and_joined_with_the_request_path() {
        let upstream = Upstream::parse("http://127.0.0.1:3000/base/").expect("valid");
        let path: PathAndQuery = "/a/b?c=d".parse().expect("valid");
        assert_eq!(
            upstream.uri_for(Some(&path)).expect("builds").to_string(),
            "http://127.0.0.1:3000/base/a/b?c=d"
        );
        assert_eq!(
            Upstream::parse("https://example.com/api")
                .expect("valid")
                .to_string(),
            "https://example.com/api"
        );
        assert!(
            Upstream::parse("ftp://example.com")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(
            Upstream::parse("127.0.0.1:3000")
                .unwrap_err()
                .contains("give a URL")
        );
        assert!(
            Upstream::parse("http://h/?q=1")
                .unwrap_err()
                .contains("query")
        );
    }

    #[test]
    fn the_host_field_carries_the_port_unless_it_is_the_schemes_own() {
        for (url, host) in [
            ("http://127.0.0.1:3000/base", "127.0.0.1:3000"),
            ("http://example.com:80", "example.com"),
            ("http://example.com", "example.com"),
            ("http://[::1]:8080", "[::1]:8080"),
            ("https://example.com:443", "example.com"),
            ("https://example.com:80", "example.com:80"),
        ] {
            let upstream = Upstream::parse(url).expect("valid");
            assert_eq!(upstream.host_field().expect("a field"), host, "{url}");
        }
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut addresses: Vec<std::net::IpAddr> = [0u8, 1, 9, 10, 99, 100, 199, 200, 255]
            .iter()
            .flat_map(|&a| [0u8, 7, 42, 255].map(|b| [a, b, 255 - a, a / 3]))
            .map(std::net::IpAddr::from)
            .collect();
        addresses.push("2001:db8::1".parse().expect("valid"));
        addresses.push("::ffff:10.0.0.1".parse().expect("valid"));
        for address in addresses {
            let mut text = String::from("x, ");
            push_ip(&mut text, address);
            assert_eq!(text, format!("x, {address}"));
        }
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret"),
        );
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::TE, HeaderValue::from_static("trailers, deflate"));
        headers.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers, true);
        let names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-kept", "te"]);
        assert_eq!(headers[header::TE], "trailers");
    }

    #[test]
    fn the_client_is_appended_to_x_forwarded_for() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        let peer: SocketAddr = "[::ffff:203.0.113.7]:5000".parse().expect("valid");
        add_forwarded(
            &mut headers,
            Some(peer),
            Some(HeaderValue::from_static("shop.example")),
            false,
        );
        assert_eq!(headers["x-forwarded-for"], "198.51.100.1, 203.0.113.7");
        assert_eq!(headers["x-forwarded-host"], "shop.example");
        assert_eq!(headers["x-forwarded-proto"], "http");
        add_forwarded(&mut headers, Some(peer), None, true);
        assert_eq!(
            headers["x-forwarded-proto"], "https",
            "the client came over TLS"
        );
    }
}
