//! `ShouldRateLimit` for load: streams opened straight on `h2`, every request's message encoded
//! once before the run.
//!
//! The generator shares the machine with the server it measures, so what it spends a call is
//! taken from the server. Through tonic's `Channel` a call passed a buffer task and hyper's
//! dispatcher before `h2` saw it, and the generator spent more CPU a check than the server it
//! drove; here a worker opens its stream on the connection itself, and the connection's own
//! task is the only other one a call wakes.

use std::sync::Mutex;

use bytes::Bytes;
use h2::RecvStream;
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue, TE};
use hyper::{Method, Request, Response, StatusCode, Uri};
use percent_encoding::percent_decode;
use prost::Message;
use tokio::net::TcpStream;

use super::target::{Answer, fill};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};

/// The method's path, as Envoy calls it.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The largest answer read: a rate limit service answer is a few hundred bytes; past this the
/// call counts as failed rather than growing the generator without bound.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Connections to one rate limit service and the request of every key.
#[derive(Debug)]
pub struct RlsClient {
    connections: Vec<Connection>,
    uri: Uri,
    /// Per key, the request as it goes in the stream's body: gRPC's five-byte prefix and the
    /// encoded message.
    bodies: Vec<Bytes>,
    domain: String,
}

impl RlsClient {
    /// Opens `connections` HTTP/2 connections to `address` (`host:port` or `http://host:port`)
    /// and prepares per key one request of `descriptors` (each `key=value,...`) in `domain`.
    pub async fn connect(
        address: &str,
        domain: &str,
        descriptors: &[String],
        keys: u64,
        connections: usize,
    ) -> Result<Self, String> {
        let authority = authority(address)?;
        let uri: Uri = format!("http://{authority}{PATH}")
            .parse()
            .map_err(|error| format!("--url {address:?}: not an address: {error}"))?;
        let descriptors = parse_descriptors(descriptors)?;
        let bodies = (0..keys)
            .map(|key| framed(&request(domain, &descriptors, key)))
            .collect();
        let mut opened = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            opened.push(Connection::open(&authority).await?);
        }
        Ok(Self {
            connections: opened,
            uri,
            bodies,
            domain: domain.to_owned(),
        })
    }

    /// What is driven, for the report.
    pub fn describe(&self) -> String {
        format!(
            "ShouldRateLimit, domain {:?}, {} connections",
            self.domain,
            self.connections.len()
        )
    }

    /// Sends request number `n` on worker `worker`'s connection and reads its answer.
    pub async fn send(&self, worker: usize, n: u64) -> Answer {
        match self.call(worker, n).await {
            Ok(response) => match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => Answer::Allowed,
                Ok(Code::OverLimit) => Answer::Denied,
                _ => Answer::Failed(format!("overall code {}", response.overall_code)),
            },
            Err(reason) => Answer::Failed(reason),
        }
    }

    async fn call(&self, worker: usize, n: u64) -> Result<RateLimitResponse, String> {
        let connection = &self.connections[worker % self.connections.len()];
        // A stream that the server's GOAWAY left out (its id above the last one the server
        // took) was never processed: it goes again once, on the connection opened anew.
        let response = match self.open_stream(connection, n).await {
            Err(Failure::Refused(_)) => self.open_stream(connection, n).await,
            answered => answered,
        }
        .map_err(|(Failure::Refused(reason) | Failure::Failed(reason))| reason)?;
        if response.status() != StatusCode::OK {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        // A call refused outright answers with its status in the head and no body.
        grpc_status(response.headers())?;
        let mut body = response.into_body();
        let mut message = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|error| format!("answer body: {error}"))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if message.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
            }
            message.extend_from_slice(&chunk);
        }
        let trailers = body
            .trailers()
            .await
            .map_err(|error| format!("answer trailers: {error}"))?
            .ok_or("an answer without trailers (no grpc-status)")?;
        if trailers.get("grpc-status").is_none() {
            return Err("an answer without grpc-status".to_owned());
        }
        grpc_status(&trailers)?;
        unframed(&message)
    }

    /// Sends request number `n` on `connection` and waits for the answer's head.
    async fn open_stream(
        &self,
        connection: &Connection,
        n: u64,
    ) -> Result<Response<RecvStream>, Failure> {
        let mut ready = connection.ready().await.map_err(Failure::Failed)?;
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        let (response, mut stream) = ready
            .send_request(request, false)
            .map_err(|error| Failure::of("request", &error))?;
        let body = self.bodies[(n % self.bodies.len() as u64) as usize].clone();
        stream
            .send_data(body, true)
            .map_err(|error| Failure::of("request body", &error))?;
        response
            .await
            .map_err(|error| Failure::of("answer", &error))
    }
}

