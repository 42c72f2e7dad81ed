//! The HTTP accept loop shared by `serve` and `proxy`, with the bounds a public listener needs:
//!
//! - at most `max_connections` connections at once; at the cap, the connection idle the longest
//!   is closed to make room for a new client, and a new client waits only while every
//!   connection has a request under way;
//! - a connection must send a complete request head within `header_timeout` of being accepted,
//!   and again within `header_timeout` of its last answer (keep-alive); one that does not is
//!   closed, HTTP/1.1 and HTTP/2 alike (an HTTP/2 client that never sends its preface too),
//!   and dropped [`CLOSE_GRACE`] later if it is still sending its head then;
//! - request heads are held to `max_header_bytes` and `max_header_fields`, answered with a 431
//!   problem detail (the HTTP stack's own limits sit above these, so it rarely answers first);
//! - a connection past `max_connection_age` is asked to close: HTTP/2 with GOAWAY, HTTP/1 with
//!   `Connection: close` on its next answer (an HTTP/1 connection closed otherwise could meet
//!   a request its client is already sending); requests under way get the age's grace;
//! - shutdown lets requests under way finish for at most `shutdown_timeout`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;

use crate::lane::App;
use crate::tls::Tls;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;

use connection_service::{ConnectionService, HeadLimits};
use registry::{ConnectionHandle, Registry, Tracked};
use stream_executor::{StreamExecutor, Streams};

mod burst;
mod connection_service;
mod registry;
mod stream_executor;
mod workers;

pub use burst::worker_parks;
pub(crate) use workers::current as current_worker;
pub use workers::{MAX_WORKERS, Workers};

/// The longest request target (path and query) read, in bytes; longer ones get `414`.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// How long a connection asked to close while idle (timed out, or making room) may take to go:
/// an HTTP/2 client gets this long to read the GOAWAY. Capped by the header timeout.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The address a connection was accepted on (this side of the socket), in every request's
/// extensions, so that a handler can tell which of the host's addresses the client reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub std::net::SocketAddr);

/// Bounds on connections, request heads and slow clients.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// The most client connections open at once; 0 counts as 1 (a server that accepts none
    /// would hang every client). At the cap, the connection idle the longest is closed to make
    /// room; while every connection is busy, more wait.
    pub max_connections: usize,
    /// How long a connection may go without sending a complete request head: from its accept,
    /// and on a keep-alive connection from its last answer. Then it is closed.
    pub header_timeout: Duration,
    /// The most bytes of header fields (names and values) a request may carry; more is 431.
    pub max_header_bytes: usize,
    /// The most header fields a request may carry; more is 431.
    pub max_header_fields: usize,
    /// How long shutdown waits for requests under way before closing their connections.
    pub shutdown_timeout: Duration,
    /// How long a connection lives (give or take 10%, so that connections made together do
    /// not all end together) before it is asked to close: an HTTP/2 client such as Envoy then
    /// opens a new one, which may reach a pod added since. `0s` keeps connections for good.
    pub max_connection_age: Duration,
    /// How long requests under way on a connection past its age may take (long-lived gRPC
    /// streams included) before the connection is closed under them.
    pub max_connection_age_grace: Duration,
    /// The threads connections are served on, each connection on one of them from its accept
    /// to its close (see [`Workers`]); `None` serves them on the runtime `serve` runs on.
    pub workers: Option<Workers>,
}

impl ConnectionLimits {
    /// The HTTP stack's own bound on a request head: far enough above ours that a head over
    /// our limits reaches [`limit_head`] and gets a problem detail, not a bare 431.
    fn stack_head_bytes(&self) -> usize {
        2 * self.max_header_bytes + 2 * MAX_URI_BYTES + 16 * 1024
    }

    fn stack_header_fields(&self) -> usize {
        2 * self.max_header_fields + 100
    }

    /// When a connection accepted now is to be asked to close, with its jitter; `None` for
    /// connections kept for good.
    fn age_deadline(&self, accepted: Instant) -> Option<Instant> {
        if self.max_connection_age.is_zero() {
            return None;
        }
        let jitter = 0.9 + fastrand::f64() * 0.2;
        Some(accepted + self.max_connection_age.mul_f64(jitter))
    }
}

