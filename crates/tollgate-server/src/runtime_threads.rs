//! `--threads`: how many threads the shared runtime runs (its event loop, the checks, the
//! stores' and the admin API's work, and the connections unless `--http-workers` gives them
//! threads of their own), and how the start-up lines say it.
//!
//! One a core by default, as many as the process may use (its CPU affinity and cgroup quota).
//! On cores shared with other busy processes, fewer threads than cores keep the tail short: a
//! request on a thread the kernel has preempted waits for the scheduler's next tick.

use tollgate_http::http_server::{MAX_WORKERS, Workers};

/// One thread a core the process may use (its CPU affinity and cgroup quota, as the standard
/// library counts them), at most [`MAX_WORKERS`].
pub(crate) fn one_a_core() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_WORKERS)
}

/// The shared runtime, on `threads` threads (else [`one_a_core`]).
pub(crate) fn runtime(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(tollgate_http::http_server::worker_parks)
        // Always set: tokio's own default reads TOKIO_WORKER_THREADS and panics on a bad value.
        .worker_threads(threads.unwrap_or_else(one_a_core))
        .build()
}

/// `--threads`.
pub(crate) fn thread_count(text: &str) -> Result<usize, String> {
    crate::flag_count::count_in(
        text,
        1..=MAX_WORKERS,
        "the server needs a thread; more than a thousand is no machine's cores",
    )
}

/// The start-up line's text: the shared runtime's threads, and the connections' workers.
/// Called on the shared runtime.
pub(crate) fn describe(workers: Option<&Workers>) -> String {
    let shared = tokio::runtime::Handle::current().metrics().num_workers();
    match workers {
        None => format!("{shared} (--threads), serving the connections too"),
        Some(workers) => format!(
            "{shared} (--threads), and {} of their own serving the connections (--http-workers)",
            workers.threads()
        ),
    }
}
