//! Which requests carry the connection's addresses: the router's always, a lane's unless it
//! was made without them.

mod common;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use axum::response::IntoResponse;
use axum::routing::get;
use tollgate_http::http_server::LocalAddr;
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

/// An answer's body.
fn body(answer: &str) -> &str {
    answer.split("\r\n\r\n").nth(1).unwrap_or_default()
}

fn telling(request: Request) -> LaneFuture {
    let text = addresses(&request);
    Box::pin(async move { text.into_response() })
}

#[tokio::test]
async fn a_lane_without_addresses_gets_none_and_every_other_request_gets_both() {
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
    let address = common::start(app, common::limits(8)).await;
    let (bare, _) = common::get(address, "/bare").await;
    assert_eq!(body(&bare), "none");
    for path in ["/told", "/routed"] {
        let (answer, client) = common::get(address, path).await;
        assert_eq!(
            body(&answer),
            format!("peer={client};local={address}"),
            "{path}"
        );
    }
}