/// Serves `app` (a router, `router.into()`, or a router with lanes) on `listener` (over TLS
/// with `tls`) until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: App,
    limits: &ConnectionLimits,
    tls: Option<&Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let heads = HeadLimits {
        bytes: limits.max_header_bytes,
        fields: limits.max_header_fields,
    };
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let registry = Arc::new(Registry::new());
    let (stop, stopping) = watch::channel(false);
    // Every connection task holds a sender; when all are gone, the channel closes.
    let (running, mut drained) = mpsc::channel::<()>(1);
    let mut next_id = 0u64;
    tokio::pin!(shutdown);
    loop {
        let Some((stream, peer, permit)) =
            next_connection(&listener, &permits, &registry, &mut shutdown).await
        else {
            break;
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok().map(LocalAddr);
        let id = next_id;
        next_id += 1;
        let tracked = registry.add(id);
        let handle = ConnectionHandle {
            tracked: Arc::clone(&tracked),
            registry: Arc::clone(&registry),
        };
        let service = TowerToHyperService::new(ConnectionService {
            app: app.clone(),
            peer,
            local,
            handle,
            heads,
        });
        let executor = StreamExecutor::default();
        let streams = Streams::of(&executor);
        let builder = connection_builder(limits, executor, app.dated);
        let acceptor = tls.map(Tls::acceptor);
        let slot = Slot {
            registry: Arc::clone(&registry),
            id,
            _permit: permit,
            _running: running.clone(),
        };
        let watch = Watch::new(peer, tracked, &registry, limits, stopping.clone());
        let connection = move |stream: TcpStream| async move {
            match acceptor {
                None => {
                    let io = TokioIo::new(stream);
                    watch
                        .drive(builder.serve_connection(io, service), streams)
                        .await;
                }
                Some(acceptor) => {
                    if let Some(stream) = watch.handshake(&acceptor, stream).await {
                        let io = TokioIo::new(stream);
                        watch
                            .drive(builder.serve_connection(io, service), streams)
                            .await;
                    }
                }
            }
            drop(slot);
        };
        match &limits.workers {
            Some(workers) => workers.spawn(stream, connection),
            None => {
                tokio::spawn(connection(stream));
            }
        }
    }
    drop(listener);
    let _ = stop.send(true);
    drop(running);
    drain(&mut drained, limits.shutdown_timeout).await;
}

/// Waits for the connection tasks to end (`drained` closes when the last one drops its
/// sender), for at most `grace`.
async fn drain(drained: &mut mpsc::Receiver<()>, grace: Duration) {
    if tokio::time::timeout(grace, drained.recv()).await.is_err() {
        tracing::warn!("shutdown: requests still under way after {grace:?} were cut off");
    }
}

/// What a connection's task watches besides the connection: its request bookkeeping, the
/// header timeout, and the server's stop signal.
struct Watch {
    peer: std::net::SocketAddr,
    tracked: Arc<Tracked>,
    registry: Arc<Registry>,
    header_timeout: Duration,
    stopping: watch::Receiver<bool>,
    /// When the connection is to be asked to close for its age.
    aged_at: Option<Instant>,
    /// How long requests under way may take after that.
    age_grace: Duration,
}

impl Watch {
    /// The watch of a connection from `peer` accepted now, under `limits`.
    fn new(
        peer: std::net::SocketAddr,
        tracked: Arc<Tracked>,
        registry: &Arc<Registry>,
        limits: &ConnectionLimits,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self {
            peer,
            tracked,
            registry: Arc::clone(registry),
            header_timeout: limits.header_timeout,
            stopping,
            aged_at: limits.age_deadline(Instant::now()),
            age_grace: limits.max_connection_age_grace,
        }
    }

    /// The TLS handshake of a connection, which, like a request head, must come within the
    /// header timeout; a connection still in it is idle, so it makes room at the cap and goes
    /// at shutdown like any idle connection. None if it does not complete.
    async fn handshake(
        &self,
        acceptor: &TlsAcceptor,
        stream: TcpStream,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        let (peer, header_timeout) = (self.peer, self.header_timeout);
        let mut stopping = self.stopping.clone();
        tokio::select! {
            handshake = timeout(header_timeout, acceptor.accept(stream)) => match handshake {
                Ok(Ok(stream)) => return Some(stream),
                Ok(Err(error)) => tracing::debug!(%peer, "TLS handshake failed: {error}"),
                Err(_) => {
                    tracing::debug!(%peer, "no TLS handshake within {header_timeout:?}");
                }
            },
            () = self.tracked.reclaim.notified() => {
                tracing::debug!(%peer, "closing a connection still in its TLS handshake to make room for a new one");
            }
            _ = stopping.changed() => {}
        }
        None
    }

    /// When to look at the connection again, at a deadline that came at `now`; `None` once
    /// it has been idle for `wait` (since it was asked to close, when it was).
    fn look_again(
        &self,
        now: Instant,
        closing: Option<Instant>,
        wait: Duration,
    ) -> Option<Instant> {
        if self.tracked.in_flight.load(Ordering::Acquire) > 0 {
            return Some(now + wait);
        }
        let idle_at = self
            .registry
            .instant_at(self.tracked.idle_at.load(Ordering::Relaxed));
        let since = closing.map_or(idle_at, |asked| asked.max(idle_at));
        (now < since + wait).then_some(since + wait)
    }

