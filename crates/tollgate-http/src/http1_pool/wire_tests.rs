//! The pool against an upstream that writes exactly the bytes each test gives, on a real
//! socket: every way RFC 9112 delimits a response body, the heads it must refuse, and what a
//! request looks like on the wire.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::{Http1Pool, SendError};

/// What the upstream does after it read a request's head.
#[derive(Clone)]
struct Reply {
    /// Written one after another, each in a segment of its own, the pool let run between.
    pieces: Vec<&'static [u8]>,
    /// Read the request's body before answering.
    read_body: bool,
    /// Close the connection after the answer.
    close: bool,
    /// Written after the head is read and before the body is, then told.
    before_body: Option<(&'static [u8], Arc<Notify>)>,
}

fn reply(pieces: &[&'static [u8]]) -> Reply {
    Reply {
        pieces: pieces.to_vec(),
        read_body: true,
        close: false,
        before_body: None,
    }
}

/// An upstream that answers the n-th request it reads (over all connections) with
/// `replies[n]` and keeps every request's bytes. Returns its address, the requests and how
/// many connections it accepted.
struct Scripted {
    address: String,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
    accepted: Arc<Mutex<usize>>,
}

async fn scripted(replies: Vec<Reply>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(Mutex::new(0));
    let replies = Arc::new(Mutex::new(replies.into_iter()));
    let (kept, count) = (Arc::clone(&requests), Arc::clone(&accepted));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            *count.lock().unwrap() += 1;
            stream.set_nodelay(true).unwrap();
            let (kept, replies) = (Arc::clone(&kept), Arc::clone(&replies));
            tokio::spawn(async move { serve(stream, kept, replies).await });
        }
    });
    Scripted {
        address,
        requests,
        accepted,
    }
}

async fn serve(
    mut stream: TcpStream,
    kept: Arc<Mutex<Vec<Vec<u8>>>>,
    replies: Arc<Mutex<std::vec::IntoIter<Reply>>>,
) {
    let mut buffer = Vec::new();
    loop {
        let Some(end) = read_until(&mut stream, &mut buffer, b"\r\n\r\n").await else {
            return;
        };
        let Some(reply) = replies.lock().unwrap().next() else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
        let mut request = buffer[..end].to_vec();
        if let Some((interim, told)) = &reply.before_body {
            stream.write_all(interim).await.unwrap();
            told.notify_one();
        }
        if reply.read_body {
            let mut taken = end;
            if let Some(length) = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
            {
                taken += length.trim().parse::<usize>().unwrap();
                while buffer.len() < taken {
                    if !read_more(&mut stream, &mut buffer).await {
                        return;
                    }
                }
            } else if head.contains("transfer-encoding: chunked") {
                // Up to the last chunk and the empty line after its trailers.
                while !(buffer[end..].ends_with(b"\r\n\r\n")
                    && (buffer[end..].starts_with(b"0\r\n")
                        || buffer[end..].windows(5).any(|w| w == b"\r\n0\r\n")))
                {
                    if !read_more(&mut stream, &mut buffer).await {
                        return;
                    }
                }
                taken = buffer.len();
            }
            request = buffer[..taken].to_vec();
            buffer.drain(..taken);
        } else {
            buffer.clear();
        }
        kept.lock().unwrap().push(request);
        for piece in &reply.pieces {
            if stream.write_all(piece).await.is_err() {
                return;
            }
            // Resumed after the runtime has polled its sockets, so the pool may read each
            // piece apart; what the tests assert holds however the pieces are read.
            tokio::task::yield_now().await;
        }
        if reply.close {
            return;
        }
    }
}

/// Reads until `buffer` holds `marker`: the index just past it, `None` at the end.
async fn read_until(stream: &mut TcpStream, buffer: &mut Vec<u8>, marker: &[u8]) -> Option<usize> {
    loop {
        if let Some(at) = buffer.windows(marker.len()).position(|w| w == marker) {
            return Some(at + marker.len());
        }
        if !read_more(stream, buffer).await {
            return None;
        }
    }
}

/// Reads what comes next onto `buffer`; `false` at the end.
async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut more = [0u8; 4096];
    match stream.read(&mut more).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&more[..n]);
            true
        }
    }
}

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header(header::HOST, "upstream")
        .body(Body::empty())
        .unwrap()
}

async fn whole(response: axum::http::Response<Body>) -> (StatusCode, Bytes, Option<String>) {
    let status = response.status();
    let collected = response.into_body().collect().await.unwrap();
    let trailer = collected
        .trailers()
        .and_then(|t| t.get("x-sum"))
        .map(|v| v.to_str().unwrap().to_owned());
    (status, collected.to_bytes(), trailer)
}

#[tokio::test]
async fn chunked_bodies_are_read_however_they_arrive_with_their_trailers() {
    let upstream = scripted(vec![
        reply(&[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"3;ext=1\r\nabc\r",
            b"\n1",
            b"0\r\n0123456789abcdef\r\n0\r\nx-sum: 19\r\n",
            b"\r\n",
        ]),
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]),
    ])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    let (status, body, trailer) = whole(pool.send(get("/")).await.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "abc0123456789abcdef");
    assert_eq!(trailer.as_deref(), Some("19"));
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(
        *upstream.accepted.lock().unwrap(),
        1,
        "the connection was used again"
    );
}

