//! The tower layer under a real tonic server and under bare hyper, over real sockets.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tollgate::{AnyStore, Limiter, MemoryStore, Policies};
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::rls::{Rls, RlsConfig, RlsGrpc};
use tollgate_tower::{PeerAddr, RateLimitLayer};

fn limiter(yaml: &str) -> Limiter<AnyStore> {
    let policies = Policies::from_yaml("test.yaml", yaml).expect("valid policies");
    Limiter::with_policies(AnyStore::Memory(MemoryStore::new()), policies)
}

#[tokio::test]
async fn tonic_calls_over_the_limit_get_resource_exhausted() {
    let limiter = limiter(
        "
policies:
  - name: rpc
    match: { path_prefix: /envoy.service.ratelimit.v3.RateLimitService/ }
    key: [global]
    limits: [{ name: calls, algorithm: fixed_window, quota: 2/h }]
",
    );
    let rls = Arc::new(Rls::new(limiter.clone(), RlsConfig::default(), false));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(RateLimitLayer::new(limiter))
            .add_service(RlsGrpc::server(rls))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let mut client = RateLimitServiceClient::connect(format!("http://{address}"))
        .await
        .expect("connects");
    let request = RateLimitRequest {
        domain: "any".to_owned(),
        descriptors: vec![Default::default()],
        hits_addend: 0,
    };
    // The first two calls pass the layer (and the service answers the empty descriptor OK).
    for _ in 0..2 {
        let answer = client
            .should_rate_limit(request.clone())
            .await
            .expect("passed");
        assert_eq!(answer.into_inner().overall_code, 1, "OK");
    }
    let status = client
        .should_rate_limit(request)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("calls"), "{status:?}");
    let pushback: u64 = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .expect("a pushback")
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("milliseconds");
    assert!(pushback > 0 && pushback <= 3_600_000, "{pushback}");
}

#[tokio::test]
async fn bare_hyper_with_the_peer_address_as_an_extension() {
    let limiter = limiter(
        "
policies:
  - name: per-address
    key: [ip]
    limits: [{ name: per-address, algorithm: gcra, quota: 1/m }]
",
    );
    let layer = RateLimitLayer::new(limiter);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let service = tower::ServiceBuilder::new()
                .map_request(move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(PeerAddr(peer));
                    request
                })
                .layer(layer.clone())
                .service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        bytes::Bytes::from_static(b"hello"),
                    )))
                });
            tokio::spawn(async move {
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder
                    .serve_connection(
                        TokioIo::new(stream),
                        hyper_util::service::TowerToHyperService::new(service),
                    )
                    .await
            });
        }
    });
    let statuses = [get(address).await, get(address).await];
    assert_eq!(statuses[0].0, 200);
    assert_eq!(statuses[0].1, "hello");
    assert_eq!(
        statuses[1].0, 429,
        "the same address is limited: {}",
        statuses[1].1
    );
    assert!(statuses[1].1.contains("per-address"), "{}", statuses[1].1);
}

/// One GET on a fresh connection: the status and the body.
async fn get(address: SocketAddr) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("a handshake");
    tokio::spawn(connection);
    let request = http::Request::get("/")
        .header("host", "test")
        .body(Full::new(bytes::Bytes::new()))
        .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
