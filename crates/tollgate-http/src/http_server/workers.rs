//! Threads that each serve the connections handed to them on a runtime of their own, one
//! thread to a runtime, as NGINX's worker processes do. On tokio's shared runtime a
//! connection's task may run on any of its threads: a worker that runs out of tasks wakes and
//! steals from the others, and a task woken by another thread moves its state across caches.
//! A connection here stays on one thread from its accept to its close, and so do the tasks it
//! spawns (the proxy's connections to a plain `http://` upstream among them): a proxied
//! request costs up to a fifth less CPU (docs/benchmarks.md). A connection cannot move, so a
//! worker holding more of the busy ones at a moment queues them while another may idle:
//! worker threads are for clients whose connections each carry a steady share of the load.
//!
//! Work a request sets off that outlives it (a Redis reconnection, a lease fetch, the lease
//! sweeper) runs on the worker it started from; a set must outlive the limiter it serves.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The most worker threads: more than any machine's cores, and a bound on what a flag starts.
pub const MAX_WORKERS: usize = 1024;

thread_local! {
    /// Which worker this thread is; 0 on every other thread.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker this thread is (0 on any thread that is not one), so that what a
/// connection keeps per thread (idle connections to an upstream) stays on its thread.
pub(crate) fn current() -> usize {
    INDEX.with(Cell::get)
}

/// The worker threads, handed out to connections by [`Workers::spawn`]; cheap to clone. The
/// threads stop, their connections and the tasks started on them dropped, when the last clone
/// goes: keep a set as long as the limiter its connections use.
#[derive(Clone)]
pub struct Workers {
    inner: Arc<Inner>,
}

struct Inner {
    workers: Box<[Worker]>,
    /// Where the round of picks starts next, so that ties go round.
    next: AtomicUsize,
}

struct Worker {
    runtime: Handle,
    /// The connections it serves now.
    connections: Arc<AtomicUsize>,
    /// Dropped with the set: the thread's runtime then stops.
    _stop: oneshot::Sender<()>,
}

/// One connection counted on its worker for as long as it lives, however its task ends (a
/// handler's panic unwinds it too, and a task its runtime never ran is dropped).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(connections: &Arc<AtomicUsize>) -> Self {
        connections.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(connections))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Starts `count` worker threads (1 to [`MAX_WORKERS`]), named `tollgate-wN` (Linux keeps
    /// 15 bytes of a thread's name).
    pub fn start(count: usize) -> Result<Self, String> {
        if !(1..=MAX_WORKERS).contains(&count) {
            return Err(format!("{count} worker threads: give 1 to {MAX_WORKERS}"));
        }
        let workers = (0..count)
            .map(Worker::start)
            .collect::<Result<Box<[Worker]>, String>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                workers,
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// How many threads there are.
    pub fn threads(&self) -> usize {
        self.inner.workers.len()
    }

    /// Runs `serve` on `stream`, moved to the worker with the fewest connections: the stream
    /// is taken from this runtime's poller and given to the worker's. A stream that cannot be
    /// moved is closed, and the failure logged.
    pub(crate) fn spawn<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let worker = &self.inner.workers[self.pick()];
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!("cannot hand a connection to a worker thread: {error}");
                return;
            }
        };
        let counted = Counted::new(&worker.connections);
        worker.runtime.spawn(async move {
            let _counted = counted;
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(error) => {
                    tracing::warn!("a worker thread cannot take a connection: {error}");
                }
            }
        });
    }

    /// The index of the worker with the fewest connections, ties broken in turn.
    fn pick(&self) -> usize {
        let workers = &self.inner.workers;
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed) % workers.len();
        (start..workers.len())
            .chain(0..start)
            .min_by_key(|&index| workers[index].connections.load(Ordering::Relaxed))
            .unwrap_or(start)
    }
}

impl Worker {
    /// Starts the thread, which builds its runtime itself: a runtime built here and dropped
    /// here when the thread cannot start would panic inside the caller's runtime.
    fn start(index: usize) -> Result<Self, String> {
        let failed =
            |error: &dyn std::fmt::Display| format!("cannot start worker thread {index}: {error}");
        let (stop, stopped) = oneshot::channel::<()>();
        let (started, handle) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(format!("tollgate-w{index}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .on_thread_park(super::worker_parks)
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = started.send(Err(error));
                        return;
                    }
                };
                INDEX.with(|cell| cell.set(index));
                let _ = started.send(Ok(runtime.handle().clone()));
                // Returns when the set is dropped; the runtime's tasks are dropped with it.
                let _ = runtime.block_on(stopped);
            })
            .map_err(|error| failed(&error))?;
        let runtime = handle
            .recv()
            .map_err(|error| failed(&error))?
            .map_err(|error| failed(&error))?;
        Ok(Self {
            runtime,
            connections: Arc::new(AtomicUsize::new(0)),
            _stop: stop,
        })
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.threads())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connections each worker of `workers` serves, set by hand.
    fn serving(workers: &Workers, counts: &[usize]) {
        for (worker, &count) in workers.inner.workers.iter().zip(counts) {
            worker.connections.store(count, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_worker_with_the_fewest_connections_takes_the_next_ties_in_turn() {
        let workers = Workers::start(3).expect("three workers");
        serving(&workers, &[2, 0, 1]);
        assert_eq!(workers.pick(), 1);
        serving(&workers, &[1, 1, 0]);
        assert_eq!(workers.pick(), 2);
        serving(&workers, &[0, 0, 0]);
        // Two picks so far: the round goes on from the third worker.
        let picks: Vec<usize> = (0..3).map(|_| workers.pick()).collect();
        assert_eq!(picks, [2, 0, 1]);
    }

    #[test]
    fn a_connection_is_uncounted_however_its_task_ends() {
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Counted::new(&connections);
        assert_eq!(connections.load(Ordering::Relaxed), 1);
        let panicked = std::thread::spawn(move || {
            let _counted = counted;
            panic!("a handler's panic");
        })
        .join();
        assert!(panicked.is_err());
        assert_eq!(connections.load(Ordering::Relaxed), 0);
    }
}
