//! The admin token: `Authorization: Bearer <token>` on API calls, or `?token=` on the
//! dashboard page (a browser cannot add a header when following a link; the page's script then
//! sends the header itself).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;

/// Compares in time independent of where the strings differ.
fn same(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

fn presented(request: &Request) -> Option<String> {
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned);
    bearer.or_else(|| {
        request.uri().query().and_then(|query| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("token="))
                .map(str::to_owned)
        })
    })
}

/// Lets a request through when no token is configured or it presents the token.
pub(super) async fn require_token(
    State(token): State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = token.as_deref() else {
        return next.run(request).await;
    };
    match presented(&request) {
        Some(given) if same(&given, expected) => next.run(request).await,
        _ => {
            let mut response = ApiError {
                status: StatusCode::UNAUTHORIZED,
                detail: "the admin API needs the admin token: Authorization: Bearer <token>"
                    .to_owned(),
            }
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"tollgate admin\""),
            );
            response
        }
    }
}