#[tokio::test]
async fn a_length_body_in_pieces_is_streamed_and_its_connection_kept() {
    let upstream = scripted(vec![
        reply(&[
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n01234",
            b"56789",
        ]),
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]),
    ])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    assert_eq!(
        whole(pool.send(get("/")).await.unwrap()).await.1,
        "0123456789"
    );
    assert_eq!(pool.idle_count(), 1);
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(*upstream.accepted.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_body_without_length_runs_to_the_close_and_its_connection_is_not_kept() {
    let mut first = reply(&[b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"the end"]);
    first.close = true;
    let upstream = scripted(vec![
        first,
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]),
    ])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    assert_eq!(
        whole(pool.send(get("/")).await.unwrap()).await.1,
        "until the end"
    );
    assert_eq!(pool.idle_count(), 0);
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(*upstream.accepted.lock().unwrap(), 2);
}

#[tokio::test]
async fn head_204_and_304_answers_have_no_body_whatever_their_fields_say() {
    let upstream = scripted(vec![
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"]),
        reply(&[b"HTTP/1.1 204 No Content\r\n\r\n"]),
        reply(&[b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n"]),
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]),
    ])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    let head = Request::head("/").body(Body::empty()).unwrap();
    let response = pool.send(head).await.unwrap();
    assert_eq!(response.headers()[header::CONTENT_LENGTH], "5");
    assert_eq!(whole(response).await.1, "");
    assert_eq!(
        whole(pool.send(get("/")).await.unwrap()).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        whole(pool.send(get("/")).await.unwrap()).await.0,
        StatusCode::NOT_MODIFIED
    );
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(*upstream.accepted.lock().unwrap(), 1);
}

#[tokio::test]
async fn interim_answers_are_skipped_for_the_final_one() {
    let upstream = scripted(vec![reply(&[
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n",
        b"HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone",
    ])])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    let response = pool.send(get("/")).await.unwrap();
    assert!(response.headers().get("link").is_none());
    let (status, body, _) = whole(response).await;
    assert_eq!((status, body), (StatusCode::CREATED, Bytes::from("done")));
}

#[tokio::test]
async fn heads_that_leave_the_body_in_doubt_are_refused() {
    let long: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\nx-long: {}\r\n\r\n",
            "a".repeat(super::response::MAX_HEAD)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    for (answer, expected) in [
        (
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n"[..],
            "both Transfer-Encoding and Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
            "disagree",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\nabc",
            "Content-Length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\nabcd",
            "disagree",
        ),
        (
            b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            "HTTP/1.0",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "protocol switch",
        ),
        (b"HTTP/1.1 200 OK\r\nbad field\r\n\r\n", "unreadable"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-le",
            "closed inside the response head",
        ),
        (long, "longer than 64 KiB"),
    ] {
        let mut answer = reply(&[answer]);
        answer.close = true;
        let upstream = scripted(vec![answer]).await;
        let pool = Http1Pool::new(upstream.address.clone(), 1);
        let error = pool.send(get("/")).await.unwrap_err();
        assert!(matches!(error, SendError::Malformed(_)), "{error}");
        assert!(error.to_string().contains(expected), "{error}");
    }
}

#[tokio::test]
async fn repeated_equal_lengths_are_one_length() {
    let upstream = scripted(vec![reply(&[
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2, 2\r\n\r\nok",
    ])])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
}

#[tokio::test]
async fn a_broken_chunked_body_is_an_error_and_its_connection_is_dropped() {
    for broken in [&b"zz\r\nabc\r\n"[..], b"3\r\nabcX\r\n0\r\n\r\n"] {
        let upstream = scripted(vec![reply(&[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            broken,
        ])])
        .await;
        let pool = Http1Pool::new(upstream.address.clone(), 1);
        let response = pool.send(get("/")).await.unwrap();
        assert!(response.into_body().collect().await.is_err());
        assert_eq!(pool.idle_count(), 0);
    }
}

#[tokio::test]
async fn bytes_past_the_answer_keep_the_connection_out_of_the_pool() {
    let upstream = scripted(vec![
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n"]),
        reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnext"]),
    ])
    .await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(
        pool.idle_count(),
        0,
        "an upstream that sent more is not trusted again"
    );
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "next");
    assert_eq!(*upstream.accepted.lock().unwrap(), 2);
}

/// A request body of unknown length: two data frames, then trailers.
fn streamed() -> Body {
    let frames = futures_util::stream::iter([
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"hello "))),
        Ok(Frame::data(Bytes::from_static(b"world"))),
        Ok(Frame::trailers({
            let mut trailers = axum::http::HeaderMap::new();
            trailers.insert("x-sum", "11".parse().unwrap());
            trailers
        })),
    ]);
    Body::new(http_body_util::StreamBody::new(frames))
}

