//! `POST /json`: envoyproxy/ratelimit's HTTP form of `ShouldRateLimit`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::body::read_body;
use super::problem::ApiError;
use tollgate_envoy::rls::RlsError;
use tollgate_envoy::rls::json::{MAX_BODY_BYTES, parse_request, render_response};
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;

/// `POST /json`: 200 when under the limits, 429 when over, 400 for a bad request.
pub(crate) async fn should_rate_limit(
    State(state): State<AppState>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let bytes = read_body(body, MAX_BODY_BYTES).await?;
    let request = parse_request(&bytes).map_err(ApiError::bad_request)?;
    let response = state
        .rls
        .should_rate_limit(&request)
        .await
        .map_err(|error| match error {
            RlsError::InvalidArgument(message) => ApiError::bad_request(message),
            RlsError::Unavailable(store) => ApiError::from(tollgate::Error::Store(store)),
            RlsError::NotConfigured => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                detail: RlsError::NotConfigured.to_string(),
            },
        })?;
    #[cfg(feature = "otel")]
    if crate::otel::enabled() {
        crate::otel::record_rls(&tracing::Span::current(), &request.domain, &response);
    }
    let status = if response.overall_code == Code::OverLimit as i32 {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    Ok((status, Json(render_response(&response))).into_response())
}
