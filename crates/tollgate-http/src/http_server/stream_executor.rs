//! Runs a connection's HTTP/2 streams inside the connection's own task.
//!
//! hyper hands each HTTP/2 request to an executor. Spawned as tokio tasks, every answered
//! stream woke the connection task straight into tokio's LIFO slot, so the connection wrote
//! each answer with a system call of its own before the next stream ran: about 0.8 `writev`
//! an answer under gRPC load, and a p99 that grew with the number of connections. Run here,
//! the streams a read brought in are answered in one pass, and the connection writes their
//! answers together on its next poll.
//!
//! The price: one connection's requests share one worker at a time (tokio still moves the
//! connection's task between workers). A check costs microseconds, and clients that carry
//! much load (Envoy opens a connection per worker thread) spread it over connections.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::FutureExt as _;
use futures_util::stream::{FuturesUnordered, StreamExt};

type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The streams hyper handed over and not yet taken, and whether there are any: an HTTP/1
/// connection never has one, and its task looks at the flag alone on every wake-up.
#[derive(Default)]
struct Queue {
    streams: Mutex<Vec<StreamFuture>>,
    any: AtomicBool,
}

/// The executor given to hyper for one connection: it queues the streams for [`Streams`].
#[derive(Clone, Default)]
pub(super) struct StreamExecutor {
    queued: Arc<Queue>,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    /// A stream that panics ends alone (its client gets a reset), as a spawned task would,
    /// and not its connection with every other stream on it.
    fn execute(&self, future: F) {
        let isolated = AssertUnwindSafe(future).catch_unwind().map(drop);
        let mut streams = self
            .queued
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        streams.push(Box::pin(isolated));
        self.queued.any.store(true, Ordering::Release);
    }
}

/// The streams of one connection, polled by the connection's task after the connection.
pub(super) struct Streams {
    queued: Arc<Queue>,
    running: FuturesUnordered<StreamFuture>,
}

impl Streams {
    /// The streams `executor` queues.
    pub(super) fn of(executor: &StreamExecutor) -> Self {
        Self {
            queued: Arc::clone(&executor.queued),
            running: FuturesUnordered::new(),
        }
    }

    /// Polls every stream woken or queued since the last poll. Never ready: a stream queued
    /// later is queued by the connection (or by a stream, for an upgrade), both polled in
    /// this task, and the connection's select polls this after them.
    pub(super) fn run(&mut self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            self.poll_streams(cx);
            Poll::Pending
        })
    }

    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        loop {
            if self.running.is_empty() && !self.queued.any.load(Ordering::Acquire) {
                return;
            }
            self.running.extend(self.take_queued());
            // Ready(None) once none is left; Pending while the rest wait (or after a long pass).
            while let Poll::Ready(Some(())) = self.running.poll_next_unpin(cx) {}
            // A stream may have queued another (an upgraded stream's sender) while polled.
            if !self.queued.any.load(Ordering::Acquire) {
                return;
            }
        }
    }

    fn take_queued(&self) -> Vec<StreamFuture> {
        let mut streams = self
            .queued
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.queued.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *streams)
    }

    /// Lets the streams still under way finish on a task of their own once the connection is
    /// gone, as spawned streams would.
    pub(super) fn finish(mut self) {
        self.running.extend(self.take_queued());
        if !self.running.is_empty() {
            tokio::spawn(async move { while self.running.next().await.is_some() {} });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::rt::Executor as _;

    use super::*;

    /// Queues a stream that counts itself done in `done` after `yields` yields.
    fn queue(executor: &StreamExecutor, done: &Arc<AtomicUsize>, yields: usize) {
        let done = Arc::clone(done);
        executor.execute(async move {
            for _ in 0..yields {
                tokio::task::yield_now().await;
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
    }

    #[tokio::test]
    async fn queued_streams_run_in_the_pass_that_finds_them_and_a_panic_ends_only_its_own() {
        let executor = StreamExecutor::default();
        let mut streams = Streams::of(&executor);
        let done = Arc::new(AtomicUsize::new(0));
        queue(&executor, &done, 0);
        executor.execute(async { panic!("a handler's bug") });
        queue(&executor, &done, 0);
        queue(&executor, &done, 1);
        let once = std::future::poll_fn(|cx| {
            let run = std::pin::pin!(streams.run());
            assert!(run.poll(cx).is_pending(), "run is never ready");
            Poll::Ready(())
        });
        once.await;
        assert_eq!(
            done.load(Ordering::SeqCst),
            2,
            "the ready streams answered in one pass"
        );
        assert_eq!(streams.running.len(), 1, "only the yielding stream is left");
        streams.finish();
        // On this single-threaded runtime each yield lets the spawned task run once; the
        // stream left needs two polls.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            done.load(Ordering::SeqCst),
            3,
            "finish lets the stream left finish on its own task"
        );
    }
}
