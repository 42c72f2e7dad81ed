//! What the listener tests share: bounds a test server runs with, the server started on them,
//! and a request sent by hand.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_http::http_server::{ConnectionLimits, listen, serve};
use tollgate_http::lane::App;

/// Serves `app` under `limits` on a free loopback port for the rest of the test: its address.
pub(crate) async fn start(app: App, limits: ConnectionLimits) -> SocketAddr {
    let (listener, address) = listen("127.0.0.1:0".parse().expect("an address"), "HTTP")
        .await
        .expect("a listener");
    tokio::spawn(async move {
        serve(listener, app, &limits, None, std::future::pending()).await;
    });
    address
}

/// Bounds that leave a test's few requests alone, with at most `max_connections` at once.
pub(crate) fn limits(max_connections: usize) -> ConnectionLimits {
    ConnectionLimits {
        max_connections,
        header_timeout: Duration::from_secs(10),
        max_header_bytes: 32 * 1024,
        max_header_fields: 100,
        shutdown_timeout: Duration::from_secs(1),
        max_connection_age: Duration::ZERO,
        max_connection_age_grace: Duration::from_secs(1),
        workers: None,
    }
}

/// `GET target` on a connection of its own, closed after the answer: the whole answer, which
/// must be a 200, and the client's address.
pub(crate) async fn get(address: SocketAddr, target: &str) -> (String, SocketAddr) {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let client = stream.local_addr().expect("a local address");
    let head = format!("GET {target} HTTP/1.1\r\nhost: tollgate\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("written");
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut answer))
        .await
        .expect("an answer, not a connection left waiting")
        .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    (answer, client)
}
