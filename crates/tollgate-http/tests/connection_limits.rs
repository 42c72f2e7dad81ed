//! The listeners' bounds as a library user sets them: values that would make a server useless
//! are read as the least that works.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_http::http_server::{ConnectionLimits, listen, serve};

fn limits(max_connections: usize) -> ConnectionLimits {
    ConnectionLimits {
        max_connections,
        header_timeout: Duration::from_secs(10),
        max_header_bytes: 32 * 1024,
        max_header_fields: 100,
        shutdown_timeout: Duration::from_secs(1),
        max_connection_age: Duration::ZERO,
        max_connection_age_grace: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn a_cap_of_zero_connections_still_serves_one_at_a_time() {
    let (listener, address) = listen("127.0.0.1:0".parse().expect("an address"), "HTTP")
        .await
        .expect("a listener");
    let app = Router::new().route("/", get(|| async { "ok" }));
    tokio::spawn(async move {
        serve(
            listener,
            app.into(),
            &limits(0),
            None,
            std::future::pending(),
        )
        .await;
    });
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connects");
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: tollgate\r\nconnection: close\r\n\r\n")
            .await
            .expect("written");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut answer))
            .await
            .expect("an answer, not a connection left waiting for a permit")
            .expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
