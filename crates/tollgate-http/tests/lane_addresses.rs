//! Which requests carry the connection's addresses: the router's always, a lane's unless it
//! was made without them.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_http::http_server::{ConnectionLimits, LocalAddr, listen, serve};
use tollgate_http::lane::{App, Lane, LaneFuture};

/// The addresses a request arrived with, as text: `peer=...;local=...` or `none`.
fn addresses(request: &Request) -> String {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>();
    let local = request.extensions().get::<LocalAddr>();
    match (peer, local) {
        (Some(ConnectInfo(peer)), Some(LocalAddr(local))) => format!("peer={peer};local={local}"),
        (None, None) => "none".to_owned(),
        (peer, local) => format!("only one: {peer:?} {local:?}"),
    }
}

fn telling(request: Request) -> LaneFuture {
    let text = addresses(&request);
    Box::pin(async move { text.into_response() })
}

async fn get_text(address: SocketAddr, path: &str) -> (String, SocketAddr) {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let client = stream.local_addr().expect("a local address");
    let head = format!("GET {path} HTTP/1.1\r\nhost: tollgate\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("written");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut answer))
        .await
        .expect("an answer")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    (body.to_owned(), client)
}

#[tokio::test]
async fn a_lane_without_addresses_gets_none_and_every_other_request_gets_both() {
    let (listener, address) = listen("127.0.0.1:0".parse().expect("an address"), "HTTP")
        .await
        .expect("a listener");
    let router = Router::new().route(
        "/routed",
        get(|request: Request| async move { addresses(&request) }),
    );
    let app = App::new(
        router,
        [
            Lane::exact(Method::GET, "/bare", telling).without_addresses(),
            Lane::exact(Method::GET, "/told", telling),
        ],
    );
    let limits = ConnectionLimits {
        max_connections: 8,
        header_timeout: Duration::from_secs(10),
        max_header_bytes: 32 * 1024,
        max_header_fields: 100,
        shutdown_timeout: Duration::from_secs(1),
        max_connection_age: Duration::ZERO,
        max_connection_age_grace: Duration::from_secs(1),
    };
    tokio::spawn(async move {
        serve(listener, app, &limits, None, std::future::pending()).await;
    });
    let (bare, _) = get_text(address, "/bare").await;
    assert_eq!(bare, "none");
    for path in ["/told", "/routed"] {
        let (text, client) = get_text(address, path).await;
        assert_eq!(text, format!("peer={client};local={address}"), "{path}");
    }
}
