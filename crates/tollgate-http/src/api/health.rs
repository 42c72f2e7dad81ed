//! `GET /healthz` (the process is up), `GET /healthcheck` (envoyproxy/ratelimit's probe) and
//! `GET /readyz` (the store answers, a configuration is loaded).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::json;

use super::AppState;
use super::problem::ApiError;

/// `GET /healthz`.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /healthcheck`, as envoyproxy/ratelimit answers it: `200 OK` with the body `OK`, and
/// `500` with no body while the process is not ready (stopping, or what `--readiness` and
/// `--ready-with-rls-domains` wait for).
pub(crate) async fn healthcheck(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.readiness.problem().is_some() {
        (StatusCode::INTERNAL_SERVER_ERROR, "")
    } else {
        (StatusCode::OK, "OK")
    }
}

/// `GET /readyz`: ready while the process serves (with `--readiness store`, only while the
/// store answers its probe), not once it is stopping.
pub(crate) async fn readyz(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let mut answer = ready(&state.limiter, &state.readiness)?;
    answer["rls_domains"] = json!(state.rls.config().domains().count());
    Ok(Json(answer))
}

/// The answer of a ready process, or why it is not ready (`503`).
pub(crate) fn ready(
    limiter: &tollgate::Limiter<tollgate::AnyStore>,
    readiness: &crate::health::Readiness,
) -> Result<serde_json::Value, ApiError> {
    if let Some(problem) = readiness.problem() {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            detail: format!("not ready: {problem}"),
        });
    }
    let policies = limiter.policies().map(|p| p.version());
    Ok(json!({
        "status": "ready",
        "store": limiter.store_kind(),
        "store_up": readiness.store.is_up(),
        "config_version": policies.map(|v| format!("{v:016x}")),
        "store_resting": limiter.telemetry().store_resting(),
        "breaker_openings": limiter.telemetry().breaker_openings(),
        "deny_cache_hits": limiter.telemetry().deny_cache_hits(),
    }))
}
