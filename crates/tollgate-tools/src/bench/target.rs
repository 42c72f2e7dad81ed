//! What `tollgate-tools bench` drives: the check API, the rate limit service, or plain GETs
//! (through the proxy, or anything else), and how each answer counts.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::RlsClient;

/// Where `{key}` in a body or descriptor becomes a key number.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// Where `{ip}` in a body or descriptor becomes a client address numbered by the key: an IPv6
/// address in a /64 of its own (`2001:db8:0:2a::1` for key 42), so that policies counting by
/// address (which group IPv6 by /64) see a distinct client per key.
pub const IP_PLACEHOLDER: &str = "{ip}";

/// `template` with `{key}` and `{ip}` filled in for key number `key`.
pub fn fill(template: &str, key: u64) -> String {
    let mut text = template.replace(KEY_PLACEHOLDER, &key.to_string());
    if text.contains(IP_PLACEHOLDER) {
        let address = format!("2001:db8:{:x}:{:x}::1", key >> 16, key & 0xffff);
        text = text.replace(IP_PLACEHOLDER, &address);
    }
    text
}

/// The default check: one GCRA limit of 100/s per key.
pub const DEFAULT_CHECK_BODY: &str =
    r#"{"limits":[{"key":"bench:{key}","algorithm":"gcra","quota":"100/s"}]}"#;

/// How one answer counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Admitted (or delayed).
    Allowed,
    /// Refused by a limit.
    Denied,
    /// Not an answer: the connection failed, or an unexpected status.
    Failed(String),
}

/// A prepared target: clients and the requests they cycle through.
#[derive(Debug)]
pub enum Target {
    /// `POST /v1/check` with a body per key.
    Check {
        /// The HTTP client (a pool of keep-alive connections).
        client: Client<HttpConnector, Full<Bytes>>,
        /// The check URL.
        uri: Uri,
        /// One body per key.
        bodies: Vec<Bytes>,
        /// Header fields to send (`{key}` filled in), such as `Prefer: return=minimal`.
        headers: Vec<(HeaderName, String)>,
    },
    /// `GET` a URL; 2xx and 3xx count as allowed, 429 as denied.
    Get {
        /// The HTTP client.
        client: Client<HttpConnector, Full<Bytes>>,
        /// The URL.
        uri: Uri,
        /// Header fields to send, their values with `{key}`.
        headers: Vec<(HeaderName, String)>,
        /// How many keys the header values cycle through.
        keys: u64,
    },
    /// `ShouldRateLimit` with a descriptor per key.
    Grpc(RlsClient),
}

fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

fn parse_uri(text: &str) -> Result<Uri, String> {
    text.parse()
        .map_err(|error| format!("--url {text:?}: not a URL: {error}"))
}

/// `--header` fields, `name: value` with `{key}` in the value.
fn parse_headers(headers: &[String]) -> Result<Vec<(HeaderName, String)>, String> {
    headers
        .iter()
        .map(|field| {
            let (name, value) = field
                .split_once(':')
                .ok_or_else(|| format!("--header {field:?}: expected name: value"))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| format!("--header {field:?}: {name:?} is not a field name"))?;
            HeaderValue::from_str(&fill(value.trim(), 0))
                .map_err(|_| format!("--header {field:?}: not a valid field value"))?;
            Ok((name, value.trim().to_owned()))
        })
        .collect()
}

impl Target {
    /// The check API at `base` (`http://host:port`), with `template` per key and `headers`
    /// (`name: value`, `{key}` in the value).
    pub fn check(
        base: &str,
        template: &str,
        headers: &[String],
        keys: u64,
    ) -> Result<Self, String> {
        serde_json::from_str::<serde_json::Value>(&fill(template, 0))
            .map_err(|error| format!("--body: not JSON: {error}"))?;
        let uri = parse_uri(&format!("{}/v1/check", base.trim_end_matches('/')))?;
        let bodies = (0..keys)
            .map(|key| Bytes::from(fill(template, key)))
            .collect();
        Ok(Self::Check {
            client: http_client(),
            uri,
            bodies,
            headers: parse_headers(headers)?,
        })
    }

