//! Graceful shutdown: SIGTERM or SIGINT stop accepting and let requests under way finish.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal as unix_signal};

/// The listeners' stop: `delay` after the process is asked to stop. Meanwhile readiness
/// already says not ready while the listeners keep serving, so that load balancers move away
/// before they close (Kubernetes removes a pod from its Services some time after its SIGTERM).
#[derive(Debug, Clone)]
pub struct Shutdown(tokio::sync::watch::Receiver<bool>);

impl Shutdown {
    /// Listens for the stop signals now (see [`signal`]); call it inside a Tokio runtime.
    pub fn after_signal(delay: std::time::Duration) -> Self {
        let asked = signal();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            asked.await;
            if !delay.is_zero() {
                tracing::info!(
                    "draining: not ready, still serving for {delay:?} before closing the listeners"
                );
                tokio::time::sleep(delay).await;
            }
            tracing::info!("shutting down: finishing requests under way");
            let _ = stop.send(true);
        });
        Self(stopped)
    }

    /// Resolves when the listeners are to close.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.0.clone();
        async move {
            // An error means the sender is gone, which only a stop can have caused.
            let _ = stopped.wait_for(|stopped| *stopped).await;
        }
    }
}

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
    }
}
