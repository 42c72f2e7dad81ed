//! Reading an `http::Request` as Tollgate request attributes.

use std::borrow::Cow;
use std::net::SocketAddr;

use http::HeaderMap;
use tollgate::Identity;
use tollgate::policy::{HeaderSource, Request};

/// The client's socket address, for servers that do not use axum's `ConnectInfo`: insert it
/// into the request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The SHA-256 of a request's body, in its extensions, for the rate limit layer to tell
/// replays of an idempotent request apart: a `BodyDigestLayer` (axum) puts it there, or any
/// frontend that has read the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyDigest(pub [u8; 32]);

/// An `http::HeaderMap` as Tollgate sees headers.
pub(crate) struct Headers<'a>(pub(crate) &'a HeaderMap);

impl Headers<'_> {
    /// Every value of the field `name`. The forwarding fields, which policies read on every
    /// request, are named at compile time; any other name is parsed and checked each time.
    fn all(&self, name: &str) -> http::header::GetAll<'_, http::HeaderValue> {
        match name {
            "x-forwarded-for" => self
                .0
                .get_all(const { http::HeaderName::from_static("x-forwarded-for") }),
            "forwarded" => self.0.get_all(http::header::FORWARDED),
            _ => self.0.get_all(name),
        }
    }
}

impl HeaderSource for Headers<'_> {
    fn first(&self, name: &str) -> Option<&str> {
        self.all(name)
            .iter()
            .next()
            .and_then(|value| value.to_str().ok())
    }

    fn joined(&self, name: &str) -> Option<Cow<'_, str>> {
        let mut values = self
            .all(name)
            .iter()
            .filter_map(|value| value.to_str().ok());
        let first = values.next()?;
        match values.next() {
            None => Some(Cow::Borrowed(first)),
            Some(second) => {
                let mut joined = format!("{first},{second}");
                for value in values {
                    joined.push(',');
                    joined.push_str(value);
                }
                Some(Cow::Owned(joined))
            }
        }
    }
}

fn peer(extensions: &http::Extensions) -> Option<SocketAddr> {
    if let Some(PeerAddr(address)) = extensions.get::<PeerAddr>() {
        return Some(*address);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(address)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*address);
    }
    extensions.get::<SocketAddr>().copied()
}

fn route(extensions: &http::Extensions) -> Option<&str> {
    #[cfg(feature = "axum")]
    if let Some(matched) = extensions.get::<axum::extract::MatchedPath>() {
        return Some(matched.as_str());
    }
    let _ = extensions;
    None
}

/// The attributes of `parts` that policies look at.
pub(crate) fn attributes<'a>(
    parts: &'a http::request::Parts,
    headers: &'a Headers<'a>,
    body: &impl http_body::Body,
) -> Request<'a> {
    // The standard fields by their constants: looked up by text, each name is parsed and
    // hashed byte by byte on every request.
    let field = |name| {
        parts
            .headers
            .get(name)
            .and_then(|value: &http::HeaderValue| value.to_str().ok())
    };
    let mut request = Request::new(parts.method.as_str(), parts.uri.path());
    request.host = parts.uri.host().or_else(|| field(http::header::HOST));
    request.route = route(&parts.extensions);
    request.peer = peer(&parts.extensions).map(|address| address.ip());
    request.headers = headers;
    request.content_length = field(http::header::CONTENT_LENGTH)
        .and_then(|value| value.trim().parse().ok())
        .or_else(|| body.size_hint().exact())
        .or_else(|| body.is_end_stream().then_some(0));
    request.length_unknown = request.content_length.is_none();
    request.body_digest = parts.extensions.get::<BodyDigest>().map(|digest| digest.0);
    if let Some(identity) = parts.extensions.get::<Identity>() {
        request = request.with_identity(identity);
    }
    request
}

/// Rewrites the request's path to the form the policies match (see
/// [`tollgate::policy::normalize_path`]), so that the inner service is handed the request the
/// limits were decided for, never one it would route elsewhere. A path servers read in
/// different ways is left alone: the policies refuse it.
pub(crate) fn normalize_path(parts: &mut http::request::Parts) {
    let Ok(std::borrow::Cow::Owned(path)) = tollgate::policy::normalize_path(parts.uri.path())
    else {
        return;
    };
    let target = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let Ok(target) = http::uri::PathAndQuery::try_from(target) else {
        return;
    };
    let mut uri = parts.uri.clone().into_parts();
    uri.path_and_query = Some(target);
    if let Ok(uri) = http::Uri::from_parts(uri) {
        parts.uri = uri;
    }
}

/// Whether the request is gRPC (answered with gRPC statuses instead of HTTP ones).
pub(crate) fn is_grpc(parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}