    /// Plain `GET`s of `url` with `headers` (`name: value`, `{key}` in the value).
    pub fn get(url: &str, headers: &[String], keys: u64) -> Result<Self, String> {
        Ok(Self::Get {
            client: http_client(),
            uri: parse_uri(url)?,
            headers: parse_headers(headers)?,
            keys,
        })
    }

    /// Sends request number `n` over HTTP (check API and GET targets) and returns the
    /// answer's status and body, for a caller that reads more of it than [`send`](Self::send).
    pub async fn exchange(&self, n: u64) -> Result<(StatusCode, Bytes), String> {
        let (client, request) = match self {
            Self::Check {
                client,
                uri,
                bodies,
                headers,
            } => {
                let key = n % bodies.len() as u64;
                let mut request = Request::builder()
                    .method(Method::POST)
                    .uri(uri.clone())
                    .header(hyper::header::CONTENT_TYPE, "application/json");
                for (name, value) in headers {
                    request = request.header(name, fill(value, key));
                }
                (
                    client,
                    request.body(Full::new(bodies[key as usize].clone())),
                )
            }
            Self::Get {
                client,
                uri,
                headers,
                keys,
            } => {
                let mut request = Request::get(uri.clone());
                for (name, value) in headers {
                    request = request.header(name, fill(value, n % keys));
                }
                (client, request.body(Full::new(Bytes::new())))
            }
            Self::Grpc(_) => return Err("a gRPC answer has no HTTP body".to_owned()),
        };
        exchange(client, request.map_err(|error| error.to_string())?).await
    }

    /// What the target is, for the report.
    pub fn describe(&self) -> String {
        match self {
            Self::Check { uri, .. } => format!("POST {uri}"),
            Self::Get { uri, .. } => format!("GET {uri}"),
            Self::Grpc(client) => client.describe(),
        }
    }

    /// Sends request number `n` from worker `worker`.
    pub async fn send(&self, worker: usize, n: u64) -> Answer {
        match self {
            Self::Check { .. } => match self.exchange(n).await {
                Ok((status, body)) => check_answer(status, &body),
                Err(reason) => Answer::Failed(reason),
            },
            Self::Get { .. } => match self.exchange(n).await {
                Ok((StatusCode::TOO_MANY_REQUESTS, _)) => Answer::Denied,
                Ok((status, _)) if status.is_success() || status.is_redirection() => {
                    Answer::Allowed
                }
                Ok((status, _)) => Answer::Failed(format!("HTTP {}", status.as_u16())),
                Err(reason) => Answer::Failed(reason),
            },
            Self::Grpc(client) => client.send(worker, n).await,
        }
    }
}

/// Sends `request` and reads the whole answer.
async fn exchange(
    client: &Client<HttpConnector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), String> {
    let response = client
        .request(request)
        .await
        .map_err(|error| format!("request failed: {error}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| format!("body failed: {error}"))?;
    Ok((status, body.to_bytes()))
}

/// How an answer of the check API counts.
pub fn check_answer(status: StatusCode, body: &[u8]) -> Answer {
    match status {
        StatusCode::TOO_MANY_REQUESTS => Answer::Denied,
        // The answer's keys are sorted, so `allowed` leads it.
        StatusCode::OK if body.starts_with(br#"{"allowed":true"#) => Answer::Allowed,
        StatusCode::OK if body.starts_with(br#"{"allowed":false"#) => Answer::Denied,
        StatusCode::OK => Answer::Failed("an answer without `allowed`".to_owned()),
        status => Answer::Failed(format!("HTTP {}", status.as_u16())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn placeholders_give_each_key_its_number_and_an_address_in_a_64_of_its_own() {
        assert_eq!(fill("k{key}:{key}", 42), "k42:42");
        assert_eq!(fill("{ip}", 42), "2001:db8:0:2a::1");
        let networks: HashSet<u64> = [0, 1, 0xffff, 0x1_0000, 9_999_999]
            .into_iter()
            .map(|key| {
                let address: IpAddr = fill("{ip}", key).parse().expect("an IP address");
                let IpAddr::V6(address) = address else {
                    panic!("IPv6 expected: {address}")
                };
                (u128::from(address) >> 64) as u64
            })
            .collect();
        assert_eq!(networks.len(), 5, "one /64 per key: {networks:?}");
    }
}
