//! A master found through Redis Sentinel, followed across failovers.
//!
//! The sentinels are asked for the master (and the master asked for its `ROLE`) when the
//! store connects, and again whenever a command fails in a way a failover explains: the
//! master refuses writes (`READONLY`: it was demoted), or cannot be reached, or does not answer
//! in time. One lookup runs at a time; while the sentinels still name the old master (the
//! failover is under way) and commands keep failing, it asks again every [`LOOKUP_PAUSE`], so
//! the new master is found within about that of its promotion. Commands that fail meanwhile
//! fail within the store's timeout, and each policy's failure mode answers them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisError,
    RedisFuture, RedisResult, ServerErrorKind, TlsMode, Value,
};

use super::security;
use crate::{RedisConfig, RedisUrl};

/// The least time between two lookups.
const LOOKUP_PAUSE: Duration = Duration::from_millis(100);

/// The most lookups one failure starts (a minute's worth), lest sentinels that keep naming an
/// unreachable master be asked forever; the next failing command starts another round.
const MAX_LOOKUPS: usize = 600;

/// The sentinels, shared by the connection attempts and the lookups.
pub(crate) type Sentinels = Arc<tokio::sync::Mutex<SentinelClient>>;

/// The sentinels, and the connection to the master they named last.
pub(crate) struct Following {
    sentinels: Sentinels,
    config: ConnectionManagerConfig,
    master: RwLock<Master>,
    looking_up: AtomicBool,
    /// Whether the last command failed in a way a failover explains.
    failing: AtomicBool,
}

struct Master {
    address: String,
    connection: ConnectionManager,
}

impl Following {
    /// Asks the sentinels for the master and connects to it.
    pub(crate) async fn connect(
        sentinels: Sentinels,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Arc<Self>> {
        let master = find_master(&mut *sentinels.lock().await, &config).await?;
        Ok(Arc::new(Self {
            sentinels,
            config,
            master: RwLock::new(master),
            looking_up: AtomicBool::new(false),
            failing: AtomicBool::new(false),
        }))
    }

    /// The master's connection (a cheap clone of a shared one).
    fn connection(&self) -> ConnectionManager {
        self.master
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .connection
            .clone()
    }

    /// Looks the master up again in the background, unless a lookup is under way.
    fn look_up(self: &Arc<Self>) {
        if self.looking_up.swap(true, Ordering::AcqRel) {
            return;
        }
        let following = Arc::clone(self);
        tokio::spawn(async move {
            for _ in 0..MAX_LOOKUPS {
                let found = {
                    let mut sentinels = following.sentinels.lock().await;
                    find_master(&mut sentinels, &following.config).await
                };
                match found {
                    Ok(master) => {
                        if following.replace(master) {
                            break;
                        }
                    }
                    Err(error) => tracing::debug!(
                        target: "tollgate::store",
                        "the sentinels name no reachable master yet: {}",
                        crate::redact_credentials(&error.to_string())
                    ),
                }
                tokio::time::sleep(LOOKUP_PAUSE).await;
                if !following.failing.load(Ordering::Acquire) {
                    break;
                }
            }
            following.looking_up.store(false, Ordering::Release);
        });
    }

    /// Takes `master` if it is another than the current one; whether it was.
    fn replace(&self, master: Master) -> bool {
        let mut current = self
            .master
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.address == master.address {
            return false;
        }
        tracing::warn!(
            target: "tollgate::store",
            "Redis master moved from {} to {} (Sentinel)",
            current.address,
            master.address
        );
        *current = master;
        true
    }

    pub(crate) fn req_packed_command<'a>(self: &Arc<Self>, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut connection = self.connection();
        let following = Arc::clone(self);
        Box::pin(async move {
            let outcome = connection.req_packed_command(cmd).await;
            following.after(&outcome);
            outcome
        })
    }

    pub(crate) fn req_packed_commands<'a>(
        self: &Arc<Self>,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut connection = self.connection();
        let following = Arc::clone(self);
        Box::pin(async move {
            let outcome = connection
                .req_packed_commands(pipeline, offset, count)
                .await;
            following.after(&outcome);
            outcome
        })
    }

    pub(crate) fn get_db(&self) -> i64 {
        self.connection().get_db()
    }

    fn after<T>(self: &Arc<Self>, outcome: &RedisResult<T>) {
        let failing = outcome.as_ref().is_err_and(failover_explains);
        self.failing.store(failing, Ordering::Release);
        if failing {
            self.look_up();
        }
    }
}

/// The client that asks the sentinels at `urls` for `master_name`: TLS to sentinels and data
/// nodes when the URLs are `rediss://`, with the configured certificates; the URLs'
/// credentials for the sentinels, `config.auth` for the data nodes.
pub(crate) fn client(
    urls: &[impl AsRef<str>],
    shown: &[RedisUrl],
    master_name: &str,
    config: &RedisConfig,
) -> Result<Sentinels, String> {
    if urls.is_empty() {
        return Err("Sentinel needs at least one sentinel URL".to_owned());
    }
    if master_name.is_empty() {
        return Err("Sentinel needs the master's name".to_owned());
    }
    let mut addresses = Vec::new();
    let mut sentinel_auth = None;
    for (url, shown) in urls.iter().zip(shown) {
        let info = url.as_ref().into_connection_info().map_err(|error| {
            format!(
                "sentinel url {shown} does not parse: {}",
                shown.redact(&error.to_string())
            )
        })?;
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            sentinel_auth = Some((settings.username().map(str::to_owned), password.to_owned()));
        }
        addresses.push(info.addr().clone());
    }
    let tls = addresses
        .iter()
        .all(|address| matches!(address, ConnectionAddr::TcpTls { .. }));
    if addresses
        .iter()
        .any(|address| matches!(address, ConnectionAddr::TcpTls { .. }) != tls)
    {
        return Err("sentinel URLs mix redis:// and rediss://: use one for all".to_owned());
    }
    let certificates = security::certificates(&config.tls)?;
    if certificates.is_some() && !tls {
        return Err(
            "TLS certificates are configured for Redis, but the sentinel URLs are not rediss://"
                .to_owned(),
        );
    }
    let refused = |error: RedisError| format!("sentinel: {error}");
    let mut builder =
        SentinelClientBuilder::new(addresses, master_name, SentinelServerType::Master)
            .map_err(refused)?;
    // RESP3 to the master where it speaks it (see `connection_manager`).
    builder = builder.set_client_to_redis_protocol(ProtocolVersion::RESP3);
    if tls {
        builder = builder
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    if let Some(certificates) = certificates {
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    if let Some((username, password)) = sentinel_auth {
        builder = builder.set_client_to_sentinel_password(password);
        if let Some(username) = username {
            builder = builder.set_client_to_sentinel_username(username);
        }
    }
    if let Some(auth) = &config.auth {
        builder = builder.set_client_to_redis_password(&auth.password);
        if let Some(username) = &auth.username {
            builder = builder.set_client_to_redis_username(username);
        }
    }
    let client = builder.build().map_err(refused)?;
    Ok(Arc::new(tokio::sync::Mutex::new(client)))
}

/// The master the sentinels name, connected.
async fn find_master(
    sentinels: &mut SentinelClient,
    config: &ConnectionManagerConfig,
) -> RedisResult<Master> {
    let client = sentinels.async_get_client().await?;
    let address = client.get_connection_info().addr().to_string();
    let connection = super::connection::connection_manager(&client, config).await?;
    Ok(Master {
        address,
        connection,
    })
}

/// An error a failover explains: a demoted master, or one that is gone.
fn failover_explains(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    ) || error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
}
