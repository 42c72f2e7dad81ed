//! One connection type over a single Redis and a Redis Cluster, both multiplexed: every
//! clone shares the same sockets and concurrent commands are pipelined, so no check waits for
//! another's round trip.
//!
//! The first connection is made in the background and retried with backoff until it succeeds,
//! so that a store can be built while Redis is down (a node restarting during a Redis outage
//! still comes up, and answers by its failure policies). Until then every command fails at
//! once with the reason the last attempt failed. Once connected, the connection reconnects by
//! itself after a connection is lost.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, ProtocolVersion, RedisFuture, Value};
use tokio::sync::watch;

use tollgate_core::store::StoreError;

use super::sentinel::{Following, Sentinels};
use crate::RedisUrl;

/// The first wait between connection attempts; it doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between connection attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

/// What to connect to.
// One lives per store, moved once into the task that connects: its size costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    /// A single Redis, through a reconnecting manager.
    Node(redis::Client, ConnectionManagerConfig),
    /// A Redis Cluster: the client to try first (RESP3), and the one for a cluster that refuses
    /// it (RESP2).
    Cluster(ClusterClient, ClusterClient),
    /// The master a group of sentinels names, followed across failovers.
    Sentinel(Sentinels, ConnectionManagerConfig),
}

/// An established connection.
#[derive(Clone)]
enum Established {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<Following>),
}

/// Where the connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    /// No attempt has finished yet.
    Connecting,
    /// Not connected: why the last attempt failed (credentials redacted). Attempts go on.
    Failed(StoreError),
    /// Connected.
    Connected,
}

/// What the clones of a connection share.
struct Link {
    cluster: bool,
    /// The URLs connected to, to take their passwords out of error messages.
    urls: Vec<RedisUrl>,
    established: OnceLock<Established>,
    status: watch::Sender<Status>,
}

impl Link {
    /// The URLs, passwords masked.
    fn shown(&self) -> String {
        self.urls
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `message` without any password of the URLs connected to.
    fn redact(&self, message: &str) -> String {
        self.urls
            .iter()
            .fold(message.to_owned(), |text, url| url.redact(&text))
    }
}

/// A single Redis or a Redis Cluster, connected or still connecting.
#[derive(Clone)]
pub(crate) struct Connection {
    link: Arc<Link>,
    /// This clone's copy of the established connection, taken from the link once there is one.
    local: Option<Established>,
}

impl Connection {
    /// Starts connecting to `target` in the background (on the current Tokio runtime) and
    /// keeps trying, with backoff, until it succeeds or every clone is dropped.
    pub(crate) fn connect(
        target: Target,
        urls: Vec<RedisUrl>,
        timeout: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let (status, _) = watch::channel(Status::Connecting);
        let link = Arc::new(Link {
            cluster: matches!(target, Target::Cluster(..)),
            urls,
            established: OnceLock::new(),
            status,
        });
        runtime.spawn(connect_until_up(Arc::downgrade(&link), target, timeout));
        Self { link, local: None }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.link.cluster
    }

    /// Where the connection stands.
    pub(crate) fn status(&self) -> Status {
        self.link.status.borrow().clone()
    }

    /// Waits until the first attempt has finished (or a later one connected).
    pub(crate) async fn first_attempt(&self) {
        let mut status = self.link.status.subscribe();
        // The sender lives in the link, which `self` holds: waiting cannot fail.
        let _ = status
            .wait_for(|status| *status != Status::Connecting)
            .await;
    }

    /// Takes this clone's copy of the established connection, once there is one.
    fn pick_up(&mut self) {
        if self.local.is_none() {
            self.local = self.link.established.get().cloned();
        }
    }
}

/// The error a command gets while there is no connection yet: where to, and why not.
fn not_connected(link: &Link) -> redis::RedisError {
    let why = match &*link.status.borrow() {
        Status::Failed(StoreError::Unavailable(message) | StoreError::Failed(message)) => {
            format!(": {message}")
        }
        Status::Failed(error) => format!(": {error}"),
        Status::Connecting | Status::Connected => String::new(),
    };
    let reason = format!("not connected to Redis at {} yet{why}", link.shown());
    std::io::Error::new(std::io::ErrorKind::NotConnected, reason).into()
}

/// A connection manager for `client`: in RESP3 when the client asks for it and the server
/// speaks it (a lost connection is then noticed as its socket closes, rather than by the next
/// command, which would fail), else in RESP2.
pub(crate) async fn connection_manager(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
) -> redis::RedisResult<ConnectionManager> {
    match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
        Err(error) if refuses_resp3(&error) => {
            let info = client.get_connection_info().clone();
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP2);
            let client = redis::Client::open(info.set_redis_settings(settings))?;
            ConnectionManager::new_with_config(client, config.clone()).await
        }
        outcome => outcome,
    }
}

/// The server does not speak RESP3 (it has no `HELLO`: Redis before 6, or a compatible server).
/// A cluster client wraps the server's answer in its own error, so the whole text is read.
fn refuses_resp3(error: &redis::RedisError) -> bool {
    let text = error.to_string();
    error.kind() == redis::ErrorKind::RESP3NotSupported
        || (text.contains("unknown command") && text.contains("HELLO"))
}

