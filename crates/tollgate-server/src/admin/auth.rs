//! The admin token: only in `Authorization: Bearer <token>` (the scheme in any case), compared
//! in constant time. Never in a query string, where it would end up in browser history, proxy
//! logs and `Referer` headers: a request that carries one there is refused, token or not.
//!
//! The dashboard page itself holds no data and is served without the token; its script reads
//! the token from the page's fragment (`/dashboard#token=...`, which a browser never sends) and
//! sends it in the header.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::api::ApiError;

/// Compares in time independent of the strings' contents and lengths: the digests are
/// compared, every byte of them.
fn same(given: &str, expected: &str) -> bool {
    let given = Sha256::digest(given.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    given
        .iter()
        .zip(expected.iter())
        .fold(0u8, |differ, (a, b)| differ | (a ^ b))
        == 0
}

/// The credentials of an `Authorization: Bearer <token>` header; the scheme in any case.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// Whether the query string has a `token` parameter.
fn token_in_query(request: &Request) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some("token"))
    })
}

/// Lets a request through when no token is configured or it presents the token in its
/// `Authorization` header; the dashboard page needs none.
pub(super) async fn require_token(
    State(token): State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    if token_in_query(&request) {
        return ApiError::bad_request(
            "the admin token is taken only in the Authorization header (Bearer); \
             the dashboard takes it after # (/dashboard#token=...)",
        )
        .into_response();
    }
    let page = request.uri().path() == "/dashboard"
        && (request.method() == Method::GET || request.method() == Method::HEAD);
    let Some(expected) = token.as_deref() else {
        return next.run(request).await;
    };
    if page || bearer(&request).is_some_and(|given| same(given, expected)) {
        return next.run(request).await;
    }
    let mut response = ApiError {
        status: StatusCode::UNAUTHORIZED,
        detail: "the admin API needs the admin token: Authorization: Bearer <token>".to_owned(),
    }
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"tollgate admin\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(same("s3cret", "s3cret"));
        assert!(!same("s3cre7", "s3cret"));
        assert!(!same("s3cret ", "s3cret"));
        assert!(!same("", "s3cret"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let with = |value: &str| {
            Request::builder()
                .header(header::AUTHORIZATION, value)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("BEARER  abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
    }
}
