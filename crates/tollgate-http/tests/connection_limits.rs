//! The listeners' bounds as a library user sets them: values that would make a server useless
//! are read as the least that works.

mod common;

use axum::Router;
use axum::routing::get;
use tollgate_http::http_server::{listen, serve};

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
            &common::limits(0),
            None,
            std::future::pending(),
        )
        .await;
    });
    for _ in 0..2 {
        // Each answered (a 200) rather than left waiting for a permit.
        common::get(address, "/").await;
    }
}
