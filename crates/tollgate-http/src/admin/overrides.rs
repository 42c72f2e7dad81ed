//! `/admin/overrides`: set, read, list and remove the overrides of single identities, and move
//! them in and out in bulk as JSON lines. Writes name the version they replace; each change is
//! logged with who made it (see `tollgate::overrides`).

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tollgate::overrides::{OverrideError, OverrideTarget, StoredOverride};

use super::AdminState;
use super::auth::Role;
use crate::api::ApiError;
use crate::api::body::read_body;
use crate::api::problem::parse_json_value;

/// The largest single override request.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The largest import.
const MAX_IMPORT_BYTES: usize = 32 * 1024 * 1024;

fn error(error: OverrideError) -> ApiError {
    match error {
        OverrideError::Invalid(detail) => ApiError::invalid(detail),
        conflict @ (OverrideError::Conflict { .. } | OverrideError::Full) => {
            ApiError::conflict(conflict.to_string())
        }
        OverrideError::NotFound => ApiError::not_found("no such override"),
        OverrideError::Store(store) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            detail: format!("the override table cannot be reached: {store}"),
        },
        other => ApiError::invalid(other.to_string()),
    }
}

/// Who made a change: the name the request gives (`admin` without one) and the token it came
/// with.
fn actor(given: Option<&str>, role: Role) -> String {
    format!("{} ({})", given.unwrap_or("admin"), role.as_str())
}

/// Takes a field the override itself does not have out of a request body.
fn take(body: &mut Value, field: &str) -> Option<Value> {
    body.as_object_mut()?.remove(field)
}

/// `replaces` and `actor`, the fields a write carries beside the override.
fn write_fields(body: &mut Value) -> Result<(u64, Option<String>), ApiError> {
    let replaces = match take(body, "replaces") {
        None => 0,
        Some(value) => value.as_u64().ok_or_else(|| {
            ApiError::invalid("replaces: the version the write replaces, a whole number (0: none)")
        })?,
    };
    let actor = match take(body, "actor") {
        None => None,
        Some(Value::String(name)) => Some(name),
        Some(_) => return Err(ApiError::invalid("actor: a name, as a string")),
    };
    Ok((replaces, actor))
}

async fn read_write(body: axum::body::Body) -> Result<Value, ApiError> {
    parse_json_value(&read_body(body, MAX_BODY_BYTES).await?)
}

/// `PUT /admin/overrides`: an override (`policy`, `key`, optional `limit`, `change`, optional
/// `expires_at` and `reason`), the version it `replaces` (0 or absent for a new one) and an
/// optional `actor`.
pub(super) async fn put(
    State(state): State<AdminState>,
    axum::Extension(role): axum::Extension<Role>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let mut body = read_write(body).await?;
    let (replaces, given) = write_fields(&mut body)?;
    let (item, _) = StoredOverride::from_json(body).map_err(ApiError::invalid)?;
    let written = state
        .limiter
        .overrides()
        .put(item, replaces, &actor(given.as_deref(), role))
        .await
        .map_err(error)?;
    let status = if replaces == 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(written.to_json())).into_response())
}

/// `DELETE /admin/overrides`: `policy`, `key`, optional `limit`, the version it `replaces`,
/// optional `actor`.
pub(super) async fn delete(
    State(state): State<AdminState>,
    axum::Extension(role): axum::Extension<Role>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let mut body = read_write(body).await?;
    let (replaces, given) = write_fields(&mut body)?;
    if replaces == 0 {
        return Err(ApiError::invalid(
            "replaces: the version of the override to remove (GET /admin/overrides shows it)",
        ));
    }
    let target: OverrideTarget =
        serde_json::from_value(body).map_err(|e| ApiError::invalid(e.to_string()))?;
    let removed = state
        .limiter
        .overrides()
        .remove(&target, replaces, &actor(given.as_deref(), role))
        .await
        .map_err(error)?;
    Ok(Json(json!({ "removed": removed.map(|one| one.to_json()) })).into_response())
}

/// Which overrides a listing shows.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Filter {
    policy: Option<String>,
    key: Option<String>,
    limit: Option<String>,
}

/// `GET /admin/overrides?policy=&key=&limit=`: the overrides in force (read again from the
/// backend first), those that fit the filter; keys as the logs show them unless `key` names
/// one.
pub(super) async fn list(
    State(state): State<AdminState>,
    Query(filter): Query<Filter>,
) -> Response {
    let overrides = state.limiter.overrides();
    let unread = overrides.refresh().await.err().map(|e| e.to_string());
    let fits = |one: &&StoredOverride| {
        let item = &one.item;
        filter.policy.as_ref().is_none_or(|p| *p == item.policy)
            && filter.key.as_ref().is_none_or(|k| *k == item.key)
            && filter
                .limit
                .as_ref()
                .is_none_or(|l| Some(l) == item.limit.as_ref())
    };
    // Keys show as the logs show them, unless the caller named the key.
    let listed: Vec<Value> = overrides
        .list()
        .iter()
        .filter(fits)
        .map(|one| match filter.key {
            Some(_) => one.to_json(),
            None => overrides.shown(one),
        })
        .collect();
    Json(json!({
        "backend": overrides.kind(),
        "version": overrides.version(),
        "overrides": listed,
        "read_error": unread,
    }))
    .into_response()
}

/// `GET /admin/overrides/export`: every override in force as JSON lines, keys as they are:
/// not for the read token.
pub(super) async fn export(
    State(state): State<AdminState>,
    axum::Extension(role): axum::Extension<Role>,
) -> Response {
    if role == Role::Reader {
        return ApiError {
            status: StatusCode::FORBIDDEN,
            detail: "the export holds every key as it is: it needs the admin token".to_owned(),
        }
        .into_response();
    }
    let overrides = state.limiter.overrides();
    if let Err(error) = overrides.refresh().await {
        return ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            detail: format!("the override table cannot be read: {error}"),
        }
        .into_response();
    }
    (
        [(header::CONTENT_TYPE, "application/jsonl")],
        overrides.export(),
    )
        .into_response()
}

/// Who an import is by.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImportQuery {
    actor: Option<String>,
}

/// `POST /admin/overrides/import?actor=`: JSON lines, one override each, checked whole
/// before any is written.
pub(super) async fn import(
    State(state): State<AdminState>,
    axum::Extension(role): axum::Extension<Role>,
    Query(query): Query<ImportQuery>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, MAX_IMPORT_BYTES).await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the import is not UTF-8: {e}")))?;
    let imported = state
        .limiter
        .overrides()
        .import(text, &actor(query.actor.as_deref(), role))
        .await
        .map_err(error)?;
    Ok(Json(json!({ "imported": imported })).into_response())
}