/// Why a call got no answer.
enum Failure {
    /// The server's GOAWAY left the stream out: it was not processed and may go again.
    Refused(String),
    Failed(String),
}

impl Failure {
    fn of(stage: &str, error: &h2::Error) -> Self {
        let reason = format!("{stage}: {error}");
        if error.is_go_away() && error.is_remote() {
            Self::Refused(reason)
        } else {
            Self::Failed(reason)
        }
    }
}

/// `host:port` of `--url` (`host:port` or `http://host:port`; port 80 when none is given).
fn authority(address: &str) -> Result<String, String> {
    let url = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    let uri: Uri = url
        .parse()
        .map_err(|error| format!("--url {address:?}: not an address: {error}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "--url {address:?}: only plain-text HTTP/2 is supported; give host:port or http://host:port"
        ));
    }
    if uri
        .path_and_query()
        .is_some_and(|path| path.as_str() != "/")
    {
        return Err(format!(
            "--url {address:?}: give the service's address alone, without a path"
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("--url {address:?}: no host"))?;
    Ok(format!("{host}:{}", uri.port_u16().unwrap_or(80)))
}

/// One HTTP/2 connection, opened again when the server has closed it (a connection's maximum
/// age, an idle timeout, a restart), as a long run meets.
#[derive(Debug)]
struct Connection {
    authority: String,
    current: Mutex<h2::client::SendRequest<Bytes>>,
    /// Held while the connection is opened again, so that the calls that find it closed
    /// together open one.
    reopening: tokio::sync::Mutex<()>,
}

impl Connection {
    async fn open(authority: &str) -> Result<Self, String> {
        Ok(Self {
            authority: authority.to_owned(),
            current: Mutex::new(handshake(authority).await?),
            reopening: tokio::sync::Mutex::new(()),
        })
    }

    /// The connection, ready for a new stream: the current one, or a new one where the server
    /// has closed it (or told it to go away).
    async fn ready(&self) -> Result<h2::client::SendRequest<Bytes>, String> {
        if let Ok(ready) = self.current().ready().await {
            return Ok(ready);
        }
        let _reopening = self.reopening.lock().await;
        if let Ok(ready) = self.current().ready().await {
            return Ok(ready);
        }
        let fresh = handshake(&self.authority).await?;
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh.clone();
        fresh
            .ready()
            .await
            .map_err(|error| format!("connection: {error}"))
    }

    fn current(&self) -> h2::client::SendRequest<Bytes> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Opens an HTTP/2 connection, driven by a task of its own until it closes.
async fn handshake(authority: &str) -> Result<h2::client::SendRequest<Bytes>, String> {
    let tcp = TcpStream::connect(authority)
        .await
        .map_err(|error| format!("cannot connect to {authority}: {error}"))?;
    tcp.set_nodelay(true)
        .map_err(|error| format!("cannot set TCP_NODELAY on {authority}: {error}"))?;
    let (send, connection) = h2::client::handshake(tcp)
        .await
        .map_err(|error| format!("cannot connect to {authority}: HTTP/2: {error}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(send)
}

/// `--descriptor` values, each `key=value,...`.
fn parse_descriptors(descriptors: &[String]) -> Result<Vec<Vec<(&str, &str)>>, String> {
    descriptors
        .iter()
        .map(|descriptor| {
            descriptor
                .split(',')
                .map(|pair| {
                    pair.split_once('=')
                        .ok_or_else(|| format!("--descriptor: {pair:?} is not key=value"))
                })
                .collect()
        })
        .collect()
}

/// The request of key number `key`: `descriptors` with `{key}` filled in.
fn request(domain: &str, descriptors: &[Vec<(&str, &str)>], key: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|pairs| RateLimitDescriptor {
                entries: pairs
                    .iter()
                    .map(|(name, value)| Entry {
                        key: (*name).to_owned(),
                        value: fill(value, key),
                    })
                    .collect(),
                limit: None,
                hits_addend: None,
            })
            .collect(),
        hits_addend: 0,
    }
}

/// A message as a gRPC body carries it: uncompressed, its length, the message.
fn framed(message: &RateLimitRequest) -> Bytes {
    let encoded = message.encode_to_vec();
    let mut body = Vec::with_capacity(5 + encoded.len());
    body.push(0);
    body.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    body.extend_from_slice(&encoded);
    Bytes::from(body)
}

/// The one message of an answer's body.
fn unframed(body: &[u8]) -> Result<RateLimitResponse, String> {
    let (prefix, message) = body
        .split_at_checked(5)
        .ok_or("an answer body shorter than gRPC's prefix")?;
    if prefix[0] != 0 {
        return Err("a compressed answer (none was asked for)".to_owned());
    }
    let length = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if length != message.len() {
        return Err(format!(
            "an answer body of {} bytes for a message of {length}",
            message.len()
        ));
    }
    RateLimitResponse::decode(message).map_err(|error| format!("answer: {error}"))
}

/// Fails with the call's gRPC status where `fields` carry one other than OK.
fn grpc_status(fields: &HeaderMap) -> Result<(), String> {
    match fields.get("grpc-status").map(HeaderValue::as_bytes) {
        None | Some(b"0") => Ok(()),
        Some(code) => {
            // gRPC percent-encodes the message.
            let message = fields
                .get("grpc-message")
                .map_or_else(String::new, |value| {
                    percent_decode(value.as_bytes())
                        .decode_utf8_lossy()
                        .into_owned()
                });
            Err(format!(
                "gRPC status {}: {message}",
                String::from_utf8_lossy(code)
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_framed_and_an_answer_unframed_as_grpc_carries_them() {
        let given = ["user={key},route=/a".to_owned()];
        let descriptors = parse_descriptors(&given).unwrap();
        let body = framed(&request("bench", &descriptors, 42));
        assert_eq!(body[0], 0);
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert_eq!(length, body.len() - 5);
        let sent = RateLimitRequest::decode(&body[5..]).unwrap();
        assert_eq!(sent.domain, "bench");
        assert_eq!(sent.descriptors[0].entries[0].value, "42");
        assert_eq!(sent.descriptors[0].entries[1].value, "/a");

        let answer = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            ..Default::default()
        };
        let encoded = answer.encode_to_vec();
        let mut body = vec![0];
        body.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        body.extend_from_slice(&encoded);
        assert_eq!(
            unframed(&body).unwrap().overall_code,
            Code::OverLimit as i32
        );
        body[4] += 1;
        assert!(unframed(&body).unwrap_err().contains("a message of"));
        assert!(unframed(&[0, 0]).unwrap_err().contains("shorter"));
        body[0] = 1;
        assert!(unframed(&body).unwrap_err().contains("compressed"));
    }

    #[test]
    fn a_status_other_than_ok_fails_the_call_with_its_message() {
        let mut fields = HeaderMap::new();
        assert!(grpc_status(&fields).is_ok());
        fields.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(grpc_status(&fields).is_ok());
        fields.insert("grpc-status", HeaderValue::from_static("14"));
        fields.insert("grpc-message", HeaderValue::from_static("not%20ready"));
        assert_eq!(
            grpc_status(&fields).unwrap_err(),
            "gRPC status 14: not ready"
        );
    }

    #[test]
    fn an_address_is_a_host_and_port() {
        assert_eq!(authority("127.0.0.1:8081").unwrap(), "127.0.0.1:8081");
        assert_eq!(authority("http://rls.local").unwrap(), "rls.local:80");
        assert_eq!(authority("http://[::1]:9/").unwrap(), "[::1]:9");
        assert!(
            authority("https://rls.local:443")
                .unwrap_err()
                .contains("plain-text")
        );
        assert!(
            authority("http://rls.local:8081/x")
                .unwrap_err()
                .contains("without a path")
        );
    }

    #[test]
    fn a_descriptor_without_a_value_is_refused() {
        assert!(
            parse_descriptors(&["user".to_owned()])
                .unwrap_err()
                .contains("\"user\" is not key=value")
        );
    }
}