#[tokio::test]
async fn requests_go_framed_by_their_length_else_chunked() {
    let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let upstream = scripted(vec![reply(&[ok]), reply(&[ok]), reply(&[ok])]).await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    pool.send(get("/a?b=c")).await.unwrap();
    let post = Request::post("/p")
        .header(header::CONTENT_LENGTH, "5")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(Body::from("12345"))
        .unwrap();
    whole(pool.send(post).await.unwrap()).await;
    let post = Request::post("/s").body(streamed()).unwrap();
    whole(pool.send(post).await.unwrap()).await;
    let requests = upstream.requests.lock().unwrap().clone();
    let texts: Vec<String> = requests
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(texts[0], "GET /a?b=c HTTP/1.1\r\nhost: upstream\r\n\r\n");
    assert_eq!(
        texts[1],
        "POST /p HTTP/1.1\r\ncontent-length: 5\r\n\r\n12345"
    );
    assert_eq!(
        texts[2],
        "POST /s HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
         6\r\nhello \r\n5\r\nworld\r\n0\r\nx-sum: 11\r\n\r\n"
    );
    assert_eq!(*upstream.accepted.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_body_that_breaks_its_length_is_an_error() {
    let upstream = scripted(vec![reply(&[b"HTTP/1.1 200 OK\r\n\r\n"])]).await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    let short = http_body_util::Full::new(Bytes::from_static(b"abc"));
    // A body that says 5 bytes and brings 3.
    let lying = Body::new(Lying(short));
    let post = Request::post("/").body(lying).unwrap();
    let error = pool.send(post).await.unwrap_err();
    assert!(matches!(error, SendError::RequestBody(_)), "{error}");
    assert!(error.to_string().contains("3 of the 5 bytes"), "{error}");
}

/// A body whose size hint claims two bytes more than it has.
struct Lying(http_body_util::Full<Bytes>);

impl http_body::Body for Lying {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_frame(context)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.size_hint().exact().unwrap_or(0) + 2)
    }
}

#[tokio::test]
async fn an_answer_before_the_body_ends_is_handed_on_and_the_connection_dropped() {
    let mut refusal = reply(&[b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 0\r\n\r\n"]);
    refusal.read_body = false;
    let upstream = scripted(vec![refusal]).await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    // A body that never ends: only an answer that comes first can end the request.
    let endless = futures_util::stream::pending::<Result<Frame<Bytes>, std::convert::Infallible>>();
    let post = Request::post("/upload")
        .body(Body::new(http_body_util::StreamBody::new(endless)))
        .unwrap();
    let response = pool.send(post).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    drop(response);
    assert_eq!(pool.idle_count(), 0);
}

#[tokio::test]
async fn a_get_the_upstream_closed_under_goes_again_a_post_does_not() {
    let ok: &'static [u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    // The second request reaches a connection whose upstream then closes it unanswered.
    let mut dropped = reply(&[]);
    dropped.close = true;
    let upstream = scripted(vec![reply(&[ok]), dropped.clone(), reply(&[ok]), dropped]).await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(whole(pool.send(get("/")).await.unwrap()).await.1, "ok");
    assert_eq!(
        *upstream.accepted.lock().unwrap(),
        2,
        "the GET went again on a new connection"
    );
    let post = Request::post("/").body(Body::empty()).unwrap();
    let error = pool.send(post).await.unwrap_err();
    assert!(matches!(error, SendError::Unanswered), "{error}");
    assert_eq!(
        upstream.requests.lock().unwrap().len(),
        4,
        "the POST went once"
    );
}

#[tokio::test]
async fn a_continue_while_the_body_is_sent_is_not_taken_for_the_answer() {
    let continued = Arc::new(Notify::new());
    let mut answer = reply(&[b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ngot5"]);
    answer.before_body = Some((b"HTTP/1.1 100 Continue\r\n\r\n", Arc::clone(&continued)));
    let upstream = scripted(vec![answer]).await;
    let pool = Http1Pool::new(upstream.address.clone(), 1);
    // The body comes only once the upstream has asked for it.
    let body = futures_util::stream::once(async move {
        continued.notified().await;
        // Once the runtime has seen the `100 Continue` arrive.
        tokio::task::yield_now().await;
        Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"hello")))
    });
    let post = Request::post("/upload")
        .header(header::EXPECT, "100-continue")
        .body(Body::new(http_body_util::StreamBody::new(body)))
        .unwrap();
    // Taken for the answer, the `100` would leave both sides waiting: a bound, not a measure.
    let sent = tokio::time::timeout(Duration::from_secs(30), pool.send(post)).await;
    let (status, body, _) = whole(sent.expect("answered").unwrap()).await;
    assert_eq!((status, body), (StatusCode::OK, Bytes::from("got5")));
    let request = upstream.requests.lock().unwrap()[0].clone();
    assert!(
        request.ends_with(b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        "{request:?}"
    );
    assert_eq!(
        pool.idle_count(),
        1,
        "the whole request went, so the connection is kept"
    );
}
