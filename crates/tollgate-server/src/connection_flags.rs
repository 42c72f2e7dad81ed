//! The bounds on every listener's connections, request heads and slow clients, as flags (what
//! they bound is told in `tollgate_http::http_server`).

use std::time::Duration;

use tollgate_http::http_server::{ConnectionLimits, Workers};

/// `--max-connections`, `--header-timeout`, `--max-header-bytes`, `--max-header-fields`,
/// `--shutdown-timeout`, `--max-connection-age`, `--max-connection-age-grace` and
/// `--http-workers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionFlags {
    /// The most client connections open at once (at least 1). At the cap, the connection idle
    /// the longest is closed to make room; while every connection is busy, more wait.
    #[arg(
        long,
        env = "TOLLGATE_MAX_CONNECTIONS",
        default_value_t = 10_000,
        value_parser = connection_count,
        value_name = "N"
    )]
    pub max_connections: usize,
    /// How long a connection may go without sending a complete request head: from its accept,
    /// and on a keep-alive connection from its last answer. Then it is closed.
    #[arg(long, env = "TOLLGATE_HEADER_TIMEOUT", default_value = "10s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub header_timeout: Duration,
    /// The most bytes of header fields (names and values) a request may carry; more is 431.
    #[arg(
        long,
        env = "TOLLGATE_MAX_HEADER_BYTES",
        default_value_t = 32 * 1024,
        value_parser = header_bytes,
        value_name = "BYTES"
    )]
    pub max_header_bytes: usize,
    /// The most header fields a request may carry; more is 431.
    #[arg(
        long,
        env = "TOLLGATE_MAX_HEADER_FIELDS",
        default_value_t = 100,
        value_parser = header_fields,
        value_name = "N"
    )]
    pub max_header_fields: usize,
    /// How long shutdown waits for requests under way before closing their connections.
    #[arg(long, env = "TOLLGATE_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub shutdown_timeout: Duration,
    /// How long a connection lives (give or take 10%, so that connections made together do
    /// not all end together) before it is asked to close: an HTTP/2 client such as Envoy then
    /// opens a new one, which may reach a pod added since. `0s` keeps connections for good.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTION_AGE", default_value = "10m", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub max_connection_age: Duration,
    /// How long requests under way on a connection past its age may take (long-lived gRPC
    /// streams included) before the connection is closed under them.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTION_AGE_GRACE", default_value = "30s", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub max_connection_age_grace: Duration,
    /// How many threads serve the connections (of every listener), each on an event loop of
    /// its own with the connections handed to it (the one with the fewest takes the next), as
    /// NGINX's worker processes: less CPU a request for clients whose connections each carry a
    /// steady share of the load. `0` serves them on the threads the rest of the server shares,
    /// where any idle thread takes up a busy one's work, which keeps a busy HTTP check server's
    /// tail short for pooled clients and on cores shared with other busy processes (fewer
    /// threads than cores, `--threads`, shorten it further). Default: one a core for
    /// `tollgate proxy`, `0` for `tollgate serve`.
    #[arg(
        long,
        env = "TOLLGATE_HTTP_WORKERS",
        value_parser = worker_count,
        value_name = "N"
    )]
    pub http_workers: Option<usize>,
}

/// `--max-connections`: 0 would accept no client at all.
fn connection_count(text: &str) -> Result<usize, String> {
    crate::flag_count::count_in(text, 1..=1_000_000, "0 would accept no connection at all")
}

/// `--http-workers`.
fn worker_count(text: &str) -> Result<usize, String> {
    crate::flag_count::count_in(
        text,
        0..=tollgate_http::http_server::MAX_WORKERS,
        "0 serves connections on the shared threads; more than a thousand is no machine's cores",
    )
}

/// `--max-header-bytes`.
fn header_bytes(text: &str) -> Result<usize, String> {
    crate::flag_count::count_in(text, 1_024..=1024 * 1024, "a request head must fit")
}

/// `--max-header-fields`.
fn header_fields(text: &str) -> Result<usize, String> {
    crate::flag_count::count_in(text, 8..=10_000, "a request needs a few header fields")
}

/// How many worker threads a command serves its connections on unless `--http-workers` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultWorkers {
    /// The shared runtime (`tollgate serve`): a check is short and CPU-bound, and a thread of
    /// the shared runtime takes up a preempted one's connections, where a worker's wait for
    /// its core (against a pooled client on shared cores, p99 0.6 ms became 4 ms) would not.
    Shared,
    /// One a core (`tollgate proxy`), as NGINX and Envoy serve: a proxied request waits on its
    /// upstream, and a connection kept on one thread with its upstream connections costs less
    /// CPU and kept the proxy closer to NGINX's rate (docs/benchmarks.md).
    PerCore,
}

impl DefaultWorkers {
    fn threads(self) -> usize {
        match self {
            DefaultWorkers::Shared => 0,
            DefaultWorkers::PerCore => crate::runtime_threads::one_a_core(),
        }
    }
}

impl ConnectionFlags {
    /// The bounds the flags set, with the worker threads they ask for (else `default`'s)
    /// started.
    pub fn limits(&self, default: DefaultWorkers) -> Result<ConnectionLimits, String> {
        let workers = match self.http_workers.unwrap_or_else(|| default.threads()) {
            0 => None,
            threads => Some(Workers::start(threads)?),
        };
        Ok(ConnectionLimits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            max_header_bytes: self.max_header_bytes,
            max_header_fields: self.max_header_fields,
            shutdown_timeout: self.shutdown_timeout,
            max_connection_age: self.max_connection_age,
            max_connection_age_grace: self.max_connection_age_grace,
            workers,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        connections: ConnectionFlags,
    }

    fn workers(args: &[&str], default: DefaultWorkers) -> usize {
        let command =
            Command::try_parse_from(std::iter::once("tollgate").chain(args.iter().copied()))
                .expect("valid flags");
        let limits = command.connections.limits(default).expect("starts");
        limits.workers.as_ref().map_or(0, Workers::threads)
    }

    #[test]
    fn the_proxy_serves_on_a_worker_a_core_and_the_check_server_on_the_shared_runtime() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(workers(&[], DefaultWorkers::PerCore), cores);
        assert_eq!(workers(&[], DefaultWorkers::Shared), 0);
        assert_eq!(
            workers(&["--http-workers", "0"], DefaultWorkers::PerCore),
            0
        );
        assert_eq!(workers(&["--http-workers", "3"], DefaultWorkers::Shared), 3);
    }
}
