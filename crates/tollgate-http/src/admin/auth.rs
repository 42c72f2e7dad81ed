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

/// The admin tokens: one that may do everything, one that may only read.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// `--admin-token`: every admin endpoint.
    pub write: Option<String>,
    /// `--admin-read-token`: the admin endpoints that change nothing (`GET`, `HEAD`).
    pub read: Option<String>,
}

/// Who a request was let through as, for the handlers that record who changed what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// No token is configured (a loopback listener).
    Open,
    /// The read-only token.
    Reader,
    /// The admin token.
    Writer,
}

impl Role {
    /// How a change log names the role.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Role::Open => "no token",
            Role::Reader => "read token",
            Role::Writer => "admin token",
        }
    }
}

/// Whether `method` changes nothing.
fn reads_only(method: &Method) -> bool {
    *method == Method::GET || *method == Method::HEAD
}

/// Lets a request through when no token is configured or it presents a token in its
/// `Authorization` header that may do what it asks (the read token only reads); the dashboard
/// page needs none. The role it came in as goes with it.
pub(super) async fn require_token(
    State(tokens): State<Arc<Tokens>>,
    mut request: Request,
    next: Next,
) -> Response {
    if token_in_query(&request) {
        return ApiError::bad_request(
            "the admin token is taken only in the Authorization header (Bearer); \
             the dashboard takes it after # (/dashboard#token=...)",
        )
        .into_response();
    }
    let page = request.uri().path() == "/dashboard" && reads_only(request.method());
    let Some(expected) = tokens.write.as_deref() else {
        request.extensions_mut().insert(Role::Open);
        return next.run(request).await;
    };
    let given = bearer(&request);
    let role = if given.is_some_and(|given| same(given, expected)) {
        Some(Role::Writer)
    } else if let Some(read) = tokens.read.as_deref()
        && given.is_some_and(|given| same(given, read))
    {
        Some(Role::Reader)
    } else {
        None
    };
    match role {
        Some(Role::Reader) if !reads_only(request.method()) => ApiError {
            status: StatusCode::FORBIDDEN,
            detail: "the read-only admin token only reads (GET): changes need the admin token"
                .to_owned(),
        }
        .into_response(),
        Some(role) => {
            request.extensions_mut().insert(role);
            next.run(request).await
        }
        None if page => next.run(request).await,
        None => unauthorized(),
    }
}

fn unauthorized() -> Response {
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
