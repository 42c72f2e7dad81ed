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
    /// where any idle thread takes up a busy one's work, which keeps the tail short for pooled
    /// clients and on cores shared with other busy processes.
    #[arg(
        long,
        env = "TOLLGATE_HTTP_WORKERS",
        default_value_t = 0,
        value_parser = worker_count,
        value_name = "N"
    )]
    pub http_workers: usize,
}

fn count_in(
    text: &str,
    range: std::ops::RangeInclusive<usize>,
    why: &str,
) -> Result<usize, String> {
    let value: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "must be from {} to {} ({why})",
            range.start(),
            range.end()
        ))
    }
}

/// `--max-connections`: 0 would accept no client at all.
fn connection_count(text: &str) -> Result<usize, String> {
    count_in(text, 1..=1_000_000, "0 would accept no connection at all")
}

/// `--http-workers`.
fn worker_count(text: &str) -> Result<usize, String> {
    count_in(
        text,
        0..=tollgate_http::http_server::MAX_WORKERS,
        "0 serves connections on the shared threads; more than a thousand is no machine's cores",
    )
}

/// `--max-header-bytes`.
fn header_bytes(text: &str) -> Result<usize, String> {
    count_in(text, 1_024..=1024 * 1024, "a request head must fit")
}

/// `--max-header-fields`.
fn header_fields(text: &str) -> Result<usize, String> {
    count_in(text, 8..=10_000, "a request needs a few header fields")
}

impl ConnectionFlags {
    /// The bounds the flags set, with the worker threads they ask for started.
    pub fn limits(&self) -> Result<ConnectionLimits, String> {
        let workers = match self.http_workers {
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
