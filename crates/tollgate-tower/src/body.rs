//! The response body, watched: when it ends or is dropped the request's concurrency slots are
//! released, and a gRPC error status in its trailers refunds the request when a policy says so.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tollgate::{Evaluation, Limiter, Store};

/// What happens when a request is done with; runs at most once, on a tokio task.
pub(crate) struct Completion {
    finish: Option<Box<dyn FnOnce(Outcome) + Send>>,
    outcome: Outcome,
    refund_on_grpc_error: bool,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It never reached the inner service: give back everything it took.
    Cancelled,
    /// It was forwarded: release its slots.
    Forwarded,
    /// Its gRPC response failed and its policies refund on failures: refund and release.
    Failed,
}

impl Completion {
    pub(crate) fn new<S: Store>(limiter: Limiter<S>, evaluation: Arc<Evaluation>) -> Self {
        let refund_on_grpc_error = evaluation.refunds_on(500);
        let holds_slots = evaluation.holds_slots();
        let finish = move |outcome: Outcome| {
            // A forwarded request without slots has nothing to give back: no task for it.
            if outcome == Outcome::Forwarded && !holds_slots {
                return;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            runtime.spawn(async move {
                // Failing to give back only leaves the request counted: fewer admissions, never more.
                let _ = match outcome {
                    Outcome::Cancelled => limiter.cancel(&evaluation).await,
                    Outcome::Forwarded => limiter.release(&evaluation).await,
                    Outcome::Failed => match limiter.refund_for_status(&evaluation, 500).await {
                        Ok(()) => limiter.release(&evaluation).await,
                        Err(error) => Err(error),
                    },
                };
            });
        };
        Self {
            finish: Some(Box::new(finish)),
            outcome: Outcome::Cancelled,
            refund_on_grpc_error,
        }
    }

    /// The request has gone to the inner service.
    pub(crate) fn forwarded(&mut self) {
        self.outcome = Outcome::Forwarded;
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        let failed = trailers
            .get("grpc-status")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|status| status != "0");
        if failed && self.refund_on_grpc_error {
            self.outcome = Outcome::Failed;
        }
    }

    fn finish(&mut self) {
        if let Some(finish) = self.finish.take() {
            finish(self.outcome);
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
            KindProjection::Inner { body, completion } => {
                let polled = body.poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(trailers), Some(completion)) =
                            (frame.trailers_ref(), completion.as_mut())
                        {
                            completion.trailers(trailers);
                        }
                    }
                    Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                        // Done: release now rather than when the body value is dropped later.
                        drop(completion.take());
                    }
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
