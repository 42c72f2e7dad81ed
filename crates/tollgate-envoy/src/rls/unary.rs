//! `ShouldRateLimit` read and answered without tonic's streaming codec, for the plain call
//! every Envoy sends: one uncompressed message. tonic decodes a unary request as a stream (a
//! decoder, a buffer, the request's trailers awaited) and encodes its answer the same way:
//! about 7 000 instructions a call, more than the decision itself. Whatever is not that plain
//! call (compression, a framing that is not one whole message, a body that does not decode) is
//! handed back, to be served by tonic as before, so that its answers stay tonic's.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, StreamBody};
use prost::Message;
use tonic::Status;

use super::decide::Rls;
use super::grpc::status;
use super::json::MAX_BODY_BYTES;
use super::proto::service::RateLimitRequest;

/// The longest message read here, as the call's JSON form caps its body: a call that declares a
/// longer one goes to tonic (which takes up to 4 MiB) after its first bytes, so that no call
/// makes this path hold more.
const MAX_MESSAGE_BYTES: usize = MAX_BODY_BYTES;

/// The gRPC message prefix: a compression flag and a 32-bit length.
const PREFIX_BYTES: usize = 5;

/// What became of a call.
#[derive(Debug)]
pub enum Unary {
    /// Answered here.
    Answered(Response<Body>),
    /// Not a plain call: the request, its body as it came, for tonic.
    Declined(Request<Body>),
}

/// Answers `request`, a `ShouldRateLimit` call, when it is a plain one.
pub async fn should_rate_limit(rls: &Rls, request: Request<Body>) -> Unary {
    if !plain(request.headers()) {
        return Unary::Declined(request);
    }
    let (parts, mut body) = request.into_parts();
    let mut read = Vec::new();
    // Frames read that this path does not take (trailers), to hand on with the rest.
    let mut other = None;
    let ended = loop {
        match body.frame().await {
            None => break true,
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    read.extend_from_slice(&data);
                    if !may_be_one_message(&read) {
                        break false;
                    }
                }
                Err(frame) => {
                    other = Some(frame);
                    break false;
                }
            },
            Some(Err(error)) => {
                return Unary::Answered(Status::from_error(Box::new(error)).into_http());
            }
        }
    };
    let decoded = ended
        .then(|| one_message(&read))
        .flatten()
        .and_then(|message| RateLimitRequest::decode(message).ok());
    let Some(decoded) = decoded else {
        let rest = (!ended).then_some(body);
        return Unary::Declined(Request::from_parts(parts, replayed(read, other, rest)));
    };
    Unary::Answered(match rls.should_rate_limit(&decoded).await {
        Ok(answer) => answered(&answer),
        Err(error) => status(error).into_http(),
    })
}

/// Whether `read`, the body so far, can still become one message short enough for this path.
fn may_be_one_message(read: &[u8]) -> bool {
    match read.get(1..PREFIX_BYTES) {
        None => true,
        Some(length) => {
            let declared = u32::from_be_bytes(length.try_into().unwrap_or_default());
            usize::try_from(declared).is_ok_and(|declared| {
                declared <= MAX_MESSAGE_BYTES && read.len() <= PREFIX_BYTES + declared
            })
        }
    }
}

/// The body as it came: what was read, the frame that stopped the reading, and the rest
/// unread (`None` when the body had ended).
fn replayed(read: Vec<u8>, other: Option<Frame<Bytes>>, rest: Option<Body>) -> Body {
    let frames = std::iter::once(Frame::data(Bytes::from(read)))
        .chain(other)
        .map(Ok::<_, axum::Error>);
    let read = futures_util::stream::iter(frames);
    match rest {
        Some(rest) => Body::new(StreamBody::new(read.chain(BodyStream::new(rest)))),
        None => Body::new(StreamBody::new(read)),
    }
}

/// Whether the call is one this path reads: gRPC's protobuf content, no compression.
fn plain(headers: &HeaderMap) -> bool {
    let content = headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes);
    let identity = headers
        .get("grpc-encoding")
        .is_none_or(|encoding| encoding.as_bytes() == b"identity");
    identity
        && matches!(
            content,
            Some(b"application/grpc" | b"application/grpc+proto")
        )
}

/// The message of a body that is exactly one uncompressed message.
fn one_message(body: &[u8]) -> Option<&[u8]> {
    let (prefix, message) = body.split_at_checked(PREFIX_BYTES)?;
    let length = u32::from_be_bytes(prefix[1..].try_into().ok()?);
    (prefix[0] == 0 && usize::try_from(length).ok()? == message.len()).then_some(message)
}

