//! Client-side pacing: read what responses say is left (`RateLimit`, the draft and legacy
//! fields, `Retry-After`) and space requests so that what remains lasts until the limit
//! resets, instead of spending it at once and meeting 429s.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, Request, Response};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::advice::{DEFAULT_MAX_WAIT, limits, retry_after};

/// When the next request may go, shared by every clone of a pacing service.
#[derive(Debug)]
pub struct Pacer {
    next: Mutex<Option<Instant>>,
    max_wait: Duration,
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_WAIT)
    }
}

impl Pacer {
    /// A pacer that never waits longer than `max_wait` for one request.
    pub fn new(max_wait: Duration) -> Self {
        Self {
            next: Mutex::new(None),
            max_wait,
        }
    }

    /// How long to wait now before sending, and takes the slot.
    pub fn wait(&self) -> Duration {
        let next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        next.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        })
    }

    /// Learns from a response: with `r` left until `t`, the next request goes `t / (r + 1)`
    /// from now (the tightest over every reported limit); after `Retry-After`, not before it.
    pub fn observe(&self, headers: &HeaderMap) {
        let now = SystemTime::now();
        let spacing = limits(headers, now)
            .iter()
            .map(|limit| {
                let share = u32::try_from(limit.remaining.saturating_add(1)).unwrap_or(u32::MAX);
                limit.reset / share
            })
            .chain(retry_after(headers, now))
            .max();
        if let Some(spacing) = spacing {
            let at = Instant::now() + spacing.min(self.max_wait);
            *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
        }
    }
}

/// A tower layer pacing requests by what responses report.
#[derive(Debug, Clone, Default)]
pub struct PacingLayer {
    pacer: Arc<Pacer>,
}

impl PacingLayer {
    /// A layer sharing `pacer` (one per rate-limited server).
    pub fn new(pacer: Arc<Pacer>) -> Self {
        Self { pacer }
    }
}

impl<S> Layer<S> for PacingLayer {
    type Service = PacingService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PacingService {
            inner,
            pacer: Arc::clone(&self.pacer),
        }
    }
}

/// The service of [`PacingLayer`].
#[derive(Debug, Clone)]
pub struct PacingService<S> {
    inner: S,
    pacer: Arc<Pacer>,
}

impl<S, B, R> Service<Request<B>> for PacingService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let pacer = Arc::clone(&self.pacer);
        Box::pin(async move {
            let wait = pacer.wait();
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let response = inner.ready().await?.call(request).await?;
            pacer.observe(response.headers());
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn what_is_left_is_spread_until_the_reset() {
        let pacer = Pacer::default();
        assert_eq!(pacer.wait(), Duration::ZERO);
        let mut headers = HeaderMap::new();
        headers.insert(
            "ratelimit",
            r#""a";r=3;t=8, "b";r=99;t=60"#.parse().expect("a value"),
        );
        pacer.observe(&headers);
        assert_eq!(
            pacer.wait(),
            Duration::from_secs(2),
            "3 left for 8 s: one every 2 s"
        );
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(pacer.wait(), Duration::from_millis(500));
        headers.insert("retry-after", "5".parse().expect("a value"));
        pacer.observe(&headers);
        assert_eq!(pacer.wait(), Duration::from_secs(5));
        let mut absurd = HeaderMap::new();
        absurd.insert("retry-after", "99999999".parse().expect("a value"));
        pacer.observe(&absurd);
        assert_eq!(pacer.wait(), DEFAULT_MAX_WAIT, "capped");
    }
}
