//! The response body, watched: when it ends or is dropped the request's concurrency slots are
//! released, a gRPC status of a server failure in its trailers refunds the request when a policy
//! says so (only if no message was delivered before it: a stream that served its client keeps
//! its charge, whatever ends it), and the usage it reports settles the policies that charge by
//! usage.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tollgate::usage::{Usage, UsageMeter};
use tollgate::{Evaluation, Limiter, Store};

use crate::replay::Replays;

/// Gives back, settles and releases what a request took, by how it ended.
type Finish = Box<dyn FnOnce(Outcome, Option<Usage>) + Send>;

/// What happens when a request is done with; runs at most once, on a tokio task.
pub(crate) struct Completion {
    finish: Option<Finish>,
    outcome: Outcome,
    evaluation: Arc<Evaluation>,
    /// Whether any of the response's data reached the client.
    delivered: bool,
    /// Reads what the response says the request used, for policies that settle by usage.
    meter: Option<UsageMeter>,
    /// Keeps the answer of an idempotent request for its replays.
    recording: Option<Recording>,
}

/// The answer of an idempotent request, as it is sent, kept for its replays once whole.
struct Recording {
    replays: Arc<Replays>,
    key: String,
    status: http::StatusCode,
    headers: HeaderMap,
    body: bytes::BytesMut,
    max_body: usize,
    /// Set once the whole answer is kept.
    kept: bool,
}

impl Recording {
    /// Keeps the whole answer for the replays.
    fn keep(mut self) {
        let stored = crate::replay::Stored {
            status: self.status,
            headers: std::mem::take(&mut self.headers),
            body: std::mem::take(&mut self.body).freeze(),
        };
        self.replays.answered(&self.key, stored);
        self.kept = true;
    }

    fn data(&mut self, data: &Bytes) -> Option<()> {
        if self.body.len() + data.len() > self.max_body {
            return None;
        }
        self.body.extend_from_slice(data);
        Some(())
    }
}

impl Drop for Recording {
    /// A recording dropped before the answer was whole keeps nothing.
    fn drop(&mut self) {
        if !self.kept {
            self.replays.forget(&self.key);
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It never reached the inner service: give back everything it took.
    Cancelled,
    /// It was forwarded: settle its usage and release its slots.
    Forwarded,
    /// Its gRPC response failed on the server's side, with this status (as HTTP's classes
    /// count it), before anything was delivered, and its policies refund on it: refund, settle
    /// the usage of the others, and release.
    Failed(u16),
}

impl Completion {
    pub(crate) fn new<S: Store>(limiter: Limiter<S>, evaluation: Arc<Evaluation>) -> Self {
        let holds_slots = evaluation.holds_slots();
        let shared = Arc::clone(&evaluation);
        let finish = move |outcome: Outcome, usage: Option<Usage>| {
            // A forwarded request without slots or usage has nothing to settle: no task for it.
            if outcome == Outcome::Forwarded && !holds_slots && usage.is_none() {
                return;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            runtime.spawn(async move {
                // Failing to give back only leaves the request counted: fewer admissions, never
                // more. Failing to settle leaves the estimate charged.
                if outcome == Outcome::Cancelled {
                    let _ = limiter.cancel(&shared).await;
                    return;
                }
                if let Outcome::Failed(status) = outcome {
                    let _ = limiter.refund_for_status(&shared, status).await;
                }
                if let Some(usage) = usage {
                    let _ = limiter.settle_usage(&shared, &usage).await;
                }
                let _ = limiter.release(&shared).await;
            });
        };
        Self {
            finish: Some(Box::new(finish)),
            outcome: Outcome::Cancelled,
            evaluation,
            delivered: false,
            meter: None,
            recording: None,
        }
    }

    /// The request has gone to the inner service.
    pub(crate) fn forwarded(&mut self) {
        self.outcome = Outcome::Forwarded;
    }

    /// The response's head has come, with `status` (a gRPC status mapped to HTTP's classes):
    /// start reading its usage.
    pub(crate) fn response_head(&mut self, status: u16, headers: &HeaderMap) {
        self.meter = self.evaluation.usage_meter(status).map(|mut meter| {
            meter.head(|name| headers.get(name).map(|value| value.as_bytes()));
            meter
        });
    }

    /// Keeps the answer under `key` for the replays of its request, once it is whole and if
    /// its body is at most `max_body` bytes.
    pub(crate) fn record(
        &mut self,
        replays: Arc<Replays>,
        key: String,
        head: &http::response::Parts,
        max_body: usize,
    ) {
        self.recording = Some(Recording {
            replays,
            key,
            status: head.status,
            headers: head.headers.clone(),
            body: bytes::BytesMut::new(),
            max_body,
            kept: false,
        });
    }

    fn data(&mut self, data: &Bytes) {
        self.delivered |= !data.is_empty();
        if let Some(recording) = &mut self.recording
            && recording.data(data).is_none()
        {
            self.recording = None;
        }
        if let Some(meter) = &mut self.meter {
            meter.data(data);
        }
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        // An answer with trailers cannot be replayed as it was.
        self.recording = None;
        // A status after delivered messages ends a stream that served its client: whatever it
        // says (a deadline the client set, a cancel, even a server error midway), nothing is
        // refunded.
        let failed = trailers
            .get(crate::grpc_status::GRPC_STATUS)
            .and_then(|value| value.to_str().ok())
            .map(crate::grpc_status::http_class)
            .filter(|status| *status >= 500 && !self.delivered);
        if let Some(status) = failed
            && self.evaluation.refunds_on(status)
        {
            self.outcome = Outcome::Failed(status);
        }
        if let Some(meter) = &mut self.meter {
            if let Some(status) = failed {
                meter.refunded(&self.evaluation, status);
            }
            meter.trailers(|name| trailers.get(name).map(|value| value.as_bytes()));
        }
    }

    /// The response body has ended, whole.
    fn ended(&mut self) {
        if let Some(recording) = self.recording.take() {
            recording.keep();
        }
        if let Some(meter) = &mut self.meter {
            meter.end();
        }
    }

    fn finish(&mut self) {
        if let Some(finish) = self.finish.take() {
            let usage = self.meter.as_ref().and_then(UsageMeter::usage);
            finish(self.outcome, usage);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.finish();
    }
}

pin_project! {
    /// A response body from the rate limiter: the inner service's, watched, or a refusal's.
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            completion: Option<Completion>,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> RateLimitBody<B> {
    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    pub(crate) fn inner(body: B, completion: Completion) -> Self {
        Self {
            kind: Kind::Inner {
                body,
                completion: Some(completion),
            },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProjection::Full { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(data))))
            }
            KindProjection::Inner {
                mut body,
                completion,
            } => {
                let polled = body.as_mut().poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(watching) = completion.as_mut() {
                            if let Some(data) = frame.data_ref() {
                                watching.data(data);
                            } else if let Some(trailers) = frame.trailers_ref() {
                                watching.trailers(trailers);
                            }
                        }
                        // A server may stop polling a body that says it has ended.
                        if body.is_end_stream()
                            && let Some(mut watching) = completion.take()
                        {
                            watching.ended();
                        }
                    }
                    Poll::Ready(None) => {
                        // Done: settle and release now rather than when the body is dropped.
                        if let Some(mut watching) = completion.take() {
                            watching.ended();
                        }
                    }
                    // Cut: what was estimated stands.
                    Poll::Ready(Some(Err(_))) => drop(completion.take()),
                    Poll::Pending => {}
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data } => data.is_none(),
            Kind::Inner { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Inner { body, .. } => body.size_hint(),
        }
    }
}