    /// Says why a connection past its age and its grace goes.
    fn log_cut(&self) {
        if self.tracked.in_flight.load(Ordering::Acquire) > 0 {
            tracing::debug!(peer = %self.peer, "connection dropped: requests still under way past its age's grace");
        } else {
            tracing::debug!(peer = %self.peer, "connection closed: unused through its age's grace");
        }
    }

    /// Serves `connection` to its end: closed gracefully when idle past the header timeout,
    /// when asked to make room at the cap, at its age (HTTP/1 with its next answer), or at
    /// shutdown, and dropped if it does
    /// not close within the grace period (for its age, once requests under way have had
    /// the age's grace).
    async fn drive<C>(mut self, connection: C, mut streams: Streams)
    where
        C: GracefulConnection,
        C::Error: std::fmt::Display,
    {
        let mut connection = std::pin::pin!(connection);
        let header_timeout = self.header_timeout;
        let grace = CLOSE_GRACE.min(header_timeout);
        // Since when the connection was asked to close, once it was.
        let mut closing: Option<Instant> = None;
        // Idle from the accept: the first head must be complete within the header timeout.
        // When the deadline comes, a connection with a request under way is looked at again
        // a timeout later; an idle one is closed if it has been idle that long, else looked
        // at again when it will have been.
        let mut deadline = Instant::now() + header_timeout;
        // Past its age and its grace, the connection goes, requests under way or not.
        let mut cut_at: Option<Instant> = None;
        loop {
            // Once the connection, not known to be HTTP/2 at its age, closes with its next
            // answer.
            let past_age = self.tracked.past_age.load(Ordering::Relaxed);
            // The timers and signals in a set of their own, which polls them only when one of
            // them woke the task: polled beside the connection, they would each be polled
            // again (a timer entry, a lock on the signal's waiters) on every request.
            let mut watched = FuturesUnordered::new();
            watched.push(next_event(
                &self.tracked,
                &mut self.stopping,
                deadline,
                cut_at,
                self.aged_at.filter(|_| closing.is_none() && !past_age),
                past_age && closing.is_none(),
                closing.is_some(),
            ));
            let event = tokio::select! {
                // The connection first: a head that has arrived is read (and its request
                // counted) before an expired deadline is looked at.
                biased;
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(peer = %self.peer, "connection ended: {error}");
                    }
                    break;
                }
                // Then the streams it brought in, whose answers it writes together next.
                () = streams.run() => continue,
                Some(event) = watched.next() => event,
            };
            drop(watched);
            let now = Instant::now();
            match event {
                Event::Cut => {
                    self.log_cut();
                    break;
                }
                Event::Deadline => {
                    let wait = closing.map_or(header_timeout, |_| grace);
                    if let Some(again) = self.look_again(now, closing, wait) {
                        deadline = again;
                        continue;
                    }
                    if closing.is_some() {
                        tracing::debug!(peer = %self.peer, "connection dropped: it did not close when asked");
                        break;
                    }
                    tracing::debug!(peer = %self.peer, "closing a connection that sent no request head within {header_timeout:?}");
                    closing = Some(now);
                    connection.as_mut().graceful_shutdown();
                    deadline = now + grace;
                }
                Event::Reclaim => {
                    tracing::debug!(peer = %self.peer, "closing an idle connection to make room for a new one");
                    closing = Some(now);
                    connection.as_mut().graceful_shutdown();
                    deadline = now + grace;
                }
                Event::Aged if !self.tracked.http2.load(Ordering::Relaxed) => {
                    // HTTP/1 has no way to say "closing" but on an answer: closed after one
                    // that did not say so, or while idle, the connection could meet a request
                    // its client is already sending on it, lost to the client. The next answer
                    // made says `Connection: close` instead (an HTTP/2 stream on a connection
                    // that had none before wakes this task for GOAWAY). Requests under way
                    // still get only the age's grace.
                    tracing::debug!(peer = %self.peer, "a connection at its maximum age: its next answer closes it");
                    self.tracked.past_age.store(true, Ordering::Relaxed);
                    cut_at = Some(now + self.age_grace);
                }
                Event::Aged | Event::UsedPastAge => {
                    tracing::debug!(peer = %self.peer, "closing a connection at its maximum age");
                    closing = Some(now);
                    cut_at = cut_at.or(Some(now + self.age_grace));
                    connection.as_mut().graceful_shutdown();
                    // Requests under way, gRPC streams still sending included, get the age's
                    // grace.
                    deadline = now + self.age_grace;
                }
                Event::Stopping => {
                    closing = Some(now);
                    connection.as_mut().graceful_shutdown();
                    deadline = now + grace;
                }
            }
        }
        streams.finish();
    }
}

