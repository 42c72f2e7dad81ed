//! The admin API and the live dashboard, on a listener of their own (loopback by default):
//! inspect a key's state for a policy, reset it, lift its penalty, list the most refused keys
//! and hottest routes, show the loaded configuration. Bound anywhere else, it requires a bearer
//! token. Whatever the token, it answers only to its own address and to no other web site
//! ([`origin`]).

mod auth;
pub mod origin;
mod overrides;

use std::path::PathBuf;
use std::sync::Arc;

pub use auth::Tokens;
use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tollgate::{AnyStore, Limiter, Store};

use crate::api::ApiError;
use crate::api::body::read_body;
use crate::api::check::{Attributes, evaluation_answer, header_list, request_of};
use crate::api::problem::parse_json;
pub use origin::AllowedHosts;
use tollgate_envoy::rls::Rls;

/// The dashboard: one page, its script and styles inline, nothing fetched from elsewhere.
const DASHBOARD: &str = include_str!("dashboard.html");
/// The most entries a top list returns.
const MAX_TOP: usize = 100;
/// The largest admin request body.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// What the admin handlers share.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The limiter.
    pub limiter: Limiter<AnyStore>,
    /// The rate limit service, when this process serves one.
    pub rls: Option<Arc<Rls>>,
    /// The rate limit quota service, when this process serves one.
    pub quotas: Option<Arc<tollgate_envoy::rlqs::Rlqs>>,
    /// The policy file, if not the built-in example.
    pub config: Option<PathBuf>,
    /// The built-in example's text, the policies in force without a policy file.
    pub built_in_policies: &'static str,
    /// Whether the process is ready (`/readyz` on the admin listener).
    pub readiness: crate::health::Readiness,
    /// The proxy's own metrics, when this process is the proxy.
    pub proxy_metrics: Option<Arc<crate::proxy_metrics::ProxyMetrics>>,
}

/// A key, as a policy sees it: the policy and the request attributes that make the key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyRequest {
    policy: String,
    #[serde(default)]
    attributes: Attributes,
}

async fn read_key(body: axum::body::Body) -> Result<KeyRequest, ApiError> {
    parse_json(&read_body(body, MAX_BODY_BYTES).await?)
}

/// What an operator does to a key.
#[derive(Debug, Clone, Copy)]
enum Operation {
    /// `POST /admin/inspect`: the key's state under the policy, counting nothing.
    Inspect,
    /// `POST /admin/reset`: forgets the key's state under the policy's limits.
    Reset,
    /// `POST /admin/lift`: lifts the key's penalty under the policy.
    Lift,
}

async fn operate(
    state: AdminState,
    body: axum::body::Body,
    operation: Operation,
) -> Result<Response, ApiError> {
    let request = read_key(body).await?;
    let headers = header_list(&request.attributes)?;
    let attributes = request_of(&request.attributes, &headers)?;
    let limiter = &state.limiter;
    let policy = request.policy.as_str();
    Ok(match operation {
        Operation::Inspect => {
            let evaluation = limiter.admin().inspect(policy, &attributes).await?;
            Json(evaluation_answer(&evaluation)).into_response()
        }
        Operation::Reset => {
            let forgotten = limiter.admin().reset_key(policy, &attributes).await?;
            tracing::info!(policy, forgotten, "admin: key reset");
            Json(json!({"reset": forgotten})).into_response()
        }
        Operation::Lift => {
            let lifted = limiter.admin().lift_penalty(policy, &attributes).await?;
            tracing::info!(policy, lifted, "admin: penalty lifted");
            Json(json!({"lifted": lifted})).into_response()
        }
    })
}

#[derive(Debug, Deserialize)]
struct TopQuery {
    n: Option<usize>,
}

/// `GET /admin/top?n=20`: the most refused keys and the hottest routes.
async fn top(State(state): State<AdminState>, Query(query): Query<TopQuery>) -> Response {
    let n = query.n.unwrap_or(20).min(MAX_TOP);
    Json(json!({
        "denied_keys": state.limiter.telemetry().top_denied_keys(n),
        "routes": state.limiter.telemetry().top_routes(n),
    }))
    .into_response()
}

/// The version of the policies `text` (from `source`) compiles to, if it does (within the
/// size the server reads a policy file to).
fn version_of(source: &str, text: &str) -> Option<u64> {
    if text.len() > tollgate::yaml::MAX_CONFIG_BYTES {
        return None;
    }
    tollgate::Policies::from_yaml(source, text)
        .ok()
        .map(|policies| policies.version())
}

