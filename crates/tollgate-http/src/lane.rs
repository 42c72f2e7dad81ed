//! Routes taken before the router. Through axum's router a request pays for the path match,
//! the matched path and URL parameters recorded in its extensions, a cloned route service and
//! three layers of futures around the handler's. A lane answers one method and path (or every
//! request) with one boxed future; everything else still goes through the router, so its
//! answers (405 with `Allow`, 404, the other routes) are unchanged. In callgrind a lane saves
//! about 2 600 of 64 000 instructions of a check and 2 200 of 57 000 of a `ShouldRateLimit`
//! call (docs/benchmarks.md).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;

/// The answer of a lane to one request.
pub type LaneFuture = Pin<Box<dyn Future<Output = Response> + Send>>;

/// What answers a lane's requests.
type Answer = Arc<dyn Fn(Request) -> LaneFuture + Send + Sync>;

/// Requests of one method and path (or all requests) and what answers them.
#[derive(Clone)]
pub struct Lane {
    /// `None`: every request.
    route: Option<(Method, &'static str)>,
    answer: Answer,
    /// Whether its requests carry the connection's addresses (`ConnectInfo`, the local
    /// address) in their extensions: by default they do.
    addresses: bool,
}

impl Lane {
    /// Requests with exactly `method` and `path` (the query aside), answered by `answer`.
    pub fn exact(
        method: Method,
        path: &'static str,
        answer: impl Fn(Request) -> LaneFuture + Send + Sync + 'static,
    ) -> Self {
        Self {
            route: Some((method, path)),
            answer: Arc::new(answer),
            addresses: true,
        }
    }

    /// Every request, answered by `answer`.
    pub fn every(answer: impl Fn(Request) -> LaneFuture + Send + Sync + 'static) -> Self {
        Self {
            route: None,
            answer: Arc::new(answer),
            addresses: true,
        }
    }

    /// The lane, for answers that never look at the connection's addresses: its requests are
    /// handed over without them (two allocations and some 450 instructions a request).
    #[must_use]
    pub fn without_addresses(mut self) -> Self {
        self.addresses = false;
        self
    }

    /// Whether the lane's requests carry the connection's addresses.
    pub(crate) fn wants_addresses(&self) -> bool {
        self.addresses
    }

    /// The answer to `request`.
    pub(crate) fn answer(&self, request: Request) -> LaneFuture {
        (self.answer)(request)
    }

    fn takes<B>(&self, request: &axum::http::Request<B>) -> bool {
        self.route.as_ref().is_none_or(|(method, path)| {
            request.method() == method && request.uri().path() == *path
        })
    }
}

impl fmt::Debug for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.route {
            Some((method, path)) => write!(f, "Lane({method} {path})"),
            None => f.write_str("Lane(every request)"),
        }
    }
}

/// What a listener serves: its lanes, tried in order, then its router.
#[derive(Debug, Clone)]
pub struct App {
    pub(crate) router: Router,
    lanes: Arc<[Lane]>,
    /// Whether answers carry a `Date` field (added where the handler set none).
    pub(crate) dated: bool,
}

impl App {
    /// `router` with `lanes` in front of it.
    pub fn new(router: Router, lanes: impl IntoIterator<Item = Lane>) -> Self {
        Self {
            router,
            lanes: lanes.into_iter().collect(),
            dated: true,
        }
    }

    /// The app, its answers without the `Date` field the server otherwise adds: for gRPC,
    /// whose clients read none (grpc-go and Envoy send none either), where encoding a date
    /// that changes every second costs about 1 100 of 51 000 instructions a `ShouldRateLimit`
    /// call (docs/benchmarks.md).
    #[must_use]
    pub fn without_date(mut self) -> Self {
        self.dated = false;
        self
    }

    /// The lane that takes `request`, if one does.
    pub(crate) fn lane<B>(&self, request: &axum::http::Request<B>) -> Option<&Lane> {
        self.lanes.iter().find(|lane| lane.takes(request))
    }
}

impl From<Router> for App {
    fn from(router: Router) -> Self {
        Self::new(router, [])
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::response::IntoResponse as _;
    use axum::routing::post;

    use super::*;

    fn request(method: Method, target: &str) -> Request {
        Request::builder()
            .method(method)
            .uri(target)
            .body(Body::empty())
            .expect("a request")
    }

    fn answering(status: StatusCode) -> impl Fn(Request) -> LaneFuture + Send + Sync + 'static {
        move |_| Box::pin(async move { status.into_response() })
    }

    #[tokio::test]
    async fn an_exact_lane_takes_its_method_and_path_whatever_the_query() {
        let router = Router::new().route("/v1/check", post(|| async { StatusCode::OK }));
        let lane = Lane::exact(Method::POST, "/v1/check", answering(StatusCode::ACCEPTED));
        let app = App::new(router, [lane]);
        for target in [
            "/v1/check",
            "/v1/check?debug=1",
            "http://example.com/v1/check",
        ] {
            let taken = app.lane(&request(Method::POST, target)).expect(target);
            let answer = taken.answer(request(Method::POST, target)).await;
            assert_eq!(answer.status(), StatusCode::ACCEPTED, "{target}");
        }
        for (method, target) in [
            (Method::GET, "/v1/check"),
            (Method::POST, "/v1/check/"),
            (Method::POST, "/v1/checks"),
            (Method::POST, "/V1/check"),
            (Method::POST, "/"),
        ] {
            assert!(
                app.lane(&request(method.clone(), target)).is_none(),
                "{method} {target}"
            );
        }
    }

    #[tokio::test]
    async fn lanes_are_tried_in_order_and_an_every_lane_takes_the_rest() {
        let app = App::new(
            Router::new(),
            [
                Lane::exact(Method::PUT, "/a", answering(StatusCode::CREATED)),
                Lane::every(answering(StatusCode::ACCEPTED)),
                Lane::exact(Method::GET, "/b", answering(StatusCode::GONE)),
            ],
        );
        for (method, target, status) in [
            (Method::PUT, "/a", StatusCode::CREATED),
            (Method::GET, "/a", StatusCode::ACCEPTED),
            (Method::GET, "/b", StatusCode::ACCEPTED),
            (Method::DELETE, "/anything?at=all", StatusCode::ACCEPTED),
        ] {
            let lane = app.lane(&request(method.clone(), target)).expect(target);
            let answer = lane.answer(request(method, target)).await;
            assert_eq!(answer.status(), status, "{target}");
        }
    }

    #[test]
    fn a_router_alone_has_no_lanes() {
        let app = App::from(Router::new());
        assert!(app.lane(&request(Method::POST, "/v1/check")).is_none());
        assert_eq!(format!("{:?}", app.lanes), "[]");
        let lanes = [
            Lane::exact(Method::POST, "/v1/check", answering(StatusCode::OK)),
            Lane::every(answering(StatusCode::OK)),
        ];
        assert_eq!(
            format!("{lanes:?}"),
            "[Lane(POST /v1/check), Lane(every request)]"
        );
    }
}
