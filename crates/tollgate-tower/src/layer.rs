//! The layer: one limiter, shared by every service it wraps.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tokio::sync::Semaphore;
use tollgate::{Limiter, MemoryStore, Store};
use tower::Layer;

use crate::hooks::{Hooks, Refused};
use crate::service::{RateLimitService, Shared};

/// Applies a [`Limiter`]'s policies to every request of the services it wraps.
#[derive(Debug)]
pub struct RateLimitLayer<S = MemoryStore> {
    shared: Shared<S>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// A layer deciding by `limiter`'s policies. At most the policies' `max_delayed` requests
    /// wait out a delay at once.
    pub fn new(limiter: Limiter<S>) -> Self {
        let max_delayed = limiter.policies().map_or(1024, |p| p.config().max_delayed);
        Self {
            shared: Shared {
                limiter,
                delayed: Arc::new(Semaphore::new(max_delayed)),
                replays: Arc::default(),
                hooks: Hooks::default(),
            },
        }
    }

    /// Answers the requests the layer refuses (over a limit, deny-listed, the store unable to
    /// decide, ...) with `hook`'s response instead of Tollgate's problem+json: a page in the
    /// site's own style, a JSON error in the API's own shape. The rate-limit fields
    /// (`Retry-After`, `RateLimit`, ...) are added to it, except those it sets itself. gRPC
    /// calls are still refused with a status.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use tollgate_tower::RateLimitLayer;
    ///
    /// # fn main() -> Result<(), tollgate_tower::BuildError> {
    /// let layer = RateLimitLayer::per_minute(60).build()?.on_refusal(|refused| {
    ///     Response::builder()
    ///         .status(refused.status())
    ///         .header("content-type", "text/plain")
    ///         .body(format!("slow down: {}", refused.detail()))
    ///         .unwrap_or_default()
    /// });
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_refusal<F, B>(mut self, hook: F) -> Self
    where
        F: Fn(&Refused<'_>) -> Response<B> + Send + Sync + 'static,
        B: Into<Bytes>,
    {
        self.shared.hooks.on_refusal = Some(Hooks::refusal_fn(hook));
        self
    }

    pub(crate) fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.shared.hooks = hooks;
        self
    }

    /// The limiter.
    pub fn limiter(&self) -> &Limiter<S> {
        &self.shared.limiter
    }
}

impl<S: Store, Inner> Layer<Inner> for RateLimitLayer<S> {
    type Service = RateLimitService<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        RateLimitService::new(inner, self.shared.clone())
    }
}
