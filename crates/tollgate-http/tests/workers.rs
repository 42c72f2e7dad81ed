//! Connections served on worker threads: each on one thread from its accept to its close, two
//! open at once on two threads, and the answers a busy worker holds to the end of its burst all
//! sent.

mod common;

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tollgate_http::http_server::{ConnectionLimits, MAX_WORKERS, Workers};

/// The body of the next answer on a kept-alive connection.
async fn body_of(connection: &mut BufReader<TcpStream>) -> String {
    let mut length = None;
    loop {
        let mut line = String::new();
        let read = tokio::time::timeout(Duration::from_secs(30), connection.read_line(&mut line))
            .await
            .expect("an answer, not a connection left waiting")
            .expect("read");
        assert!(read > 0, "the connection closed before its answer");
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = Some(value.trim().parse::<usize>().expect("a length"));
        }
    }
    let mut body = vec![0; length.expect("a content-length")];
    connection.read_exact(&mut body).await.expect("the body");
    String::from_utf8(body).expect("UTF-8")
}

/// `GET /thread` on a kept-alive connection: the name of the thread that answered.
async fn thread_of(connection: &mut BufReader<TcpStream>) -> String {
    connection
        .get_mut()
        .write_all(b"GET /thread HTTP/1.1\r\nhost: tollgate\r\n\r\n")
        .await
        .expect("written");
    body_of(connection).await
}

#[tokio::test]
async fn each_connection_stays_on_one_worker_and_two_open_at_once_are_on_two() {
    let router = Router::new().route(
        "/thread",
        get(|| async {
            std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_owned()
        }),
    );
    let limits = ConnectionLimits {
        workers: Some(Workers::start(2).expect("two workers")),
        ..common::limits(8)
    };
    let address = common::start(router.into(), limits).await;
    // A connection of its own, closed after its answer, is served on a worker too.
    let (answer, _) = common::get(address, "/thread").await;
    assert!(answer.ends_with("\r\n\r\ntollgate-w0"), "{answer}");
    let connect = || async { BufReader::new(TcpStream::connect(address).await.expect("connects")) };
    let mut first = connect().await;
    let first_thread = thread_of(&mut first).await;
    // The second is accepted while the first is open: it goes to the other worker.
    let mut second = connect().await;
    let second_thread = thread_of(&mut second).await;
    for thread in [&first_thread, &second_thread] {
        assert!(
            thread.starts_with("tollgate-w"),
            "answered on {thread}, not a worker"
        );
    }
    assert_ne!(first_thread, second_thread, "both on one worker");
    for _ in 0..5 {
        assert_eq!(thread_of(&mut first).await, first_thread);
        assert_eq!(thread_of(&mut second).await, second_thread);
    }
}

#[tokio::test]
async fn requests_sent_in_one_write_to_a_worker_are_all_answered_whole_and_in_order() {
    // A busy worker holds each answer after its first until it has polled its other tasks:
    // answers held so must still all be sent, whole and in order.
    let router = Router::new().route(
        "/echo/{n}",
        get(|Path(n): Path<u32>| async move { n.to_string() }),
    );
    let limits = ConnectionLimits {
        workers: Some(Workers::start(1).expect("a worker")),
        ..common::limits(8)
    };
    let address = common::start(router.into(), limits).await;
    let mut connection = BufReader::new(TcpStream::connect(address).await.expect("connects"));
    let requests: String = (0..8)
        .map(|n| format!("GET /echo/{n} HTTP/1.1\r\nhost: tollgate\r\n\r\n"))
        .collect();
    connection
        .get_mut()
        .write_all(requests.as_bytes())
        .await
        .expect("written");
    for n in 0..8 {
        assert_eq!(body_of(&mut connection).await, n.to_string());
    }
    // And the connection goes on serving afterwards.
    connection
        .get_mut()
        .write_all(b"GET /echo/9 HTTP/1.1\r\nhost: tollgate\r\n\r\n")
        .await
        .expect("written");
    assert_eq!(body_of(&mut connection).await, "9");
}

#[test]
fn a_set_of_workers_has_one_to_the_most_threads() {
    for count in [0, MAX_WORKERS + 1] {
        let error = Workers::start(count).expect_err("refused");
        assert!(error.contains(&format!("1 to {MAX_WORKERS}")), "{error}");
    }
}
