//! API errors as `application/problem+json` (RFC 9457).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tollgate::problem::ProblemKind;

/// The media type of a problem detail.
const PROBLEM_JSON: &str = "application/problem+json";

/// A request the API cannot answer, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The status, a 4xx for the caller's mistakes (503 when the store fails).
    pub status: StatusCode,
    /// What was wrong and where.
    pub detail: String,
}

impl ApiError {
    /// A 400: the body is not JSON.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            detail: detail.into(),
        }
    }

    /// A 422: JSON, but not a valid request.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            detail: detail.into(),
        }
    }

    /// A 409: the request conflicts with what already happened (a charge refunded before).
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            detail: detail.into(),
        }
    }

    /// A 404: a named thing does not exist.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            detail: detail.into(),
        }
    }
}

impl From<tollgate::Error> for ApiError {
    fn from(error: tollgate::Error) -> Self {
        match error {
            tollgate::Error::UnknownPolicy(name) => {
                Self::not_found(format!("no policy is named {name:?}"))
            }
            tollgate::Error::Store(store) if store.is_store_failure() => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                detail: format!("the rate limiter cannot decide: {store}"),
            },
            changed @ tollgate::Error::ChargesChanged { .. } => Self::conflict(changed.to_string()),
            other => Self::invalid(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem_type = if self.status == StatusCode::SERVICE_UNAVAILABLE {
            ProblemKind::TemporaryReducedCapacity.type_uri()
        } else {
            "about:blank"
        };
        let body = json!({
            "type": problem_type,
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = (self.status, body.to_string()).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}

/// Parses JSON into `T`: 400 when it is not JSON, 422 when it is JSON of the wrong shape. The
/// message says where: the position of a syntax error, the field path of a value of the wrong
/// type (`limits[0].cost: invalid value: integer -1, expected u64`).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Most bodies are valid: read them without tracking the path, which costs on every field;
    // only a refused one is read again, for the path its message names.
    if let Ok(parsed) = tollgate::json::from_slice(bytes) {
        return Ok(parsed);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        json_error(error.into_inner(), &path)
    })?;
    deserializer.end().map_err(|error| json_error(error, "."))?;
    Ok(parsed)
}

/// Parses a check API body, which takes no `null` (a field is given or left out): 400 when it
/// is not JSON, 422 naming the path of the first `null`.
pub(crate) fn parse_json_value(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value: serde_json::Value =
        tollgate::json::from_slice(bytes).map_err(|error| json_error(error, "."))?;
    if let Some(path) = first_null(&value, "") {
        return Err(ApiError::invalid(format!(
            "{path}: null is not a value here; leave the field out"
        )));
    }
    Ok(value)
}

/// Reads `T` from a parsed body, naming the field path of a value of the wrong shape.
pub(crate) fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        json_error(error.into_inner(), &path)
    })
}

/// The path of the first `null` in `value` (`the body` for the value itself), written as
/// `serde_path_to_error` writes paths: `limits[0].cost`.
fn first_null(value: &serde_json::Value, path: &str) -> Option<String> {
    match value {
        serde_json::Value::Null => Some(if path.is_empty() {
            "the body".to_owned()
        } else {
            path.to_owned()
        }),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| first_null(item, &format!("{path}[{index}]"))),
        serde_json::Value::Object(fields) => fields.iter().find_map(|(name, item)| {
            let inner = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            first_null(item, &inner)
        }),
        _ => None,
    }
}

fn json_error(error: serde_json::Error, path: &str) -> ApiError {
    if error.classify() != serde_json::error::Category::Data {
        return ApiError::bad_request(format!("invalid JSON: {error}"));
    }
    // The field path says where; the position in the text adds nothing to it.
    let message = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let message = message.strip_suffix(&position).unwrap_or(&message);
    if path == "." {
        ApiError::invalid(message)
    } else {
        ApiError::invalid(format!("{path}: {message}"))
    }
}

/// Turns every error answer that is not yet a problem detail (the router's 405, an extractor's
/// rejection, ...) into one, keeping its status and header fields (`Allow`, ...): for the admin
/// API, whose handlers take extractors. (The check API's routes answer every error as a problem
/// detail themselves.)
pub(crate) async fn problem_details(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    // Answers with a body of their own (a problem detail, `/json`'s 429) stay as they are;
    // bare and plain-text ones are the framework's.
    let framework_made = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|value| value.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !framework_made {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let said = axum::body::to_bytes(body, 4 * 1024)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let detail = if status == StatusCode::METHOD_NOT_ALLOWED {
        let allowed = parts
            .headers
            .get(header::ALLOW)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        format!("this endpoint does not take {method} (it takes: {allowed})")
    } else if said.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        said
    };
    let problem = ApiError { status, detail }.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Response::from_parts(parts, problem.into_body())
}
