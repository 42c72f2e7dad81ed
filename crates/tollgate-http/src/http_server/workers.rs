//! Threads that each serve the connections handed to them on a runtime of their own, one
//! thread to a runtime, as NGINX's worker processes do. On tokio's shared runtime a
//! connection's task may run on any of its threads: a worker that runs out of tasks wakes and
//! steals from the others, and a task woken by another thread moves its state across caches.
//! A connection here stays on one thread from its accept to its close, and so does every task
//! it spawns (the proxy's connections to its upstream among them): a proxied request costs up
//! to a fifth less CPU (docs/benchmarks.md). A worker whose core another process takes holds
//! up its own connections, where the shared runtime's other threads would take them over:
//! worker threads are for cores the server has to itself.

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

/// How many workers the largest set started has; 1 before any.
static STARTED: AtomicUsize = AtomicUsize::new(1);

/// The index of the worker this thread is (0 on any thread that is not one), so that what a
/// connection keeps per thread (idle connections to an upstream) stays on its thread.
pub(crate) fn current() -> usize {
    INDEX.with(Cell::get)
}

/// How many workers there are to keep things per thread for: at least 1.
pub(crate) fn count() -> usize {
    STARTED.load(Ordering::Relaxed)
}

/// The worker threads, handed out to connections by [`Workers::spawn`]; cheap to clone. The
/// threads stop, their connections dropped, when the last clone goes.
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

impl Workers {
    /// Starts `count` worker threads (1 to [`MAX_WORKERS`]), named `tollgate-http-N`.
    pub fn start(count: usize) -> Result<Self, String> {
        if !(1..=MAX_WORKERS).contains(&count) {
            return Err(format!("{count} worker threads: give 1 to {MAX_WORKERS}"));
        }
        let workers = (0..count)
            .map(Worker::start)
            .collect::<Result<Box<[Worker]>, String>>()?;
        STARTED.fetch_max(count, Ordering::Relaxed);
        Ok(Self {
            inner: Arc::new(Inner {
                workers,
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// How many threads there are.
    pub fn len(&self) -> usize {
        self.inner.workers.len()
    }

    /// Never: a set has at least one thread.
    pub fn is_empty(&self) -> bool {
        self.inner.workers.is_empty()
    }

    /// Runs `serve` on `stream`, moved to the worker with the fewest connections: the stream
    /// is taken from this runtime's poller and given to the worker's. A stream that cannot be
    /// moved is closed, and the failure logged.
    pub(crate) fn spawn<F, Fut>(&self, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let worker = self.pick();
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!("cannot hand a connection to a worker thread: {error}");
                return;
            }
        };
        let connections = Arc::clone(&worker.connections);
        connections.fetch_add(1, Ordering::Relaxed);
        worker.runtime.spawn(async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(error) => {
                    tracing::warn!("a worker thread cannot take a connection: {error}");
                }
            }
            connections.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// The worker with the fewest connections, ties broken in turn.
    fn pick(&self) -> &Worker {
        let workers = &self.inner.workers;
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed) % workers.len();
        let mut best = &workers[start];
        let mut fewest = best.connections.load(Ordering::Relaxed);
        for worker in workers[start + 1..].iter().chain(&workers[..start]) {
            let connections = worker.connections.load(Ordering::Relaxed);
            if connections < fewest {
                best = worker;
                fewest = connections;
            }
        }
        best
    }
}

impl Worker {
    fn start(index: usize) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| format!("cannot start worker thread {index}: {error}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("tollgate-http-{index}"))
            .spawn(move || {
                INDEX.with(|cell| cell.set(index));
                // Returns when the set is dropped; the runtime's tasks are dropped with it.
                let _ = runtime.block_on(stopped);
            })
            .map_err(|error| format!("cannot start worker thread {index}: {error}"))?;
        Ok(Self {
            runtime: handle,
            connections: Arc::new(AtomicUsize::new(0)),
            _stop: stop,
        })
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.len())
            .finish_non_exhaustive()
    }
}
