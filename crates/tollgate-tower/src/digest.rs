//! The digest of an idempotent request's body: a request carrying the policies' idempotency
//! header has its body read (up to `idempotency.max_body`) and its SHA-256 put in the request's
//! extensions as a [`BodyDigest`], which the rate limit layer reads. An idempotency key is
//! honoured only with it, so that a key replays only the very same request; a larger body, or
//! one that cannot be read, goes on as it came, uncharged by nothing and charged as any other.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::Either;
use http::Request;
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, StreamBody};
use sha2::{Digest, Sha256};
use tollgate::{Limiter, Store};
use tower::{Layer, Service};

use crate::request::BodyDigest;

/// Digests the bodies of requests that carry the policies' idempotency header; put it outside
/// (after, in axum's `.layer` order) the [`RateLimitLayer`](crate::RateLimitLayer) of the same
/// limiter.
#[derive(Debug)]
pub struct BodyDigestLayer<S> {
    limiter: Limiter<S>,
}

impl<S> Clone for BodyDigestLayer<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
        }
    }
}

impl<S: Store> BodyDigestLayer<S> {
    /// Digests for `limiter`'s policies (their idempotency header and `max_body`).
    pub fn new(limiter: Limiter<S>) -> Self {
        Self { limiter }
    }
}

impl<S: Store, Inner> Layer<Inner> for BodyDigestLayer<S> {
    type Service = BodyDigestService<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        BodyDigestService {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The service of a [`BodyDigestLayer`].
#[derive(Debug)]
pub struct BodyDigestService<Inner, S> {
    inner: Inner,
    limiter: Limiter<S>,
}

impl<Inner: Clone, S> Clone for BodyDigestService<Inner, S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<Inner, S> Service<Request<Body>> for BodyDigestService<Inner, S>
where
    Inner: Service<Request<Body>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    S: Store,
{
    type Response = Inner::Response;
    type Error = Inner::Error;
    /// The inner service's own future when there is no body to read first (no idempotency
    /// key): no box, no layer of polling of its own.
    type Future = Either<Inner::Future, BoxFuture<Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let wanted = self.limiter.policies().and_then(|policies| {
            let idempotency = policies.config().idempotency.as_ref()?;
            request
                .headers()
                .contains_key(idempotency.header.as_str())
                .then(|| usize::try_from(idempotency.max_body).unwrap_or(usize::MAX))
        });
        let Some(max_body) = wanted else {
            return Either::Left(self.inner.call(request));
        };
        // The clone that was driven to readiness takes the request; a fresh clone stays behind.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        Either::Right(Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let (body, digest) = digested(body, max_body).await;
            if let Some(digest) = digest {
                parts.extensions.insert(BodyDigest(digest));
            }
            inner.call(Request::from_parts(parts, body)).await
        }))
    }
}

/// Reads `body` up to `max` bytes: the body as it came (rebuilt from what was read and the
/// rest), and its digest when it was read whole without trailers or errors.
async fn digested(mut body: Body, max: usize) -> (Body, Option<[u8; 32]>) {
    let mut read: Vec<Result<Frame<Bytes>, axum::Error>> = Vec::new();
    let mut hasher = Sha256::new();
    let mut length = 0usize;
    let whole = loop {
        match body.frame().await {
            None => break true,
            Some(Ok(frame)) => {
                let Some(data) = frame.data_ref() else {
                    read.push(Ok(frame));
                    break false;
                };
                length += data.len();
                hasher.update(data);
                read.push(Ok(frame));
                if length > max {
                    break false;
                }
            }
            Some(Err(error)) => {
                read.push(Err(error));
                break false;
            }
        }
    };
    if whole {
        let data: Vec<Bytes> = read
            .into_iter()
            .filter_map(|frame| frame.ok()?.into_data().ok())
            .collect();
        return (Body::from(data.concat()), Some(hasher.finalize().into()));
    }
    let rest = BodyStream::new(body);
    let frames = futures_util::stream::iter(read).chain(rest);
    (Body::new(StreamBody::new(frames)), None)
}