/// `GET /admin/config`: the configuration in force, and the file as it is now.
async fn config(State(state): State<AdminState>) -> Response {
    let loaded = state.limiter.policies();
    let file = state.config.as_ref().map(|path| {
        let source = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let on_disk = version_of(&source, &text);
                (source, text, on_disk)
            }
            Err(error) => (source, format!("# cannot read: {error}"), None),
        }
    });
    let (source, text, on_disk) = file.unwrap_or_else(|| {
        let source = "built-in example (examples/policies.yaml)".to_owned();
        let built_in = version_of(&source, state.built_in_policies);
        (source, state.built_in_policies.to_owned(), built_in)
    });
    let version = loaded.as_ref().map(|p| p.version());
    // The file may name a Redis with its password.
    let text = tollgate::redact_credentials(&text).into_owned();
    Json(json!({
        "source": source,
        "version": version.map(|v| format!("{v:016x}")),
        "policies": loaded.as_ref().map(|p| p.names().map(str::to_owned).collect::<Vec<_>>()),
        "file": text,
        "file_is_loaded": on_disk.is_some() && on_disk == version,
        "rls_domains": state.rls.as_ref().map_or_else(Vec::new, |rls| {
            rls.config().domains().map(str::to_owned).collect::<Vec<_>>()
        }),
    }))
    .into_response()
}

/// `GET /admin/stats`: what the dashboard shows, cumulative since start.
async fn stats(State(state): State<AdminState>) -> Response {
    let limiter = &state.limiter;
    let store = limiter.store();
    Json(json!({
        "time_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
        "store": {
            "kind": store.kind(),
            "resting": limiter.telemetry().store_resting(),
            "breaker_openings": limiter.telemetry().breaker_openings(),
            "deny_cache_hits": limiter.telemetry().deny_cache_hits(),
            "memory_keys": store.held_keys().map(|keys| keys.held),
            "memory_max_keys": store.held_keys().map(|keys| keys.max),
        },
        "global": limiter.global().map(|global| global.stats()),
        "quota_service": state.quotas.as_ref().map(|quotas| quotas.stats()),
        "summary": limiter.telemetry().metrics().summary(),
        "denied_keys": limiter.telemetry().top_denied_keys(10),
        "routes": limiter.telemetry().top_routes(10),
        "config_version": limiter.policies().map(|p| format!("{:016x}", p.version())),
    }))
    .into_response()
}

/// `GET /metrics` on the admin listener too (the proxy has no other).
async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::exposition::CONTENT_TYPE)],
        crate::exposition::metrics_text(
            &state.limiter,
            state.rls.as_deref(),
            state.quotas.as_deref(),
            state
                .proxy_metrics
                .as_ref()
                .map(|metrics| metrics.registry()),
        ),
    )
        .into_response()
}

/// The admin routes: only for requests to one of `hosts` that no other web site could have
/// made, and behind the token when there is one.
pub fn router(state: AdminState, tokens: Tokens, hosts: AllowedHosts) -> Router {
    // Probes reach the health routes without the token and by any host name: they tell
    // nothing but whether the process lives and is ready.
    let health = Router::new()
        .route("/healthz", get(crate::api::health::healthz))
        .route(
            "/readyz",
            get(|State(state): State<AdminState>| async move {
                crate::api::health::ready(&state.limiter, &state.readiness).map(Json)
            }),
        )
        .with_state(state.clone());
    Router::new()
        .route(
            "/admin/inspect",
            post(|State(state), body| operate(state, body, Operation::Inspect)),
        )
        .route(
            "/admin/reset",
            post(|State(state), body| operate(state, body, Operation::Reset)),
        )
        .route(
            "/admin/lift",
            post(|State(state), body| operate(state, body, Operation::Lift)),
        )
        .route(
            "/admin/overrides",
            get(overrides::list)
                .put(overrides::put)
                .delete(overrides::delete),
        )
        .route("/admin/overrides/export", get(overrides::export))
        .route("/admin/overrides/import", post(overrides::import))
        .route("/admin/top", get(top))
        .route("/admin/config", get(config))
        .route("/admin/stats", get(stats))
        .route("/metrics", get(metrics))
        .route(
            "/dashboard",
            get(|| async { ([(header::CACHE_CONTROL, "no-store")], Html(DASHBOARD)) }),
        )
        .fallback(|| async { ApiError::not_found("no such admin endpoint") })
        .layer(axum::middleware::from_fn(
            crate::api::problem::problem_details,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(tokens),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            origin::same_site_only,
        ))
        .with_state(state)
        .merge(health)
}
