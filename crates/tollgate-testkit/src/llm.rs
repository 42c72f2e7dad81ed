//! A stand-in for an OpenAI-style chat completions API on a free loopback port: it reports
//! usage the ways real ones do (a `usage` object at the end of a server-sent event stream or a
//! JSON body, or a response header), in small pieces so readers meet every split, and it can
//! hold a stream open or cut it midway on request.
//!
//! A request says what it wants in headers: `x-stub-prompt-tokens` and
//! `x-stub-completion-tokens` (the usage to report, default 0), and `x-stub-mode`:
//! `stream` (the default), `json`, `header` (`x-usage-tokens`), `header-cut` (`x-usage-tokens`,
//! then a body that fails midway), `hold` (a stream that waits for [`LlmStub::release`] before
//! its usage), `cut` (a stream that fails before its usage) or `encoded` (the JSON answer marked
//! `content-encoding: gzip`, as a compressed one would be).
//! Every answer says in `x-stub-accept-encoding` what `Accept-Encoding` the request came with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response};
use axum::routing::post;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

/// The largest piece of a body the stub writes at once.
const PIECE: usize = 7;

/// The running stub; it stops with the test's runtime.
#[derive(Debug)]
pub struct LlmStub {
    address: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// One permit per held stream that may finish.
    release: Semaphore,
    /// Streams holding, waiting for a permit.
    holding: AtomicUsize,
    /// Requests answered so far.
    requests: AtomicUsize,
}

impl LlmStub {
    /// Starts the stub on a free loopback port.
    pub async fn start() -> LlmStub {
        Self::start_wrapped(|router| router).await
    }

    /// Starts the stub with its routes wrapped by `wrap` (a middleware under test, say).
    pub async fn start_wrapped(wrap: impl FnOnce(Router) -> Router) -> LlmStub {
        let shared = Arc::new(Shared {
            release: Semaphore::new(0),
            holding: AtomicUsize::new(0),
            requests: AtomicUsize::new(0),
        });
        let app = wrap(
            Router::new()
                .route("/v1/chat/completions", post(complete))
                .with_state(Arc::clone(&shared)),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the stub");
        let address = listener.local_addr().expect("the stub's address");
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("the stub serves");
        });
        LlmStub { address, shared }
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Lets `streams` held streams send their usage and end.
    pub fn release(&self, streams: usize) {
        self.shared.release.add_permits(streams);
    }

    /// How many streams are holding now.
    pub fn holding(&self) -> usize {
        self.shared.holding.load(Ordering::SeqCst)
    }

    /// How many requests reached it.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

fn number(headers: &HeaderMap, name: &str) -> u64 {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

fn usage(prompt: u64, completion: u64) -> String {
    format!(
        r#"{{"prompt_tokens":{prompt},"completion_tokens":{completion},"total_tokens":{}}}"#,
        prompt + completion
    )
}

/// The event stream's text before the usage: a few content chunks, each with `"usage":null`
/// as OpenAI sends them, and a `usage` member inside the content that readers must not take.
fn content_events() -> String {
    let mut events = String::from(": keep-alive\n\n");
    for word in [
        "Hello",
        ", \\\"usage\\\":{\\\"completion_tokens\\\":1}",
        "!",
    ] {
        events.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}}}}],\"usage\":null}}\n\n"
        ));
    }
    events
}

fn final_events(usage: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n"
    )
}

fn pieces(text: String) -> Vec<Result<Vec<u8>, std::io::Error>> {
    text.into_bytes()
        .chunks(PIECE)
        .map(|piece| Ok(piece.to_vec()))
        .collect()
}

/// A stream cut after its content, its final events (with the usage) sent after the cut.
fn cut(usage: &str) -> Body {
    let mut stream = pieces(content_events());
    stream.push(Err(std::io::Error::other("the stub cuts the stream")));
    stream.extend(pieces(final_events(usage)));
    Body::from_stream(futures_util::stream::iter(stream))
}

/// A stream whose final events (with the usage) wait until the test releases one.
fn held(shared: Arc<Shared>, usage: String) -> Body {
    let first = futures_util::stream::iter(pieces(content_events()));
    let rest = futures_util::stream::once(async move {
        shared.holding.fetch_add(1, Ordering::SeqCst);
        let permit = shared.release.acquire().await;
        shared.holding.fetch_sub(1, Ordering::SeqCst);
        permit.expect("the stub's semaphore stays open").forget();
        futures_util::stream::iter(pieces(final_events(&usage)))
    })
    .flatten();
    Body::from_stream(first.chain(rest))
}

