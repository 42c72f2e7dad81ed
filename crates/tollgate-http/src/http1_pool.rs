//! Connections to a plain `http://` upstream, spoken to in HTTP/1.1 and kept for the next
//! request. Each connection is written and read by the request that holds it, with no task of
//! its own: hyper's client gives every connection a task, and each request hands its head to
//! that task through a channel and gets the answer back through another, two wake-ups and
//! polls a request that cost about a quarter of a proxied request's instructions. A connection
//! goes back to the pool when its response body has been read to its end, or at once when the
//! whole response came with its head. Upstreams over TLS or HTTP/2 keep hyper-util's client.
//! Each worker thread keeps its own idle connections, so a connection is used on the thread
//! whose runtime it was registered with.

mod body;
mod connection;
mod request;
mod response;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use http_body::Body as _;
use tokio::time::Instant;

use body::UpstreamBody;
use connection::Connection;
use request::Written;
use response::BodyFraming;

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
    connection: Connection,
    since: Instant,
}

/// Why a request got no response from the upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// No connection could be made.
    #[error("cannot connect to {address}: {error}")]
    Connect {
        address: String,
        error: std::io::Error,
    },
    /// The connection failed.
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before a byte of the answer.
    #[error("the connection closed without an answer")]
    Unanswered,
    /// The answer was not HTTP/1.1 that can be read without a doubt about its end.
    #[error("its answer was malformed: {0}")]
    Malformed(String),
    /// The client's request body failed or did not match its `Content-Length`.
    #[error("the request's body: {0}")]
    RequestBody(String),
}

impl SendError {
    /// Whether the connection ended before a byte of the answer, as one the upstream closed
    /// while idle does.
    fn is_unanswered(&self) -> bool {
        match self {
            SendError::Unanswered => true,
            SendError::Io(error) => matches!(
                error.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            ),
            _ => false,
        }
    }
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
    /// new one. An upstream may close an idle connection at any moment: a request without a
    /// body and of an idempotent method (RFC 9110 §9.2.2) that a reused connection closed
    /// under without an answer goes again on the next one.
    pub(crate) async fn send(
        self: &Arc<Self>,
        request: Request<Body>,
    ) -> Result<Response<Body>, SendError> {
        let (parts, body) = request.into_parts();
        let repeatable = body.is_end_stream() && parts.method.is_idempotent();
        let mut body = Some(body);
        loop {
            let (mut connection, reused) = match self.take() {
                Some(connection) => (connection, true),
                None => (self.connect().await?, false),
            };
            let this_body = body.take().unwrap_or_else(Body::empty);
            let answered = match request::write(&mut connection, &parts, this_body).await {
                Ok(written) => response::read_head(&mut connection, &parts.method)
                    .await
                    .map(|head| (written, head)),
                Err(error) => Err(error),
            };
            match answered {
                Ok((written, head)) => return Ok(self.answer(connection, written, head)),
                Err(error) if reused && repeatable && error.is_unanswered() => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// The response to hand on; its connection comes back when its body has been read.
    fn answer(
        self: &Arc<Self>,
        mut connection: Connection,
        written: Written,
        head: response::Head,
    ) -> Response<Body> {
        let keep_alive = head.keep_alive && written == Written::Whole;
        let body = match head.framing {
            BodyFraming::Empty => {
                self.give_back(connection, keep_alive);
                Body::empty()
            }
            BodyFraming::Length(length)
                if usize::try_from(length)
                    .is_ok_and(|length| length <= connection.buffer.len()) =>
            {
                let whole = connection.buffer.split_to(length as usize).freeze();
                self.give_back(connection, keep_alive);
                Body::from(whole)
            }
            framing => Body::new(UpstreamBody::new(
                connection,
                framing,
                keep_alive,
                Arc::downgrade(self),
            )),
        };
        let mut response = Response::new(body);
        *response.status_mut() = head.status;
        *response.headers_mut() = head.headers;
        response
    }

    /// Keeps a connection whose answer has been read whole for the next request, unless it
    /// cannot carry one or the upstream sent more than the answer.
    fn give_back(&self, connection: Connection, keep_alive: bool) {
        if keep_alive && connection.buffer.is_empty() {
            self.put(connection);
        }
    }

    /// The most recently used open connection; those idle too long are closed.
    fn take(&self) -> Option<Connection> {
        let mut idle = self.idle();
        let now = Instant::now();
        while let Some(Idle {
            mut connection,
            since,
        }) = idle.pop()
        {
            if now.duration_since(since) >= IDLE_TIMEOUT {
                // The rest went idle earlier still.
                idle.clear();
                return None;
            }
            if connection.is_open() {
                return Some(connection);
            }
        }
        None
    }

    fn put(&self, connection: Connection) {
        let mut idle = self.idle();
        if idle.len() < self.max_idle {
            idle.push(Idle {
                connection,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<Connection, SendError> {
        Connection::open(&self.address)
            .await
            .map_err(|error| SendError::Connect {
                address: self.address.clone(),
                error,
            })
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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_tests;
