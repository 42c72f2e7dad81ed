//! What every request of a connection goes through before its lanes and router: the bounds on
//! its head, the connection's addresses for the handlers, and the count of requests under way
//! that keeps a connection with an answer still being sent from being closed as idle; past its
//! age, the answer that closes an HTTP/1 connection. One concrete
//! service in front of the router, not a router layer: a layer wraps every route in a clone of
//! the inner service and a boxed future, and the request in one more boxed extension, for
//! every request.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::CONNECTION;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::future::RouteFuture;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};

use super::registry::{ConnectionHandle, InFlight};
use super::{LocalAddr, MAX_URI_BYTES};
use crate::api::ApiError;
use crate::lane::{App, LaneFuture};

/// The bounds on a request head.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadLimits {
    /// The most bytes of header fields (names and values).
    pub(super) bytes: usize,
    /// The most header fields.
    pub(super) fields: usize,
}

/// The routes of one connection, with what its requests carry in and are counted by.
#[derive(Clone)]
pub(super) struct ConnectionService {
    pub(super) app: App,
    pub(super) peer: SocketAddr,
    pub(super) local: Option<LocalAddr>,
    pub(super) handle: ConnectionHandle,
    pub(super) heads: HeadLimits,
}

impl tower::Service<axum::http::Request<Incoming>> for ConnectionService {
    type Response = Response<CountedBody>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<axum::http::Request<Incoming>>::poll_ready(&mut self.app.router, cx)
    }

    fn call(&mut self, mut request: axum::http::Request<Incoming>) -> Answer {
        let http1 = self.note_version(&request);
        if let Some(mut refusal) = head_over_limits(self.heads, request.uri(), request.headers()) {
            if http1 && self.handle.tracked.past_age.load(Ordering::Relaxed) {
                say_close(&mut refusal);
            }
            return Answer::Refused {
                response: Some(refusal),
            };
        }
        let in_flight = Some(self.handle.begin());
        if let Some(lane) = self.app.lane(&request) {
            if lane.wants_addresses() {
                with_addresses(&mut request, self.peer, self.local);
            }
            return Answer::Lane {
                future: lane.answer(request.map(Body::new)),
                in_flight,
                http1,
                first: true,
            };
        }
        with_addresses(&mut request, self.peer, self.local);
        Answer::Routed {
            future: self.app.router.call(request),
            in_flight,
            http1,
            first: true,
        }
    }
}

impl ConnectionService {
    /// Whether `request` came over HTTP/1; an HTTP/2 one marks its connection as HTTP/2,
    /// and, on a connection past its age, wakes the connection's task to send GOAWAY (which
    /// leaves this stream to finish).
    fn note_version<B>(&self, request: &axum::http::Request<B>) -> bool {
        if request.version() < Version::HTTP_2 {
            return true;
        }
        let tracked = &self.handle.tracked;
        if !tracked.http2.load(Ordering::Relaxed) {
            tracked.http2.store(true, Ordering::Relaxed);
        }
        if tracked.past_age.load(Ordering::Relaxed) {
            tracked.used_past_age.notify_one();
        }
        false
    }
}

/// Makes `response` close its HTTP/1 connection once sent: the client reads the field and opens
/// a new connection for its next request, where closing the connection after an answer that
/// did not say so could meet a request the client is already sending on it.
fn say_close<B>(response: &mut Response<B>) {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
}

/// Hands the connection's addresses to the request's handler.
fn with_addresses<B>(
    request: &mut axum::http::Request<B>,
    peer: SocketAddr,
    local: Option<LocalAddr>,
) {
    let extensions = request.extensions_mut();
    extensions.insert(ConnectInfo(peer));
    if let Some(local) = local {
        extensions.insert(local);
    }
}

pin_project_lite::pin_project! {
    /// The answer to one request: refused for its head, a lane's, or the router's; `first`
    /// until it is polled. One decided at its first poll on a busy thread is `Held` until
    /// the next (`super::burst`).
    #[project = AnswerProjection]
    pub(super) enum Answer {
        Refused { response: Option<Response> },
        Lane { future: LaneFuture, in_flight: Option<InFlight>, http1: bool, first: bool },
        Routed {
            #[pin]
            future: RouteFuture<Infallible>,
            in_flight: Option<InFlight>,
            http1: bool,
            first: bool,
        },
        Held { response: Option<Response<CountedBody>> },
    }
}

