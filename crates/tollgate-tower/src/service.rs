//! The service: decide, then refuse, delay or forward.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tokio::sync::Semaphore;
use tollgate::policy::{Action, Reason, Refusal};
use tollgate::{Limiter, Store};
use tower::Service;

use crate::body::{Completion, RateLimitBody};
use crate::hooks::Hooks;
use crate::replay::{Lookup, Replays};
use crate::request::{Headers, attributes, is_grpc, normalize_path};
use crate::response::{Answering, add_fields, effective_status, refusal, undecidable, undecided};

/// The rate-limiting service around `Inner`; see [`RateLimitLayer`](crate::RateLimitLayer).
#[derive(Debug)]
pub struct RateLimitService<Inner, S> {
    inner: Inner,
    /// What decides, and how many requests may wait out a delay at once: shared by every
    /// service of one layer.
    shared: Shared<S>,
}

#[derive(Debug)]
pub(crate) struct Shared<S> {
    pub(crate) limiter: Limiter<S>,
    pub(crate) delayed: Arc<Semaphore>,
    /// The first answers of idempotent requests, to replay.
    pub(crate) replays: Arc<Replays>,
    /// The application's key function and refusal answer, if any.
    pub(crate) hooks: Hooks,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            delayed: Arc::clone(&self.delayed),
            replays: Arc::clone(&self.replays),
            hooks: self.hooks.clone(),
        }
    }
}

impl<Inner, S> RateLimitService<Inner, S> {
    pub(crate) fn new(inner: Inner, shared: Shared<S>) -> Self {
        Self { inner, shared }
    }
}

impl<Inner: Clone, S> Clone for RateLimitService<Inner, S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    ReqBody: Body + Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    S: Store,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = Inner::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was driven to readiness takes the request; a fresh clone stays behind.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let layer = self.shared.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            normalize_path(&mut parts);
            let grpc = is_grpc(&parts);
            let custom_key = layer.hooks.key.as_ref().and_then(|key| key(&parts));
            let headers = Headers(&parts.headers);
            let mut request = attributes(&parts, &headers, &body);
            request.custom_key = custom_key.as_deref();
            let outcome = layer.limiter.evaluate(&request).await;
            let answering = Answering {
                grpc,
                hook: layer.hooks.on_refusal.as_ref(),
                request: &parts,
            };
            let policies = layer.limiter.policies();
            let families = policies
                .as_deref()
                .map_or(&[][..], |policies| policies.header_families());
            let evaluation = match outcome {
                Ok(evaluation) => Arc::new(evaluation),
                Err(error) => return Ok(undecidable(&error, answering)),
            };
            if let Some(idempotent) = evaluation.idempotent.as_ref().filter(|i| i.replay) {
                return Ok(replay(&layer.replays, &idempotent.key, answering));
            }
            // From here, a request that does not go ahead gives back what it took.
            let mut completion = Completion::new(layer.limiter.clone(), Arc::clone(&evaluation));
            let _permit = match &evaluation.action {
                Action::Refuse(_) => return Ok(refusal(&evaluation, families, answering)),
                Action::Allow => None,
                Action::Delay(delay) => match Arc::clone(&layer.delayed).try_acquire_owned() {
                    Ok(permit) => {
                        tokio::time::sleep(*delay).await;
                        Some(permit)
                    }
                    Err(_) => {
                        return Ok(too_many_waiting(&evaluation, *delay, families, answering));
                    }
                },
            };
            completion.forwarded();
            let recorded = first_of_replays(&evaluation, policies.as_deref(), grpc);
            if let Some((key, window, _)) = &recorded {
                layer.replays.begin(key, *window);
            }
            // A body read for its usage must come as it is: no compression asked for.
            if evaluation.reads_response_body() {
                parts.headers.remove(http::header::ACCEPT_ENCODING);
            }
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let status = effective_status(&response);
            // The refund lands before the client sees the failure, so a retry right after it
            // finds its unit back. A refund that fails only leaves the unit spent.
            let refunded = evaluation.refunds_on(status);
            if refunded {
                let _ = layer.limiter.refund_for_status(&evaluation, status).await;
            }
            let (mut parts, body) = response.into_parts();
            completion.response_head(status, &parts.headers);
            add_fields(&mut parts.headers, evaluation.header_fields(families));
            if let Some((key, _, max_body)) = recorded {
                // A refunded request gave its record back: its retry is served afresh.
                if refunded {
                    layer.replays.forget(&key);
                } else {
                    let replays = Arc::clone(&layer.replays);
                    completion.record(replays, key, &parts, max_body);
                }
            }
            Ok(Response::from_parts(
                parts,
                RateLimitBody::inner(body, completion),
            ))
        })
    }
}

/// The record key, window and largest kept answer of an admitted idempotent request whose
/// first answer is kept for its replays (not over gRPC, whose answers end in trailers).
fn first_of_replays(
    evaluation: &tollgate::Evaluation,
    policies: Option<&tollgate::Policies>,
    grpc: bool,
) -> Option<(String, Duration, usize)> {
    let idempotent = evaluation.idempotent.as_ref()?;
    let settings = policies?.config().idempotency.as_ref()?;
    (!grpc).then(|| {
        let max_body = usize::try_from(settings.max_body).unwrap_or(usize::MAX);
        (idempotent.key.clone(), settings.window, max_body)
    })
}

/// The answer to a replay of an idempotent request: its first answer when it is kept here,
/// else `409` (still under way, or not kept): never a fresh pass to the inner service.
fn replay<B>(replays: &Replays, key: &str, answering: Answering<'_>) -> Response<RateLimitBody<B>> {
    let detail = match replays.lookup(key) {
        Lookup::Answered(stored) => {
            let mut response = Response::new(RateLimitBody::full(stored.body.clone()));
            *response.status_mut() = stored.status;
            *response.headers_mut() = stored.headers.clone();
            response.headers_mut().append(
                http::HeaderName::from_static("idempotent-replayed"),
                http::HeaderValue::from_static("true"),
            );
            return response;
        }
        Lookup::UnderWay => {
            "a request with this idempotency key is under way; repeat it once it has been answered"
        }
        Lookup::Missing => {
            "a request with this idempotency key was answered and its answer is not kept here (too large, answered elsewhere, or expired); to do it again, send a new key"
        }
    };
    undecided(
        &Refusal {
            reason: Reason::Conflict,
            retry_after: None,
            detail: detail.to_owned(),
        },
        answering,
    )
}

/// The refusal of a request that would have waited while too many others already do.
fn too_many_waiting<B>(
    evaluation: &tollgate::Evaluation,
    delay: Duration,
    families: &[tollgate::policy::HeaderFamily],
    answering: Answering<'_>,
) -> Response<RateLimitBody<B>> {
    let mut refused = evaluation.clone();
    refused.action = Action::Refuse(Refusal {
        reason: Reason::OverLimit,
        retry_after: Some(delay),
        detail: "too many requests are already waiting for their turn".to_owned(),
    });
    refusal(&refused, families, answering)
}
