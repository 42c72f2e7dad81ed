//! The layer: one limiter, shared by every service it wraps.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tollgate::{Limiter, MemoryStore, Store};
use tower::Layer;

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
            },
        }
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