async fn complete(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response<Body> {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let usage = usage(
        number(&headers, "x-stub-prompt-tokens"),
        number(&headers, "x-stub-completion-tokens"),
    );
    let mode = headers
        .get("x-stub-mode")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("stream")
        .to_owned();
    let response = Response::builder().header(
        "x-stub-accept-encoding",
        headers
            .get("accept-encoding")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("none"),
    );
    let (response, body) = match mode.as_str() {
        "json" | "encoded" => (
            response.header("content-type", "application/json").header(
                "content-encoding",
                if mode == "encoded" {
                    "gzip"
                } else {
                    "identity"
                },
            ),
            Body::from_stream(futures_util::stream::iter(pieces(format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"usage: {{}}"}}}}],"usage":{usage}}}"#
            )))),
        ),
        "header" => (
            response.header("content-type", "text/plain").header(
                "x-usage-tokens",
                number(&headers, "x-stub-completion-tokens"),
            ),
            Body::from("Hello!"),
        ),
        "header-cut" => (
            response.header("content-type", "text/event-stream").header(
                "x-usage-tokens",
                number(&headers, "x-stub-completion-tokens"),
            ),
            Body::from_stream(futures_util::stream::iter(
                pieces(content_events())
                    .into_iter()
                    .chain([Err(std::io::Error::other("the stub cuts the stream"))]),
            )),
        ),
        "cut" => (
            response.header("content-type", "text/event-stream"),
            cut(&usage),
        ),
        "hold" => (
            response.header("content-type", "text/event-stream; charset=utf-8"),
            held(shared, usage),
        ),
        _ => (
            response.header("content-type", "text/event-stream"),
            Body::from_stream(futures_util::stream::iter(pieces(
                content_events() + &final_events(&usage),
            ))),
        ),
    };
    response.body(body).expect("a valid response")
}

/// A caller of a gateway in front of the stub, as one API key: it sends completion requests
/// and reads what is left of the gateway's output and input token limits.
#[derive(Debug, Clone)]
pub struct Caller {
    client: reqwest::Client,
    base: String,
    key: String,
    /// The names of the output and input limits in the `RateLimit` field, or of their
    /// policies when read through the admin API.
    limits: (String, String),
    /// The admin API that what is left is read from, where every request costs something.
    admin: Option<String>,
}

impl Caller {
    /// A caller of the gateway at `base` (`http://host:port`) with API key `key`, whose output
    /// and input limits are named `limits`.
    pub fn new(base: &str, key: &str, limits: (&str, &str)) -> Caller {
        Caller {
            client: reqwest::Client::new(),
            base: base.to_owned(),
            key: key.to_owned(),
            limits: (limits.0.to_owned(), limits.1.to_owned()),
            admin: None,
        }
    }

    /// Reads what is left from the admin API at `admin` (`POST /admin/inspect`, which counts
    /// nothing) instead of from a request, for gateways where every request costs something;
    /// `limits` are then the names of the two policies.
    pub fn inspecting(mut self, admin: &str) -> Caller {
        self.admin = Some(admin.to_owned());
        self
    }

    /// A completion request in `mode` (see the module's documentation): `max_tokens` as the
    /// output estimate (`x-max-tokens`), a body of `body_bytes` as the input estimate, and the
    /// prompt and completion tokens the stub is to report.
    pub fn request(
        &self,
        mode: &str,
        max_tokens: u64,
        body_bytes: usize,
        usage: (u64, u64),
    ) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .header("x-api-key", &self.key)
            .header("x-max-tokens", max_tokens.to_string())
            .header("x-stub-mode", mode)
            .header("x-stub-prompt-tokens", usage.0.to_string())
            .header("x-stub-completion-tokens", usage.1.to_string())
            .body(vec![b' '; body_bytes])
    }

    /// What is left of the output and input limits, read from a request that costs nothing,
    /// or from the admin API.
    pub async fn left(&self) -> (u64, u64) {
        if let Some(admin) = &self.admin {
            return (
                self.inspect(admin, &self.limits.0).await,
                self.inspect(admin, &self.limits.1).await,
            );
        }
        let response = self
            .request("header", 0, 0, (0, 0))
            .send()
            .await
            .expect("an answer");
        assert_eq!(
            response.status(),
            200,
            "a request that costs nothing passes"
        );
        let field = response.headers()["ratelimit"]
            .to_str()
            .expect("text")
            .to_owned();
        (
            remaining(&field, &self.limits.0),
            remaining(&field, &self.limits.1),
        )
    }

    async fn inspect(&self, admin: &str, policy: &str) -> u64 {
        let answer: serde_json::Value = self
            .client
            .post(format!("{admin}/admin/inspect"))
            .json(&serde_json::json!({"policy": policy, "attributes": {"api_key": self.key}}))
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("JSON");
        answer["decisions"][0]["remaining"]
            .as_u64()
            .unwrap_or_else(|| panic!("no remaining in {answer}"))
    }

    /// Reads what is left until `settled` holds for it (settling runs after a response has
    /// ended); panics with the last reading after two seconds of trying.
    pub async fn left_until(&self, what: &str, settled: impl Fn((u64, u64)) -> bool) {
        let mut left = (0, 0);
        for _ in 0..200 {
            left = self.left().await;
            if settled(left) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("left (output, input) {left:?}: not {what}");
    }
}

/// The `r` parameter of the limit named `name` in a `RateLimit` field.
pub fn remaining(field: &str, name: &str) -> u64 {
    field
        .split(',')
        .map(str::trim)
        .find(|item| item.starts_with(&format!("\"{name}\"")))
        .and_then(|item| item.split(';').find_map(|p| p.strip_prefix("r=")))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in RateLimit: {field}"))
}