/// A successful answer as tonic writes one: the message, then `grpc-status: 0` in trailers.
fn answered(answer: &impl Message) -> Response<Body> {
    let length = answer.encoded_len();
    let mut framed = Vec::with_capacity(PREFIX_BYTES + length);
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    answer.encode_raw(&mut framed);
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    // Two frames and no declared length, as tonic answers: with a `content-length`, a client
    // may stop reading once it has that many bytes, before the trailers.
    let frames = [Frame::data(Bytes::from(framed)), Frame::trailers(trailers)];
    let body = StreamBody::new(futures_util::stream::iter(frames.map(Ok::<_, Infallible>)));
    let mut response = Response::new(Body::new(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

#[cfg(test)]
mod tests {
    use tollgate::{AnyStore, Limiter, MemoryStore};

    use super::super::RlsConfig;
    use super::super::proto::common::RateLimitDescriptor;
    use super::super::proto::common::rate_limit_descriptor::Entry;
    use super::super::proto::service::RateLimitResponse;
    use super::*;

    fn rls() -> Rls {
        let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
        let config = RlsConfig::from_documents(&[("edge.yaml", yaml)]).expect("valid");
        let store = AnyStore::Memory(MemoryStore::builder().build());
        Rls::new(Limiter::new(store), config, false)
    }

    fn call(fields: &[(&'static str, &'static str)], body: Vec<u8>) -> Request<Body> {
        let mut request =
            Request::post("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
        for (name, value) in fields {
            request = request.header(*name, *value);
        }
        request.body(Body::from(body)).expect("a request")
    }

    fn edge_request() -> Vec<u8> {
        let request = RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: "a".to_owned(),
                }],
                limit: None,
                hits_addend: None,
            }],
            hits_addend: 0,
        };
        framed(0, &request.encode_to_vec())
    }

    const GRPC: (&str, &str) = ("content-type", "application/grpc");

    #[tokio::test]
    async fn a_plain_call_is_answered_here_and_any_other_handed_on_whole() {
        let rls = rls();
        match should_rate_limit(&rls, call(&[GRPC], edge_request())).await {
            Unary::Answered(answer) => {
                assert_eq!(answer.headers()["content-type"], "application/grpc");
                let collected = answer.into_body().collect().await.expect("a body");
                let trailers = collected.trailers().cloned().expect("trailers");
                assert_eq!(trailers["grpc-status"], "0");
                let body = collected.to_bytes();
                let answer = RateLimitResponse::decode(&body[PREFIX_BYTES..]).expect("decodes");
                assert_eq!(answer.statuses[0].limit_remaining, 4);
            }
            Unary::Declined(_) => panic!("a plain call is answered here"),
        }
        // Compressed, truncated, or followed by more: handed on with the body as it came.
        let mut truncated = edge_request();
        truncated.truncate(9);
        let mut two = edge_request();
        two.extend(edge_request());
        let gzip = ("grpc-encoding", "gzip");
        for (fields, body) in [
            (vec![GRPC, gzip], edge_request()),
            (vec![GRPC], truncated),
            (vec![GRPC], two),
        ] {
            match should_rate_limit(&rls, call(&fields, body.clone())).await {
                Unary::Declined(request) => {
                    assert_eq!(request.headers().len(), fields.len());
                    let read = request.into_body().collect().await.expect("a body");
                    assert_eq!(read.to_bytes(), body);
                }
                Unary::Answered(answer) => panic!("answered: {answer:?}"),
            }
        }
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut body = vec![flag];
        body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        body.extend_from_slice(message);
        body
    }

    #[test]
    fn only_one_whole_uncompressed_message_is_read_here() {
        assert_eq!(one_message(&framed(0, b"abc")), Some(&b"abc"[..]));
        assert_eq!(one_message(&framed(0, b"")), Some(&b""[..]));
        // Compressed, truncated, followed by another message, or shorter than a prefix.
        assert_eq!(one_message(&framed(1, b"abc")), None);
        assert_eq!(one_message(&framed(0, b"abc")[..7]), None);
        let mut two = framed(0, b"abc");
        two.extend(framed(0, b"d"));
        assert_eq!(one_message(&two), None);
        assert_eq!(one_message(&[0, 0, 0]), None);
    }

    #[test]
    fn only_plain_grpc_content_is_read_here() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert!(plain(&headers(&[("content-type", "application/grpc")])));
        assert!(plain(&headers(&[
            ("content-type", "application/grpc+proto"),
            ("grpc-encoding", "identity")
        ])));
        assert!(!plain(&headers(&[
            ("content-type", "application/grpc"),
            ("grpc-encoding", "gzip")
        ])));
        assert!(!plain(&headers(&[(
            "content-type",
            "application/grpc+json"
        )])));
        assert!(!plain(&headers(&[])));
    }
}
