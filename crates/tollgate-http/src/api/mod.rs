//! The HTTP API: the check API, Envoy's `/json`, health, and the OpenAPI document.

mod answer;
pub(crate) mod body;
mod brief;
mod canonical;
mod charge;
pub(crate) mod check;
mod compiled;
mod envoy_json;
pub(crate) mod health;
pub(crate) mod inline;
mod outcome;
pub(crate) mod problem;
mod usage;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse as _;
use axum::routing::{MethodRouter, get, post};
use tollgate::{AnyStore, Limiter};

pub use charge::Charges;
pub use check::{CheckRequest, MAX_BODY_BYTES, MAX_HEADERS};
pub use problem::ApiError;

use tollgate_envoy::rls::Rls;

use crate::lane::{App, Lane};

/// What the handlers share, behind one reference: axum clones the state for every request,
/// so one reference count is touched per request however many parts there are.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state of `shared`.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts the handlers share.
#[derive(Debug)]
pub struct Shared {
    /// The limiter with its policies and store.
    pub limiter: Limiter<AnyStore>,
    /// Envoy's rate limit service, on the same store.
    pub rls: Arc<Rls>,
    /// Envoy's rate limit quota service, on the same store.
    pub quotas: Option<Arc<tollgate_envoy::rlqs::Rlqs>>,
    /// Issues and redeems the charge tokens refunds name.
    pub charges: Arc<Charges>,
    /// Whether the process is ready: `/readyz`; `/healthcheck` fails once it is stopping.
    pub readiness: crate::health::Readiness,
}

const OPENAPI: &str = include_str!("openapi.json");

/// `GET /metrics`: the limiter's metrics in the OpenMetrics text format.
async fn metrics(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> impl axum::response::IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::exposition::CONTENT_TYPE)],
        crate::exposition::metrics_text(
            &state.limiter,
            Some(&state.rls),
            state.quotas.as_deref(),
            None,
        ),
    )
}

/// A decision route at `path`, in a check span when traces are exported.
#[cfg_attr(not(feature = "otel"), allow(unused_variables))]
fn traced(route: MethodRouter<AppState>, path: &'static str) -> MethodRouter<AppState> {
    #[cfg(feature = "otel")]
    if traced_checks() {
        return route.layer(crate::otel::TraceLayer::new(path));
    }
    route
}

/// A route that answers the methods it does not take with a problem detail naming them (and
/// `Allow`, which the router adds). Every error of the API is a problem detail this way, without
/// a layer over the router that every request would pass through.
fn taking(route: MethodRouter<AppState>, methods: &'static str) -> MethodRouter<AppState> {
    route.fallback(move |method: Method| async move {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            detail: format!("this endpoint does not take {method} (it takes: {methods})"),
        }
    })
}

/// A decision route at `path`: `POST` only, traced.
fn decision<H, T>(handler: H, path: &'static str) -> MethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    traced(taking(post(handler), "POST"), path)
}

/// A route that reads: `GET` (and `HEAD`).
fn reading<H, T>(handler: H) -> MethodRouter<AppState>
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    taking(get(handler), "GET, HEAD")
}

/// The API's routes, with `POST /v1/check`, the call every client makes, in a lane of its own
/// in front of the router (see [`Lane`]). When checks are traced they keep their route, and so
/// the route's trace layer.
pub fn app(state: AppState) -> App {
    let check = (!traced_checks()).then(|| {
        let state = state.clone();
        Lane::exact(Method::POST, "/v1/check", move |request| {
            let state = state.clone();
            Box::pin(async move { check::check(State(state), request).await.into_response() })
        })
        .without_addresses()
    });
    App::new(router(state), check)
}

/// Whether the decision routes carry a trace layer (see [`traced`]).
fn traced_checks() -> bool {
    #[cfg(feature = "otel")]
    return crate::otel::enabled();
    #[cfg(not(feature = "otel"))]
    false
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/check", decision(check::check, "/v1/check"))
        .route("/v1/refund", decision(check::refund, "/v1/refund"))
        .route("/v1/settle", decision(check::settle, "/v1/settle"))
        .route("/v1/release", decision(check::release, "/v1/release"))
        .route("/v1/usage", decision(usage::usage, "/v1/usage"))
        .route("/json", decision(envoy_json::should_rate_limit, "/json"))
        .route("/healthz", reading(health::healthz))
        .route("/healthcheck", reading(health::healthcheck))
        .route("/readyz", reading(health::readyz))
        .route(
            "/openapi.json",
            reading(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/metrics", reading(metrics))
        .fallback(|| async { ApiError::not_found("no such endpoint; see /openapi.json") })
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use tollgate::secret::Secret;
    use tollgate::{MemoryStore, Policies};
    use tollgate_envoy::rls::RlsConfig;

    use super::*;
    use crate::health::{Readiness, Stopping};

    #[tokio::test]
    async fn a_check_takes_its_lane_and_nothing_else_does() {
        let policies = Policies::from_yaml("inline", "policies: []").expect("policies");
        let limiter = Limiter::with_policies(AnyStore::Memory(MemoryStore::new()), policies);
        let readiness = Readiness {
            stopping: Stopping::default(),
            store: crate::store_health::watch(&limiter, Duration::from_secs(1), None),
            needs_store: false,
            rls_domains: None,
        };
        let app = app(AppState::new(Shared {
            rls: Arc::new(Rls::new(limiter.clone(), RlsConfig::default(), false)),
            quotas: None,
            charges: Arc::new(
                Charges::new(Secret::random(), Duration::from_secs(3_600)).expect("charges"),
            ),
            readiness,
            limiter,
        }));
        let request = |method: Method, path: &str| {
            axum::http::Request::builder()
                .method(method)
                .uri(path)
                .body(Body::empty())
                .expect("a request")
        };
        assert!(app.lane(&request(Method::POST, "/v1/check")).is_some());
        for (method, path) in [
            (Method::GET, "/v1/check"),
            (Method::POST, "/v1/refund"),
            (Method::POST, "/json"),
            (Method::GET, "/healthz"),
        ] {
            assert!(
                app.lane(&request(method.clone(), path)).is_none(),
                "{method} {path}"
            );
        }
    }
}
