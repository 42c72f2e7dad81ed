//! A request body read whole, bounded in size and in time.

use std::task::Poll;

use axum::http::StatusCode;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;

use super::problem::ApiError;

/// How long a client has to send a request body.
pub(crate) const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body of at most `limit` bytes, sent within [`BODY_TIMEOUT`].
pub(crate) async fn read_body(body: axum::body::Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut read = std::pin::pin!(collect(body, limit));
    // A small body has usually arrived with its head: take it then, without arming a timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    let outcome = match first {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(BODY_TIMEOUT, read).await,
    };
    match outcome {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            detail: format!("the request body is larger than {limit} bytes, or could not be read"),
        }),
        Err(_) => Err(ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            detail: format!("the request body did not arrive within {BODY_TIMEOUT:?}"),
        }),
    }
}

/// The body's data, or `None` past `limit` bytes or when it cannot be read. A body that comes
/// in one piece, as a small one does, is that piece: not queued and copied out again.
async fn collect(mut body: axum::body::Body, limit: usize) -> Option<Bytes> {
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            // Trailers say nothing about the body's bytes.
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let held = joined.as_ref().map_or(first.len(), BytesMut::len);
        if held + data.len() > limit {
            return None;
        }
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Some(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_has_arrived_is_read_at_once() {
        let bytes = read_body(axum::body::Body::from("{\"a\":1}"), 64)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"{\"a\":1}");
        let error = read_body(axum::body::Body::from("x".repeat(65)), 64)
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// Pieces are joined in order, up to the limit and not a byte past it.
    #[tokio::test(start_paused = true)]
    async fn a_body_in_pieces_is_joined_up_to_its_limit() {
        let pieces = |parts: &[&'static str]| {
            let frames: Vec<Result<Bytes, std::io::Error>> = parts
                .iter()
                .map(|part| Ok(Bytes::from_static(part.as_bytes())))
                .collect();
            axum::body::Body::from_stream(futures_util::stream::iter(frames))
        };
        let bytes = read_body(pieces(&["", "{\"a\"", ":", "", "1}"]), 7)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"{\"a\":1}");
        let error = read_body(pieces(&["{\"a\"", ":", "1} "]), 7)
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
        let failing = axum::body::Body::from_stream(futures_util::stream::iter([
            Ok(Bytes::from_static(b"{")),
            Err(std::io::Error::other("reset")),
        ]));
        let error = read_body(failing, 64).await.unwrap_err();
        assert_eq!(error.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_does_not_come_times_out() {
        let started = tokio::time::Instant::now();
        let stalled = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let error = read_body(axum::body::Body::from_stream(stalled), 64)
            .await
            .unwrap_err();
        assert_eq!(error.status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), BODY_TIMEOUT);
    }
}
