//! `ShouldRateLimit` for load: streams opened straight on `h2`, every request's message encoded
//! once before the run.
//!
//! The generator shares the machine with the server it measures, so what it spends a call is
//! taken from the server. Through tonic's `Channel` a call passed a buffer task and hyper's
//! dispatcher before `h2` saw it, and the generator spent more CPU a check than the server it
//! drove; here a worker opens its stream on the connection itself, and the connection's own
//! task is the only other one a call wakes.

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue, TE};
use hyper::{Method, Request, StatusCode, Uri};
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
    connections: Vec<h2::client::SendRequest<Bytes>>,
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
        let authority = match address.split_once("://") {
            None => address,
            Some(("http", rest)) => rest.trim_end_matches('/'),
            Some((scheme, _)) => {
                return Err(format!(
                    "--url {address:?}: {scheme}:// is not supported; give host:port or http://host:port"
                ));
            }
        };
        let uri: Uri = format!("http://{authority}{PATH}")
            .parse()
            .map_err(|error| format!("--url {address:?}: not an address: {error}"))?;
        let descriptors = parse_descriptors(descriptors)?;
        let bodies = (0..keys)
            .map(|key| framed(&request(domain, &descriptors, key)))
            .collect();
        let mut opened = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            opened.push(open(authority).await?);
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
        let connection = self.connections[worker % self.connections.len()].clone();
        let mut connection = connection
            .ready()
            .await
            .map_err(|error| format!("connection: {error}"))?;
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        let (response, mut stream) = connection
            .send_request(request, false)
            .map_err(|error| format!("request: {error}"))?;
        let body = self.bodies[(n % self.bodies.len() as u64) as usize].clone();
        stream
            .send_data(body, true)
            .map_err(|error| format!("request body: {error}"))?;
        let response = response.await.map_err(|error| format!("answer: {error}"))?;
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
}

/// One HTTP/2 connection, driven by a task of its own until it closes.
async fn open(authority: &str) -> Result<h2::client::SendRequest<Bytes>, String> {
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
    fn a_descriptor_without_a_value_is_refused() {
        assert!(
            parse_descriptors(&["user".to_owned()])
                .unwrap_err()
                .contains("\"user\" is not key=value")
        );
    }
}
