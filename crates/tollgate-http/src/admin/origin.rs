//! Who may talk to the admin listener at all, before any token is looked at: a web page in the
//! operator's browser must not be able to use it.
//!
//! - The `Host` (or HTTP/2 `:authority`) must name the listener: the address it is bound to,
//!   the address the connection reached, `localhost`, `127.0.0.1` or `[::1]` with the
//!   listener's port, or a name given with `--admin-host`. A page that rebinds its own DNS name
//!   to 127.0.0.1 sends its own name, and is refused (`421`).
//! - An `Origin`, when a browser sends one, must name one of those too (`403`): only the
//!   dashboard's own page calls the API from a browser.
//! - No CORS: a preflight (`OPTIONS`) is refused and no `Access-Control-*` header is ever sent.
//! - A call that is not `GET` or `HEAD` must be `Content-Type: application/json` (or, for JSON
//!   lines, `application/jsonl`) (`415`), which a page on another site cannot send without a
//!   preflight; a form's `text/plain` cannot reset a key or lift a penalty.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::http_server::LocalAddr;

/// The longest name `--admin-host` takes (a DNS name is at most 253 bytes, plus a port).
const MAX_NAME_BYTES: usize = 260;

/// The addresses and names the admin listener answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    bound: SocketAddr,
    /// `--admin-host` names, each with its port if it gave one.
    names: Vec<(String, Option<u16>)>,
}

/// A `Host` value split into its name (lowercase, IPv6 without brackets) and its port, if it
/// says one.
fn split(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim();
    if host.len() > MAX_NAME_BYTES {
        return None;
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        match after {
            "" => (name, None),
            _ => (name, Some(after.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse().ok()?),
        None => None,
    };
    if name.is_empty() {
        return None;
    }
    Some((name.to_ascii_lowercase(), port))
}

impl AllowedHosts {
    /// The listener bound at `bound`, plus `names` (`admin.example.com`, with or without a
    /// port; without one, the name alone and the name with the listener's port both match).
    /// A name that is not a host name is an error.
    pub fn new(bound: SocketAddr, names: &[String]) -> Result<Self, String> {
        let names = names
            .iter()
            .map(|name| {
                split(name).ok_or_else(|| {
                    format!("--admin-host {name:?}: expected a host name, optionally with :PORT")
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { bound, names })
    }

    /// Whether `host` (a `Host` header or an authority) names this listener, reached at `local`.
    fn allows(&self, host: &str, local: Option<SocketAddr>) -> bool {
        let Some((name, port)) = split(host) else {
            return false;
        };
        // A browser leaves out port 80.
        let effective_port = port.unwrap_or(80);
        let ip = name.parse::<std::net::IpAddr>().ok();
        if let Some(ip) = ip {
            let address = SocketAddr::new(ip, effective_port);
            if address == self.bound || Some(address) == local {
                return true;
            }
        }
        let own_port = effective_port == self.bound.port();
        let loopback = name == "localhost" || ip.is_some_and(|ip| ip.is_loopback());
        if own_port && loopback {
            return true;
        }
        self.names.iter().any(|(allowed, allowed_port)| {
            *allowed == name
                && match allowed_port {
                    Some(allowed_port) => port == Some(*allowed_port),
                    None => port.is_none() || own_port,
                }
        })
    }
}

fn refuse(status: StatusCode, detail: &str) -> Response {
    ApiError {
        status,
        detail: detail.to_owned(),
    }
    .into_response()
}

/// Whether a `Content-Type` value is JSON or JSON lines (`application/json`,
/// `application/jsonl`, `application/x-ndjson`; any parameters): none of them a type a page may
/// send to another site without a preflight.
fn is_json(value: &str) -> bool {
    value.split(';').next().is_some_and(|essence| {
        [
            "application/json",
            "application/jsonl",
            "application/x-ndjson",
        ]
        .iter()
        .any(|json| essence.trim().eq_ignore_ascii_case(json))
    })
}

/// Refuses requests a web page on another site could have made, before anything else runs.
pub(super) async fn same_site_only(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let local = request.extensions().get::<LocalAddr>().map(|local| local.0);
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        });
    if !host.is_some_and(|host| allowed.allows(&host, local)) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "the admin API answers only to its own address (the Host header must be the \
             listener's address, localhost:PORT, 127.0.0.1:PORT, [::1]:PORT, or a name given \
             with --admin-host)",
        );
    }
    if request.method() == Method::OPTIONS {
        return refuse(
            StatusCode::FORBIDDEN,
            "the admin API does not serve cross-origin requests",
        );
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let authority = origin
            .to_str()
            .ok()
            .and_then(|origin| {
                origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"))
            })
            .filter(|authority| !authority.contains('/'));
        if !authority.is_some_and(|authority| allowed.allows(authority, local)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "the admin API does not serve cross-origin requests",
            );
        }
    }
    let reads = request.method() == Method::GET || request.method() == Method::HEAD;
    if !reads {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(is_json);
        if !json {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "admin calls that change state take Content-Type: application/json (application/jsonl for JSON lines)",
            );
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(bound: &str, names: &[&str]) -> AllowedHosts {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        AllowedHosts::new(bound.parse().unwrap(), &names).unwrap()
    }

    #[test]
    fn the_listener_answers_to_its_own_addresses_only() {
        let loopback = hosts("127.0.0.1:9090", &[]);
        for host in [
            "127.0.0.1:9090",
            "localhost:9090",
            "LOCALHOST:9090",
            "[::1]:9090",
        ] {
            assert!(loopback.allows(host, None), "{host}");
        }
        for host in [
            "evil.example:9090",
            "evil.example",
            "127.0.0.1:9091",
            "localhost",
            "localhost.evil.example:9090",
            "127.0.0.1",
            "",
            "[::1",
            "a:b:c",
        ] {
            assert!(!loopback.allows(host, None), "{host}");
        }
        let wildcard = hosts("0.0.0.0:9090", &[]);
        let reached: SocketAddr = "192.0.2.4:9090".parse().unwrap();
        assert!(wildcard.allows("192.0.2.4:9090", Some(reached)));
        assert!(!wildcard.allows("192.0.2.5:9090", Some(reached)));
    }

    #[test]
    fn configured_names_match_with_the_listeners_port_or_their_own() {
        let named = hosts("127.0.0.1:9090", &["Admin.Internal", "ops.example:8443"]);
        assert!(named.allows("admin.internal", None));
        assert!(named.allows("admin.internal:9090", None));
        assert!(!named.allows("admin.internal:9999", None));
        assert!(named.allows("ops.example:8443", None));
        assert!(!named.allows("ops.example", None));
        assert!(!named.allows("ops.example:9090", None));
        assert!(AllowedHosts::new("127.0.0.1:9090".parse().unwrap(), &["a:b".to_owned()]).is_err());
    }

    #[test]
    fn json_is_json_whatever_its_parameters() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/json-seq"));
        assert!(!is_json("application/x-www-form-urlencoded"));
    }
}
