//! Graceful shutdown: SIGTERM or SIGINT stop accepting and let requests under way finish.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal as unix_signal};

/// Resolves when the process is asked to stop. The handlers are in place when this returns,
/// not when the future is first polled: a server that announces itself after calling it ends
/// cleanly on a SIGTERM that comes at once (without a handler, the signal would kill it).
/// Call it inside a Tokio runtime.
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    let terminate = unix_signal(SignalKind::terminate()).ok();
    let interrupt = unix_signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
            match signal {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(terminate) => {}
            () = wait(interrupt) => {}
        }
        tracing::info!("shutting down: finishing requests under way");
    }
}
