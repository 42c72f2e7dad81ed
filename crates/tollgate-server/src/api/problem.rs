//! API errors as `application/problem+json` (RFC 9457).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

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
            other => Self::invalid(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem_type = if self.status == StatusCode::SERVICE_UNAVAILABLE {
            "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
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
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// How long a client has to send a request body.
pub(crate) const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body of at most `limit` bytes, sent within [`BODY_TIMEOUT`].
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: usize,
) -> Result<bytes::Bytes, ApiError> {
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            detail: format!("the request body is larger than {limit} bytes, or could not be read"),
        }),
        Err(_) => Err(ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            detail: format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
        }),
    }
}

/// Parses JSON into `T`: 400 when it is not JSON, 422 when it is JSON of the wrong shape; the
/// message says where.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|error| {
        let message = error.to_string();
        match error.classify() {
            serde_json::error::Category::Data => ApiError::invalid(message),
            _ => ApiError::bad_request(format!("invalid JSON: {message}")),
        }
    })
}
