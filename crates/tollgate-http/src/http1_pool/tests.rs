use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{HeaderValue, header};
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::*;

/// A real upstream on loopback that counts the connections it accepted. `/close` answers with
/// `Connection: close`; `/chunked` answers with a chunked body; anything else with `ok`.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(|request: Request<Incoming>| async move {
                    let mut response = match request.uri().path() {
                        "/chunked" => {
                            let chunks = futures_util::stream::iter(["a", "b", "c"].map(|chunk| {
                                Ok::<_, Infallible>(Frame::data(Bytes::from_static(
                                    chunk.as_bytes(),
                                )))
                            }));
                            Response::new(Body::new(http_body_util::StreamBody::new(chunks)))
                        }
                        _ => Response::new(Body::from("ok")),
                    };
                    if request.uri().path() == "/close" {
                        response
                            .headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    }
                    Ok::<_, Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, accepted)
}

fn get(address: &str, path: &str) -> Request<Body> {
    Request::get(path)
        .header(header::HOST, address)
        .body(Body::empty())
        .unwrap()
}

async fn read(pool: &Arc<Http1Pool>, address: &str, path: &str) -> Bytes {
    let response = pool.send(get(address, path)).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn answers_read_to_their_end_give_their_connection_back() {
    let (address, accepted) = upstream().await;
    let pool = Http1Pool::new(address.clone(), 1);
    for _ in 0..5 {
        assert_eq!(read(&pool, &address, "/").await, "ok");
        assert_eq!(pool.idle_count(), 1);
    }
    assert_eq!(read(&pool, &address, "/chunked").await, "abc");
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_dropped_before_its_end_does_not_give_its_connection_back() {
    let (address, accepted) = upstream().await;
    let pool = Http1Pool::new(address.clone(), 1);
    let response = pool.send(get(&address, "/chunked")).await.unwrap();
    drop(response);
    assert_eq!(pool.idle_count(), 0);
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_used_again() {
    let (address, accepted) = upstream().await;
    let pool = Http1Pool::new(address.clone(), 1);
    assert_eq!(read(&pool, &address, "/close").await, "ok");
    // Whether or not it went back, the closed connection is never chosen: the next request
    // goes on a new one and is answered.
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connections_idle_too_long_are_closed_instead_of_used() {
    let (address, accepted) = upstream().await;
    let pool = Http1Pool::new(address.clone(), 1);
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(pool.idle_count(), 1);
    tokio::time::pause();
    tokio::time::advance(IDLE_TIMEOUT).await;
    tokio::time::resume();
    assert_eq!(read(&pool, &address, "/").await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_upstream_that_refuses_connections_is_an_error_naming_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let pool = Http1Pool::new(address.clone(), 1);
    let error = pool.send(get(&address, "/")).await.unwrap_err();
    assert!(matches!(error, SendError::Connect { .. }), "{error}");
    assert!(error.to_string().contains(&address), "{error}");
}
