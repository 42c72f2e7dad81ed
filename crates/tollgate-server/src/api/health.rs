//! `GET /healthz` (the process is up), `GET /healthcheck` (envoyproxy/ratelimit's probe) and
//! `GET /readyz` (the store answers, a configuration is loaded).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::json;
use tollgate::Store;

use super::AppState;
use super::problem::ApiError;

/// `GET /healthz`.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /healthcheck`, as envoyproxy/ratelimit answers it: `200 OK` with the body `OK`, and
/// `500` with no body once the process is stopping.
pub(crate) async fn healthcheck(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.stopping.is_set() {
        (StatusCode::INTERNAL_SERVER_ERROR, "")
    } else {
        (StatusCode::OK, "OK")
    }
}

/// `GET /readyz`: a look-only check through the store's guards proves it answers (a resting
/// breaker is not ready).
pub(crate) async fn readyz(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let store = state.limiter.guarded();
    crate::store::probe(store).await.map_err(|error| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        detail: format!("the store does not answer: {error}"),
    })?;
    let policies = state.limiter.policies().map(|p| p.version());
    Ok(Json(json!({
        "status": "ready",
        "store": store.kind(),
        "config_version": policies.map(|v| format!("{v:016x}")),
        "rls_domains": state.rls.config().domains().count(),
        "store_resting": state.limiter.store_resting(),
        "breaker_openings": state.limiter.breaker_openings(),
        "deny_cache_hits": state.limiter.deny_cache_hits(),
    })))
}