impl Future for Answer {
    type Output = Result<Response<CountedBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut response, in_flight, http1, first) = match self.as_mut().project() {
            AnswerProjection::Refused { response } => {
                (response.take().unwrap_or_default(), None, false, false)
            }
            AnswerProjection::Lane {
                future,
                in_flight,
                http1,
                first,
            } => {
                let first = std::mem::take(first);
                let response = ready!(future.as_mut().poll(cx));
                (response, in_flight.take(), *http1, first)
            }
            AnswerProjection::Routed {
                future,
                in_flight,
                http1,
                first,
            } => {
                let first = std::mem::take(first);
                let Ok(response) = ready!(future.poll(cx));
                (response, in_flight.take(), *http1, first)
            }
            AnswerProjection::Held { response } => {
                return Poll::Ready(Ok(response.take().unwrap_or_else(|| {
                    Response::default().map(|body| CountedBody {
                        body,
                        _in_flight: None,
                    })
                })));
            }
        };
        // Decided as the head is made, so that a request under way when its connection
        // reached its age closes it too.
        if http1
            && let Some(in_flight) = &in_flight
            && in_flight.past_age()
        {
            say_close(&mut response);
        }
        let response = response.map(|body| CountedBody {
            body,
            _in_flight: in_flight,
        });
        // Decided as its request was read, on a thread busy with other connections: it
        // leaves with theirs, after they have been read too.
        if first && http1 && super::burst::hold() {
            self.set(Answer::Held {
                response: Some(response),
            });
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(response))
    }
}

/// An answer's body, holding its request's place among those under way until it is sent (or
/// dropped). Its size hint is the body's, so a body of known length is still sent with
/// `content-length` rather than chunked.
pub(super) struct CountedBody {
    body: Body,
    _in_flight: Option<InFlight>,
}

impl hyper::body::Body for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The answer for a request head over `limits`, if it is.
fn head_over_limits(limits: HeadLimits, uri: &Uri, headers: &HeaderMap) -> Option<Response> {
    let refusal = |status, detail| Some(ApiError { status, detail }.into_response());
    let target = uri.path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        return refusal(
            StatusCode::URI_TOO_LONG,
            format!("the request target is {target} bytes long, the maximum is {MAX_URI_BYTES}"),
        );
    }
    if headers.len() > limits.fields {
        return refusal(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "the request has {} header fields, the maximum is {}",
                headers.len(),
                limits.fields
            ),
        );
    }
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if bytes > limits.bytes {
        return refusal(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "the request's header fields take {bytes} bytes, the maximum is {}",
                limits.bytes
            ),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// A waker that counts its wakes.
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A lane's answer over HTTP/1 or not, made by `answer`.
    fn lane(answer: LaneFuture, http1: bool) -> Answer {
        Answer::Lane {
            future: answer,
            in_flight: None,
            http1,
            first: true,
        }
    }

    /// An answer with status `status`, ready at once.
    fn ready(status: StatusCode) -> LaneFuture {
        Box::pin(std::future::ready((status, "").into_response()))
    }

    /// Polls `answer` once: its status if it is ready.
    fn status_of(answer: &mut Pin<Box<Answer>>, wakes: &Arc<Wakes>) -> Poll<StatusCode> {
        let waker = Arc::clone(wakes).into();
        answer
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .map(|Ok(response)| response.status())
    }

    #[test]
    fn an_answer_decided_at_once_on_a_busy_thread_leaves_at_the_next_poll() {
        super::super::burst::worker_parks();
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let mut first = Box::pin(lane(ready(StatusCode::OK), true));
        assert_eq!(status_of(&mut first, &wakes), Poll::Ready(StatusCode::OK));
        let mut second = Box::pin(lane(ready(StatusCode::ACCEPTED), true));
        assert_eq!(status_of(&mut second, &wakes), Poll::Pending);
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            1,
            "its task is woken to come back"
        );
        assert_eq!(
            status_of(&mut second, &wakes),
            Poll::Ready(StatusCode::ACCEPTED)
        );
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn answers_that_waited_or_are_not_http1_are_not_held() {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        // A thread whose runtime never says it parks.
        let mut unknown = Box::pin(lane(ready(StatusCode::OK), true));
        assert_eq!(status_of(&mut unknown, &wakes), Poll::Ready(StatusCode::OK));
        super::super::burst::worker_parks();
        let mut first = Box::pin(lane(ready(StatusCode::OK), true));
        assert_eq!(status_of(&mut first, &wakes), Poll::Ready(StatusCode::OK));
        // Busy now: an HTTP/2 stream's answer goes with its connection's others already.
        let mut http2 = Box::pin(lane(ready(StatusCode::CREATED), false));
        assert_eq!(
            status_of(&mut http2, &wakes),
            Poll::Ready(StatusCode::CREATED)
        );
        // One that waited for something had its task woken for it then.
        let mut waited = false;
        let later: LaneFuture = Box::pin(std::future::poll_fn(move |cx| {
            if std::mem::replace(&mut waited, true) {
                Poll::Ready((StatusCode::ACCEPTED, "").into_response())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }));
        let mut waiting = Box::pin(lane(later, true));
        assert_eq!(status_of(&mut waiting, &wakes), Poll::Pending);
        assert_eq!(
            status_of(&mut waiting, &wakes),
            Poll::Ready(StatusCode::ACCEPTED)
        );
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            1,
            "woken by what it waited for only"
        );
    }
}