/// What a connection's task waits for besides the connection.
enum Event {
    /// Past its age and the age's grace.
    Cut,
    /// The header timeout (or the grace of a close) came.
    Deadline,
    /// Asked to close to make room for a new connection.
    Reclaim,
    /// At its maximum age.
    Aged,
    /// An HTTP/2 stream came on a connection past its age not known to be HTTP/2 then.
    UsedPastAge,
    /// The server is stopping.
    Stopping,
}

/// The first of a connection's timers and signals; those of a connection already asked to
/// close (`closing`) are left out, but for its deadline and cut. A stream on a connection past
/// its age is waited for only while it is (`past_age`).
async fn next_event(
    tracked: &Tracked,
    stopping: &mut watch::Receiver<bool>,
    deadline: Instant,
    cut_at: Option<Instant>,
    aged_at: Option<Instant>,
    past_age: bool,
    closing: bool,
) -> Event {
    tokio::select! {
        biased;
        () = sleep_until_some(cut_at), if cut_at.is_some() => Event::Cut,
        () = tokio::time::sleep_until(deadline) => Event::Deadline,
        () = tracked.reclaim.notified(), if !closing => Event::Reclaim,
        () = sleep_until_some(aged_at), if aged_at.is_some() => Event::Aged,
        () = tracked.used_past_age.notified(), if past_age => Event::UsedPastAge,
        _ = stopping.changed(), if !closing => Event::Stopping,
    }
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The HTTP/1 and HTTP/2 builder of one connection, with the head bounds; its HTTP/2 streams
/// run on `executor`; answers get a `Date` field if `dated`. The header timeout is the
/// connection's task's ([`Watch::drive`]), not hyper's: hyper's armed a timer of its own for
/// every request head, a clock read, an allocation and a timer wheel entry made and removed.
fn connection_builder(
    limits: &ConnectionLimits,
    executor: StreamExecutor,
    dated: bool,
) -> auto::Builder<StreamExecutor> {
    let stack_head_bytes = limits.stack_head_bytes();
    let mut builder = auto::Builder::new(executor);
    builder
        .http1()
        .header_read_timeout(None)
        .auto_date_header(dated)
        .max_buf_size(stack_head_bytes.max(8192))
        .max_headers(limits.stack_header_fields());
    builder
        .http2()
        .timer(TokioTimer::new())
        .auto_date_header(dated)
        .max_header_list_size(u32::try_from(stack_head_bytes).unwrap_or(u32::MAX));
    builder
}

/// The next connection and its place under the cap (made by closing an idle connection when
/// the cap is reached); `None` at shutdown.
async fn next_connection(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    registry: &Registry,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<(
    tokio::net::TcpStream,
    std::net::SocketAddr,
    OwnedSemaphorePermit,
)> {
    let (stream, peer) = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => break accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = shutdown.as_mut() => return None,
        }
    };
    tracing::debug!(%peer, "connection accepted");
    let permit = match Arc::clone(permits).try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => make_room(permits, registry, peer, shutdown).await?,
    };
    Some((stream, peer, permit))
}

/// At the cap: closes the connection idle the longest (once one is idle) and waits for a free
/// place; `None` at shutdown.
async fn make_room(
    permits: &Arc<Semaphore>,
    registry: &Registry,
    peer: std::net::SocketAddr,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<OwnedSemaphorePermit> {
    registry.waiting.store(true, Ordering::SeqCst);
    let mut asked = false;
    let permit = loop {
        if !asked {
            asked = registry.reclaim_idle();
            if asked {
                tracing::debug!(%peer, "at the connection cap: closing the connection idle the longest to make room");
            } else {
                tracing::debug!(%peer, "at the connection cap, every connection busy: waiting for one to end or go idle");
            }
        }
        tokio::select! {
            permit = Arc::clone(permits).acquire_owned() => break permit.ok(),
            () = registry.became_idle.notified(), if !asked => {}
            () = shutdown.as_mut() => break None,
        }
    };
    registry.waiting.store(false, Ordering::SeqCst);
    permit
}

/// What a connection holds until it ends: its place under the cap and in the registry.
struct Slot {
    registry: Arc<Registry>,
    id: u64,
    _permit: OwnedSemaphorePermit,
    _running: mpsc::Sender<()>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

/// Binds a listener, saying what for when it cannot.
pub async fn listen(
    address: std::net::SocketAddr,
    what: &str,
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), String> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| format!("cannot listen on {address} for {what}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("cannot read the {what} address: {error}"))?;
    Ok((listener, bound))
}
