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
            };
        }
        with_addresses(&mut request, self.peer, self.local);
        Answer::Routed {
            future: self.app.router.call(request),
            in_flight,
            http1,
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
    /// The answer to one request: refused for its head, a lane's, or the router's.
    #[project = AnswerProjection]
    pub(super) enum Answer {
        Refused { response: Option<Response> },
        Lane { future: LaneFuture, in_flight: Option<InFlight>, http1: bool },
        Routed {
            #[pin]
            future: RouteFuture<Infallible>,
            in_flight: Option<InFlight>,
            http1: bool,
        },
    }
}

impl Future for Answer {
    type Output = Result<Response<CountedBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut response, in_flight, http1) = match self.project() {
            AnswerProjection::Refused { response } => {
                (response.take().unwrap_or_default(), None, false)
            }
            AnswerProjection::Lane {
                future,
                in_flight,
                http1,
            } => (ready!(future.as_mut().poll(cx)), in_flight.take(), *http1),
            AnswerProjection::Routed {
                future,
                in_flight,
                http1,
            } => {
                let Ok(response) = ready!(future.poll(cx));
                (response, in_flight.take(), *http1)
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
        Poll::Ready(Ok(response.map(|body| CountedBody {
            body,
            _in_flight: in_flight,
        })))
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
