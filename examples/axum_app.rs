//! An axum app protected by Tollgate's tower layer, with the policies of
//! `examples/policies.yaml`. Run it with:
//!
//! ```sh
//! cargo run -p tollgate-tower --example axum_app
//! ```
//!
//! and try `curl -i -X POST localhost:3000/login` a few times, or
//! `curl -i -H 'x-plan: pro' -H 'x-user: 42' localhost:3000/api/things`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tollgate::{Identity, Limiter, MemoryStore, Policies};
use tollgate_tower::{BodyDigestLayer, RateLimitLayer};

/// Stands in for an app's authentication: takes the user from `x-user` and the plan from
/// `x-plan`, and hands them to the rate limiter as an `Identity` extension.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let identity = {
        let headers = request.headers();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Identity {
            user: header("x-user"),
            plan: header("x-plan"),
            ..Identity::default()
        }
    };
    request.extensions_mut().insert(identity);
    next.run(request).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policies = Policies::from_yaml("examples/policies.yaml", include_str!("policies.yaml"))?;
    let limiter = Limiter::with_policies(MemoryStore::new(), policies);
    let app = Router::new()
        .route("/login", post(|| async { "welcome back\n" }))
        .route("/api/{*path}", get(|| async { "here are your things\n" }))
        .route(
            "/users/{id}/files",
            post(|body: axum::body::Bytes| async move { format!("stored {} bytes\n", body.len()) }),
        )
        .layer(RateLimitLayer::new(limiter.clone()))
        // Reads the body of a request with an Idempotency-Key, so that its replays are told
        // apart from other requests: outside the rate limit layer.
        .layer(BodyDigestLayer::new(limiter))
        .layer(middleware::from_fn(authenticate));
    let address: SocketAddr = std::env::var("ADDR")
        .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
        .parse()?;
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{address}; try: curl -i -X POST http://{address}/login");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