/// Tries to connect until it succeeds, then hands the connection to every clone; gives up when
/// the store is dropped.
async fn connect_until_up(link: Weak<Link>, target: Target, timeout: Duration) {
    let mut delay = FIRST_RETRY_DELAY;
    let mut failures = 0u64;
    loop {
        if link.strong_count() == 0 {
            return;
        }
        let attempt = match &target {
            Target::Node(client, config) => connection_manager(client, config)
                .await
                .map(Established::Node),
            Target::Cluster(preferred, fallback) => match preferred.get_async_connection().await {
                Err(error) if refuses_resp3(&error) => fallback.get_async_connection().await,
                outcome => outcome,
            }
            .map(Established::Cluster),
            Target::Sentinel(sentinels, config) => {
                Following::connect(Arc::clone(sentinels), config.clone())
                    .await
                    .map(Established::Sentinel)
            }
        };
        let Some(link) = link.upgrade() else {
            return;
        };
        match attempt {
            Ok(established) => {
                let _ = link.established.set(established);
                link.status.send_replace(Status::Connected);
                if failures > 0 {
                    tracing::info!(
                        target: "tollgate::store",
                        "connected to Redis at {} after {failures} failed attempts",
                        link.shown()
                    );
                }
                return;
            }
            Err(error) => {
                let tls = link
                    .urls
                    .iter()
                    .all(|url| url.to_string().starts_with("rediss:"));
                let error = match store_error(&error, timeout) {
                    StoreError::Unavailable(message) => {
                        StoreError::Unavailable(explain(&link.redact(&message), tls))
                    }
                    StoreError::Failed(message) => {
                        StoreError::Failed(explain(&link.redact(&message), tls))
                    }
                    StoreError::Timeout(waited) if tls => StoreError::Unavailable(format!(
                        "no answer within {waited:?}; a plain Redis port never answers a TLS \
                         handshake: if this port is plain Redis, use redis://"
                    )),
                    other => other,
                };
                failures += 1;
                // The first failure and then one in a hundred: an outage must not flood the log.
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!(
                        target: "tollgate::store",
                        "cannot connect to Redis at {} ({error}); retrying, failed {failures} times so far",
                        link.shown()
                    );
                }
                link.status.send_replace(Status::Failed(error));
            }
        }
        drop(link);
        // Jitter, so that many nodes that lost Redis together do not knock together.
        let jittered = delay.mul_f64(0.5 + fastrand::f64() / 2.0);
        tokio::time::sleep(jittered).await;
        delay = (delay * 2).min(MAX_RETRY_DELAY);
    }
}

/// Why a connection attempt failed, said so that an operator knows what to change: the
/// redis and TLS libraries' words, with what they mean for this setting.
fn explain(message: &str, tls: bool) -> String {
    let hint = if message.contains("AuthenticationFailed") || message.contains("WRONGPASS") {
        "Redis refused the user name or password"
    } else if message.contains("NOPERM") || message.contains("no permissions") {
        "the Redis user lacks a permission it needs (see the README's ACL rules)"
    } else if message.contains("invalid peer certificate") {
        "Redis's TLS certificate does not verify: give the CA that signed it (--redis-ca) and \
         connect by a name the certificate holds"
    } else if message.contains("CertificateRequired") {
        "Redis requires a client certificate (--redis-client-cert, --redis-client-key)"
    } else if !tls && message.contains("reset by peer") {
        "Redis closed the connection at once: if this port takes TLS, use rediss://"
    } else {
        return message.to_owned();
    };
    format!("{hint} ({message})")
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.pick_up();
        match &mut self.local {
            Some(Established::Node(connection)) => connection.req_packed_command(cmd),
            Some(Established::Cluster(connection)) => connection.req_packed_command(cmd),
            Some(Established::Sentinel(following)) => following.req_packed_command(cmd),
            None => {
                let error = not_connected(&self.link);
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.pick_up();
        match &mut self.local {
            Some(Established::Node(connection)) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Some(Established::Cluster(connection)) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Some(Established::Sentinel(following)) => {
                following.req_packed_commands(pipeline, offset, count)
            }
            None => {
                let error = not_connected(&self.link);
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self.local.as_ref().or_else(|| self.link.established.get()) {
            Some(Established::Node(connection)) => connection.get_db(),
            Some(Established::Cluster(connection)) => connection.get_db(),
            Some(Established::Sentinel(following)) => following.get_db(),
            None => 0,
        }
    }
}

/// A Redis error as a store error: timeouts, unreachable or failing-over servers, and errors the
/// server or a script reported. URLs in the message have their passwords masked.
pub(crate) fn store_error(error: &redis::RedisError, timeout: std::time::Duration) -> StoreError {
    let message = || crate::redact_credentials(&error.to_string()).into_owned();
    if error.is_timeout() {
        StoreError::Timeout(timeout)
    } else if error.is_connection_refusal()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_cluster_error()
        || error.is_unrecoverable_error()
    {
        StoreError::Unavailable(message())
    } else if error.to_string().contains("can't run this command") {
        // Inside the code Redis says only that; the code puts the command's name first.
        StoreError::Failed(format!(
            "the Redis user lacks a permission the checks need (see the README's ACL rules): {}",
            message()
        ))
    } else {
        StoreError::Failed(message())
    }
}
