//! `ShouldRateLimit` on the wire. A plain call (one uncompressed message) is read and answered
//! beside tonic, and must look as tonic's answer does: the message, then `grpc-status` in
//! trailers, no `content-length`; a failure as a trailers-only answer. Every other call is
//! still tonic's, with tonic's answer.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use prost::Message;
use support::Tollgate;
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::Entry;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::service::{RateLimitRequest, RateLimitResponse};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const CONFIG: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// A gRPC body: the compression flag, the length, the message.
fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut body = vec![flag];
    body.extend_from_slice(
        &u32::try_from(message.len())
            .expect("a short message")
            .to_be_bytes(),
    );
    body.extend_from_slice(message);
    body
}

fn request(domain: &str, user: &str) -> Vec<u8> {
    request_hits(domain, user, 0)
}

/// A request adding `hits` (0: one) to its descriptor.
fn request_hits(domain: &str, user: &str, hits: u32) -> Vec<u8> {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: user.to_owned(),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: hits,
    }
    .encode_to_vec()
}

struct Answer {
    head: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

impl Answer {
    /// The call's gRPC status: in the trailers, or in the head of a trailers-only answer.
    fn status(&self) -> String {
        let field = |map: &HeaderMap| {
            map.get("grpc-status")
                .map(|value| value.to_str().expect("visible text").to_owned())
        };
        self.trailers
            .as_ref()
            .and_then(field)
            .or_else(|| field(&self.head))
            .expect("a grpc-status")
    }

    fn message(&self) -> String {
        let message = self.head.get("grpc-message").expect("a grpc-message");
        message.to_str().expect("visible text").to_owned()
    }
}

async fn call(server: &Tollgate, fields: &[(&str, &str)], body: Vec<u8>) -> Answer {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let mut request = hyper::Request::post(format!("http://{}{PATH}", server.address("grpc")));
    for (name, value) in fields {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let (head, body) = client
        .request(request)
        .await
        .expect("an answer")
        .into_parts();
    assert_eq!(head.status, 200);
    let collected = body.collect().await.expect("the body");
    Answer {
        head: head.headers,
        trailers: collected.trailers().cloned(),
        body: collected.to_bytes(),
    }
}

const GRPC: (&str, &str) = ("content-type", "application/grpc");

#[tokio::test]
async fn a_plain_call_is_answered_as_tonic_answers_and_every_other_call_by_tonic() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(directory.path().join("edge.yaml"), CONFIG).expect("written");
    let server = Tollgate::serve(&["--rls-config", directory.path().to_str().expect("UTF-8")]);

    // Plain calls: the answer's message, then its status in trailers; no length declared.
    // Each decided within one call (a second hit over the limit in its own call), so that no
    // window boundary between calls can change the answer.
    for (user, hits, expected) in [("a", 1, Code::Ok), ("z", 2, Code::OverLimit)] {
        let message = request_hits("edge", user, hits);
        let answer = call(&server, &[GRPC], framed(0, &message)).await;
        assert_eq!(answer.status(), "0");
        assert_eq!(answer.head["content-type"], "application/grpc");
        assert!(
            !answer.head.contains_key("content-length"),
            "{:?}",
            answer.head
        );
        assert!(!answer.head.contains_key("date"), "{:?}", answer.head);
        let (prefix, message) = answer.body.split_at(5);
        assert_eq!(prefix, &framed(0, message)[..5]);
        let decoded = RateLimitResponse::decode(message).expect("a response");
        assert_eq!(decoded.overall_code, expected as i32);
        assert_eq!(decoded.statuses.len(), 1);
    }
    // `application/grpc+proto` is the same content.
    let proto = ("content-type", "application/grpc+proto");
    let answer = call(&server, &[proto], framed(0, &request("edge", "b"))).await;
    assert_eq!(answer.status(), "0");

    // A refused plain call: a trailers-only answer naming the fault.
    let answer = call(&server, &[GRPC], framed(0, &request("", "a"))).await;
    assert_eq!(answer.status(), "3");
    assert!(answer.trailers.is_none());
    assert!(answer.message().contains("domain"), "{}", answer.message());

    // Compressed: tonic's refusal, as the server accepts no compression.
    let gzip = ("grpc-encoding", "gzip");
    let answer = call(&server, &[GRPC, gzip], framed(0, &request("edge", "c"))).await;
    assert_eq!(answer.status(), "12");
    assert!(answer.message().contains("gzip"), "{}", answer.message());
    // A body shorter than the length it declares.
    let mut truncated = framed(0, &request("edge", "c"));
    truncated.truncate(10);
    let answer = call(&server, &[GRPC], truncated).await;
    assert_eq!(answer.status(), "13");
    assert!(answer.message().contains("EOF"), "{}", answer.message());
    // A message that is not a request.
    let answer = call(&server, &[GRPC], framed(0, &[0xff, 0xff, 0xff])).await;
    assert_eq!(answer.status(), "13");
    assert!(answer.message().contains("decode"), "{}", answer.message());
    // A message longer than this path reads (64 KiB, here with a field the request does not
    // have, which a reader skips), read by tonic.
    let mut long = request("edge", "d");
    long.extend([15 << 3 | 2, 0xf0, 0xa2, 0x04]); // field 15, 70 000 bytes
    long.extend([0; 70_000]);
    let answer = call(&server, &[GRPC], framed(0, &long)).await;
    assert_eq!(answer.status(), "0");
    let decoded = RateLimitResponse::decode(&answer.body[5..]).expect("a response");
    assert_eq!(decoded.overall_code, Code::Ok as i32);
    // Two messages in one body: tonic reads the first, as before; the second user is not
    // counted.
    let mut two = framed(0, &request("edge", "e"));
    two.extend(framed(0, &request("edge", "f")));
    let answer = call(&server, &[GRPC], two).await;
    assert_eq!(answer.status(), "0");
    let answer = call(&server, &[GRPC], framed(0, &request("edge", "f"))).await;
    let decoded = RateLimitResponse::decode(&answer.body[5..]).expect("a response");
    assert_eq!(decoded.overall_code, Code::Ok as i32);
}
