//! The HTTP accept loop shared by `serve` and `proxy`, with the bounds a public listener needs:
//! at most `max_connections` connections at once (more wait in the kernel's backlog), a client
//! must send its request head within `header_timeout`, and shutdown lets requests under way
//! finish for at most `shutdown_timeout`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The address a connection was accepted on (this side of the socket), in every request's
/// extensions, so that a handler can tell which of the host's addresses the client reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub std::net::SocketAddr);

/// Bounds on connections and slow clients.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionLimits {
    /// The most client connections open at once; more wait to be accepted.
    #[arg(
        long,
        env = "TOLLGATE_MAX_CONNECTIONS",
        default_value_t = 10_000,
        value_name = "N"
    )]
    pub max_connections: usize,
    /// How long a client has to send a request's head before its connection is closed.
    #[arg(long, env = "TOLLGATE_HEADER_TIMEOUT", default_value = "10s", value_parser = crate::cli::duration_arg, value_name = "DURATION")]
    pub header_timeout: Duration,
    /// How long shutdown waits for requests under way before closing their connections.
    #[arg(long, env = "TOLLGATE_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = crate::cli::duration_arg, value_name = "DURATION")]
    pub shutdown_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok().map(LocalAddr);
        let service = tower::ServiceBuilder::new()
            .map_request(
                move |mut request: axum::http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    if let Some(local) = local {
                        request.extensions_mut().insert(local);
                    }
                    request
                },
            )
            .service(app.clone());
        let connection = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = watched.await {
                tracing::debug!(%peer, "connection ended: {error}");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "shutdown: requests still under way after {:?} were cut off",
            limits.shutdown_timeout
        );
    }
}
