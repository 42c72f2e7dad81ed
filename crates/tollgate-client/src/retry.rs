//! Retrying 429 and 503 politely: as long as the response advises (`Retry-After`, or the
//! `RateLimit` field's `t`), otherwise with exponential backoff and full jitter; within a number
//! of attempts and an overall deadline; and never for a request that is not idempotent unless
//! told to.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, Request, Response, StatusCode};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::advice::{DEFAULT_MAX_WAIT, advised_wait};

/// When and how long to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. Default 5.
    pub max_attempts: u32,
    /// No retry starts past this long after the first attempt. Default 60 s.
    pub deadline: Duration,
    /// The first backoff's ceiling when the response advises nothing. Default 100 ms.
    pub base: Duration,
    /// The largest backoff ceiling. Default 10 s.
    pub max_backoff: Duration,
    /// The longest wait a response may ask for. Default 60 s.
    pub max_wait: Duration,
    /// Retry POST and PATCH too (only if the server deduplicates them). Default false.
    pub retry_non_idempotent: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            deadline: Duration::from_secs(60),
            base: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_wait: DEFAULT_MAX_WAIT,
            retry_non_idempotent: false,
        }
    }
}

fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

impl RetryPolicy {
    /// The wait before the next attempt, after `attempts` attempts, the last answered with
    /// `status` and `headers`, `elapsed` since the first; `None` to stop and hand the response
    /// back.
    pub fn wait_before_retry(
        &self,
        attempts: u32,
        method: &Method,
        status: StatusCode,
        headers: &HeaderMap,
        elapsed: Duration,
    ) -> Option<Duration> {
        let retryable =
            status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
        if !retryable
            || attempts >= self.max_attempts
            || !(self.retry_non_idempotent || idempotent(method))
        {
            return None;
        }
        let wait = advised_wait(headers, SystemTime::now(), self.max_wait)
            .unwrap_or_else(|| self.backoff(attempts));
        (elapsed.saturating_add(wait) <= self.deadline).then_some(wait)
    }

    /// Full jitter: anywhere from nothing to `base * 2^(attempts - 1)`, capped.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let doublings = attempts.saturating_sub(1).min(31);
        let ceiling = self
            .base
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff);
        let micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(fastrand::u64(0..=micros))
    }
}

/// What a retry layer did, for metrics and tests.
#[derive(Debug, Default)]
pub struct RetryLog {
    retries: AtomicU64,
    waited_micros: AtomicU64,
    gave_up: AtomicU64,
}

impl RetryLog {
    /// Retries made.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Time spent waiting before retries.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.waited_micros.load(Ordering::Relaxed))
    }

    /// Responses handed back still 429 or 503 (attempts, deadline or method said stop).
    pub fn gave_up(&self) -> u64 {
        self.gave_up.load(Ordering::Relaxed)
    }

    /// Counts a retry and waits before it.
    pub(crate) async fn pause(&self, wait: Duration) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        self.waited_micros.fetch_add(
            u64::try_from(wait.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        tokio::time::sleep(wait).await;
    }

    pub(crate) fn record_end(&self, status: StatusCode) {
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            self.gave_up.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A tower layer retrying 429 and 503 by a [`RetryPolicy`]; request bodies must be `Clone`
/// (such as `Full<Bytes>`), as a retry sends the same request again.
#[derive(Debug, Clone)]
pub struct RetryLayer {
    policy: Arc<RetryPolicy>,
    log: Arc<RetryLog>,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
            log: Arc::default(),
        }
    }

    /// What the services of this layer have done.
    pub fn log(&self) -> Arc<RetryLog> {
        Arc::clone(&self.log)
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            policy: Arc::clone(&self.policy),
            log: Arc::clone(&self.log),
        }
    }
}

/// The service of [`RetryLayer`].
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    policy: Arc<RetryPolicy>,
    log: Arc<RetryLog>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Clone + Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let (policy, log) = (Arc::clone(&self.policy), Arc::clone(&self.log));
        Box::pin(async move {
            let started = Instant::now();
            let mut attempts = 0;
            loop {
                attempts += 1;
                let response = inner.ready().await?.call(request.clone()).await?;
                let wait = policy.wait_before_retry(
                    attempts,
                    request.method(),
                    response.status(),
                    response.headers(),
                    started.elapsed(),
                );
                match wait {
                    Some(wait) => {
                        drop(response);
                        log.pause(wait).await;
                    }
                    None => {
                        log.record_end(response.status());
                        return Ok(response);
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        fields
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_static(name),
                    http::HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn only_429_and_503_of_idempotent_requests_within_the_limits_are_retried() {
        let policy = RetryPolicy::default();
        let advised = headers(&[("retry-after", "3")]);
        let wait = |attempts, method: Method, status: u16, elapsed| {
            policy.wait_before_retry(
                attempts,
                &method,
                StatusCode::from_u16(status).expect("a status"),
                &advised,
                Duration::from_secs(elapsed),
            )
        };
        assert_eq!(wait(1, Method::GET, 429, 0), Some(Duration::from_secs(3)));
        assert_eq!(wait(1, Method::PUT, 503, 0), Some(Duration::from_secs(3)));
        assert_eq!(wait(1, Method::GET, 500, 0), None, "not a limit");
        assert_eq!(wait(1, Method::POST, 429, 0), None, "not idempotent");
        assert_eq!(wait(5, Method::GET, 429, 0), None, "out of attempts");
        assert_eq!(wait(1, Method::GET, 429, 58), None, "past the deadline");
        let told = RetryPolicy {
            retry_non_idempotent: true,
            ..RetryPolicy::default()
        };
        assert!(
            told.wait_before_retry(
                1,
                &Method::POST,
                StatusCode::TOO_MANY_REQUESTS,
                &advised,
                Duration::ZERO
            )
            .is_some()
        );
    }

    #[test]
    fn without_advice_the_backoff_is_jittered_under_a_doubling_ceiling() {
        let policy = RetryPolicy::default();
        for attempts in 1..=10u32 {
            let ceiling = (policy.base * (1 << (attempts - 1))).min(policy.max_backoff);
            for _ in 0..50 {
                assert!(policy.backoff(attempts) <= ceiling);
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..50).map(|_| policy.backoff(4)).collect();
        assert!(spread.len() > 10, "full jitter spreads the waits");
        assert!(policy.backoff(u32::MAX) <= policy.max_backoff);
    }
}
