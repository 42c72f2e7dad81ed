//! Connections to a plain `http://` upstream, spoken to in HTTP/1.1 and kept for the next
//! request. hyper-util's pooled client does this for every kind of upstream, but each request
//! through it pays for a keyed pool (the key hashed three times with SipHash, byte by byte) and
//! for a task spawned to put the connection back: about a seventh of a proxied request. A
//! connection here goes back when the response body that used it is dropped, read to its end.
//! Upstreams over TLS or HTTP/2 keep hyper-util's client. Each worker thread keeps its own
//! idle connections, so a connection's task runs on the thread of the requests that use it.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a connection may sit idle before it is closed rather than used (as hyper-util's
/// client, which the other upstreams use).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The most idle connections kept, shared out between the worker threads; more are closed
/// when their answers end.
pub(crate) const MAX_IDLE: usize = 1024;

/// The idle connections to one upstream address.
pub(crate) struct Http1Pool {
    /// `host:port`, resolved on every connect.
    address: String,
    /// Per worker thread ([`crate::http_server::Workers`]), most recently used last.
    idle: Box<[Mutex<Vec<Idle>>]>,
    /// The most idle connections each thread keeps.
    max_idle: usize,
}

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

/// Why a request did not reach the upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// No connection could be made.
    #[error("cannot connect to {address}: {error}")]
    Connect {
        address: String,
        error: std::io::Error,
    },
    /// The connection failed before the response head arrived.
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

impl Http1Pool {
    /// A pool for the upstream at `address` (`host:port`), used from `threads` worker
    /// threads (1 on the shared runtime).
    pub(crate) fn new(address: String, threads: usize) -> Arc<Self> {
        let threads = threads.max(1);
        Arc::new(Self {
            address,
            idle: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            max_idle: (MAX_IDLE / threads).max(1),
        })
    }

    /// This thread's idle connections.
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        let slot = crate::http_server::current_worker() % self.idle.len();
        self.idle[slot]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `request` (in origin form, with its `Host` field) on an idle connection, else on a
    /// new one. A request that a reused connection closed under before taking it goes on the
    /// next one: an upstream may close an idle connection at any moment.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut request: Request<Body>,
    ) -> Result<Response<Body>, SendError> {
        loop {
            let (mut sender, reused) = match self.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            if let Err(error) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(error.into());
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let back = Some((sender, Arc::downgrade(self)));
                    return Ok(response.map(|incoming| {
                        Body::new(PooledBody {
                            incoming,
                            ended: false,
                            back,
                        })
                    }));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(error.into_error().into()),
                },
            }
        }
    }

    /// The most recently used open connection; those idle too long are closed.
    fn take(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle();
        let now = Instant::now();
        while let Some(Idle { sender, since }) = idle.pop() {
            if now.duration_since(since) >= IDLE_TIMEOUT {
                // The rest went idle earlier still.
                idle.clear();
                return None;
            }
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, sender: SendRequest<Body>) {
        let mut idle = self.idle();
        if idle.len() < self.max_idle && !sender.is_closed() {
            idle.push(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, SendError> {
        let connect_error = |error| SendError::Connect {
            address: self.address.clone(),
            error,
        };
        let stream = TcpStream::connect(&self.address)
            .await
            .map_err(connect_error)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!("upstream connection ended: {error}");
            }
        });
        Ok(sender)
    }

    /// How many connections are idle now.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle().len()
    }
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// A response body from the upstream; dropped after its end, it gives its connection back.
struct PooledBody {
    incoming: Incoming,
    ended: bool,
    back: Option<(SendRequest<Body>, Weak<Http1Pool>)>,
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.incoming).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body dropped before its end leaves its connection mid-answer: hyper closes it.
        if !(self.ended || self.incoming.is_end_stream()) {
            return;
        }
        if let Some((sender, pool)) = self.back.take()
            && let Some(pool) = pool.upgrade()
        {
            pool.put(sender);
        }
    }
}

#[cfg(test)]
mod tests;
