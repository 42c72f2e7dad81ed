//! The Redis stores: one exact limit shared by every node.
//!
//! Every algorithm runs inside Redis as Lua (`scripts/*.lua`, the same transitions as the Rust
//! ones, piece for piece), so a check is one atomic script call and all application nodes see
//! one state. Time comes from the Redis server's `TIME`, so nodes with skewed clocks agree.
//! The code is loaded once per node as a Redis Function library and called with `FCALL`
//! (reloaded by itself after a restart or `FUNCTION FLUSH`); where functions are not available
//! it runs as scripts by EVALSHA (see `program`).
//!
//! On a Redis Cluster every key of one identity carries the same hash tag, so a check on one
//! identity lives in one slot and stays atomic. A check spanning several slots (per user and
//! per IP at once) is decided per slot and made all-or-nothing by reserve-then-refund: each slot
//! takes its part; if any slot denies, the parts taken are given back. While a reservation
//! stands, another request may be denied that would have fitted (brief under-admission), but
//! nothing is ever admitted beyond a limit.
//!
//! envoyproxy/ratelimit's plain counters (`Store::counters`) are not scripts: they are sent as
//! upstream sends them, under its keys (see `counters`).

mod batcher;
mod connection;
mod counters;
mod keys;
mod overrides;
mod program;
mod security;
mod sentinel;
mod slot_map;
mod wire;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_routing::Slot;
use redis::{IntoConnectionInfo, ProtocolVersion};
use smallvec::SmallVec;
use tokio::sync::{mpsc, oneshot};

use self::batcher::{Job, PartReply};
use self::connection::{Connection, Status, Target, store_error};
pub use self::keys::MAX_PART_BYTES;
pub use self::program::CHECK_SCRIPT;
use self::program::{Entry, Program};
use self::wire::{Part, PartItem, encode_adjustments};
use tollgate_core::algorithm::Adjustment;
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::Micros;
use tollgate_core::counter::CounterOp;
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;
use tollgate_core::store::{Store, StoreError};

use crate::{RedisConfig, RedisUrl};

/// A check split into parts (each with its cluster slot, `None` on a single Redis) and, per item
/// of the check, its (part, item) position.
type Plan = (Vec<(Option<Slot>, Part)>, SmallVec<[(usize, usize); 4]>);

/// What a Redis store has sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisStats {
    /// Check-script calls made.
    pub calls: u64,
    /// Checks (or slot parts of cross-slot checks) those calls carried.
    pub checks: u64,
    /// Calls carrying several hash slots of one cluster master that Redis refused because a
    /// slot had moved; their checks went again slot by slot.
    pub regrouped: u64,
}

/// A store in a single Redis or a Redis Cluster. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

struct Shared {
    config: RedisConfig,
    counters: Arc<batcher::Counters>,
    connection: Connection,
    queue: mpsc::Sender<Job>,
    program: Arc<Program>,
}

/// A cluster client for `nodes` with the configured timeouts, credentials and certificates,
/// speaking `protocol` (`None`: as the URLs say).
fn cluster_client(
    nodes: &[&str],
    shown: &[RedisUrl],
    config: &RedisConfig,
    protocol: Option<ProtocolVersion>,
) -> Result<ClusterClient, StoreError> {
    let mut builder = ClusterClientBuilder::new(nodes.iter().copied())
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.timeout)
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait(200);
    if let Some(protocol) = protocol {
        builder = builder.use_protocol(protocol);
    }
    if let Some(auth) = &config.auth {
        builder = builder.password(&auth.password);
        if let Some(username) = &auth.username {
            builder = builder.username(username);
        }
    }
    if let Some(certificates) = security::certificates(&config.tls).map_err(invalid_config)? {
        for (node, shown) in nodes.iter().zip(shown) {
            if let Ok(info) = node.into_connection_info() {
                security::require_tls(&info, &shown.to_string()).map_err(invalid_config)?;
            }
        }
        builder = builder.certs(certificates);
    }
    builder.build().map_err(|error| {
        let listed: Vec<String> = shown.iter().map(ToString::to_string).collect();
        let message = shown
            .iter()
            .fold(error.to_string(), |text, url| url.redact(&text));
        invalid_config(format!("redis cluster {}: {message}", listed.join(", ")))
    })
}

/// How a connection to one node (a single Redis, or a Sentinel deployment's master) behaves.
fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

fn invalid_config(message: String) -> StoreError {
    StoreError::Failed(message)
}

/// The runtime a store's background tasks run on.
fn runtime() -> Result<tokio::runtime::Handle, StoreError> {
    tokio::runtime::Handle::try_current()
        .map_err(|_| invalid_config("a Redis store is made inside a Tokio runtime".to_owned()))
}

impl RedisStore {
    /// Connects to a single Redis at `url` (`redis://[user:password@]host:port[/db]`), and
    /// fails if the first attempt does. [`RedisStore::open`] does not wait.
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        Self::open(url, config)?.first_connection().await
    }

    /// A store on a single Redis at `url` that connects in the background, retrying with
    /// backoff until Redis answers: checks fail with [`StoreError::Unavailable`] (saying why)
    /// until then, so the caller's failure policy decides them. Only a configuration error (a
    /// URL that does not parse, a bad prefix) is an error here. Call it inside a Tokio runtime.
    pub fn open(url: &str, config: RedisConfig) -> Result<Self, StoreError> {
        config
            .validate_prefix()
            .map_err(|error| invalid_config(error.to_string()))?;
        let shown = RedisUrl::from(url);
        let unusable = |error: redis::RedisError| {
            invalid_config(format!(
                "redis url {shown} does not parse: {}",
                shown.redact(&error.to_string())
            ))
        };
        let mut info = security::with_auth(
            url.into_connection_info().map_err(unusable)?,
            config.auth.as_ref(),
        );
        // RESP3 unless the URL says otherwise; servers without it get RESP2 (see
        // `connection::connection_manager`).
        if !url.contains("protocol=") {
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            info = info.set_redis_settings(settings);
        }
        let client = match security::certificates(&config.tls).map_err(invalid_config)? {
            Some(certificates) => {
                security::require_tls(&info, &shown.to_string()).map_err(invalid_config)?;
                redis::Client::build_with_tls(info, certificates)
            }
            None => redis::Client::open(info),
        }
        .map_err(unusable)?;
        let connection = Connection::connect(
            Target::Node(client, manager_config(&config)),
            vec![shown],
            config.connect_timeout,
            &runtime()?,
        );
        Ok(Self::with_connection(connection, config))
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port` each), and
    /// fails if the first attempt does. [`RedisStore::open_cluster`] does not wait.
    pub async fn connect_cluster(
        urls: &[impl AsRef<str>],
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        Self::open_cluster(urls, config)?.first_connection().await
    }

    /// A store on a Redis Cluster that connects in the background, as [`RedisStore::open`]
    /// does for a single Redis.
    pub fn open_cluster(urls: &[impl AsRef<str>], config: RedisConfig) -> Result<Self, StoreError> {
        config
            .validate_prefix()
            .map_err(|error| invalid_config(error.to_string()))?;
        let nodes: Vec<&str> = urls.iter().map(AsRef::as_ref).collect();
        let shown: Vec<RedisUrl> = nodes.iter().map(|url| RedisUrl::from(*url)).collect();
        // RESP3 first, unless the URLs say which; RESP2 for a cluster without `HELLO`.
        let explicit = nodes.iter().any(|url| url.contains("protocol="));
        let preferred = (!explicit).then_some(ProtocolVersion::RESP3);
        let client = cluster_client(&nodes, &shown, &config, preferred)?;
        let fallback = cluster_client(&nodes, &shown, &config, None)?;
        let connection = Connection::connect(
            Target::Cluster(client, fallback),
            shown,
            config.connect_timeout,
            &runtime()?,
        );
        Ok(Self::with_connection(connection, config))
    }

    /// Connects to the master that the sentinels at `sentinels` (`redis://[user:password@]
    /// host:port` each, `rediss://` for TLS to the sentinels and the data nodes alike) know as
    /// `master_name`, and fails if the first attempt does. [`RedisStore::open_sentinel`] does
    /// not wait.
    pub async fn connect_sentinel(
        sentinels: &[impl AsRef<str>],
        master_name: &str,
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        Self::open_sentinel(sentinels, master_name, config)?
            .first_connection()
            .await
    }

    /// A store on the master of a Sentinel deployment that connects in the background, as
    /// [`RedisStore::open`] does for a single Redis, and follows failovers: when the master
    /// stops taking writes or cannot be reached, the sentinels are asked again. Credentials in
    /// the sentinels' URLs are the sentinels' own; the data nodes take `config.auth`.
    pub fn open_sentinel(
        sentinels: &[impl AsRef<str>],
        master_name: &str,
        config: RedisConfig,
    ) -> Result<Self, StoreError> {
        config
            .validate_prefix()
            .map_err(|error| invalid_config(error.to_string()))?;
        let shown: Vec<RedisUrl> = sentinels
            .iter()
            .map(|url| RedisUrl::from(url.as_ref()))
            .collect();
        let client =
            sentinel::client(sentinels, &shown, master_name, &config).map_err(invalid_config)?;
        let connection = Connection::connect(
            Target::Sentinel(client, manager_config(&config)),
            shown,
            config.connect_timeout,
            &runtime()?,
        );
        Ok(Self::with_connection(connection, config))
    }

    /// Waits for the first connection attempt: the store if it connected, else its error.
    async fn first_connection(self) -> Result<Self, StoreError> {
        self.shared.connection.first_attempt().await;
        match self.shared.connection.status() {
            Status::Failed(error) => Err(error),
            Status::Connecting | Status::Connected => Ok(self),
        }
    }

    /// Waits until the first connection attempt has finished, whether it connected or not.
    pub async fn first_attempt(&self) {
        self.shared.connection.first_attempt().await;
    }

    /// Whether the store has connected (it reconnects by itself after that).
    pub fn is_connected(&self) -> bool {
        self.shared.connection.status() == Status::Connected
    }

    /// Why the store is not connected yet: the last attempt's error, passwords masked. `None`
    /// once connected, or before the first attempt has finished.
    pub fn connection_error(&self) -> Option<StoreError> {
        match self.shared.connection.status() {
            Status::Failed(error) => Some(error),
            Status::Connecting | Status::Connected => None,
        }
    }

    fn with_connection(connection: Connection, config: RedisConfig) -> Self {
        let program = Arc::new(Program::new());
        let counters = Arc::new(batcher::Counters::default());
        let queue = batcher::spawn(
            connection.clone(),
            Arc::clone(&program),
            config.max_batch,
            config.timeout,
            Arc::clone(&counters),
        );
        Self {
            shared: Arc::new(Shared {
                config,
                counters,
                connection,
                queue,
                program,
            }),
        }
    }

    /// What the store has sent: script calls and the checks (or cluster-slot parts of checks)
    /// they carried. More checks than calls means concurrent checks were coalesced.
    pub fn stats(&self) -> RedisStats {
        RedisStats {
            calls: self.shared.counters.calls.load(Ordering::Relaxed),
            checks: self.shared.counters.checks.load(Ordering::Relaxed),
            regrouped: self.shared.counters.regrouped.load(Ordering::Relaxed),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.shared.config
    }

    /// The Redis key that holds `key`'s state under `limit`.
    pub fn key_of(&self, key: &str, limit: &Limit) -> String {
        keys::state_key(&self.shared.config.prefix, key, limit.state_name())
    }

    /// Splits a check into parts that can each be one atomic call: one part on a single Redis,
    /// one per hash slot on a cluster. A (key, limit) listed twice becomes one item with the
    /// summed cost, as in the memory store. Returns the parts and, per item of the check, its
    /// (part, item) position.
    fn plan(&self, check: &Check<'_>) -> Plan {
        let cluster = self.shared.connection.is_cluster();
        let mut parts: Vec<(Option<Slot>, Part)> = Vec::new();
        let mut positions = SmallVec::new();
        for item in check.items() {
            let name = self.key_of(&item.key, item.limit);
            let slot = cluster.then(|| Slot::for_key(name.as_bytes()));
            let part_index = match parts.iter().position(|(s, _)| *s == slot) {
                Some(index) => index,
                None => {
                    parts.push((
                        slot,
                        Part {
                            keys: Vec::new(),
                            items: Vec::new(),
                        },
                    ));
                    parts.len() - 1
                }
            };
            let part = &mut parts[part_index].1;
            let position = match part.keys.iter().position(|k| *k == name) {
                Some(key_index) => {
                    let item_index = part
                        .items
                        .iter()
                        .position(|i| i.key == key_index)
                        .unwrap_or(0);
                    part.items[item_index].cost =
                        part.items[item_index].cost.saturating_add(item.cost);
                    item_index
                }
                None => {
                    part.keys.push(name);
                    part.items.push(PartItem {
                        key: part.keys.len() - 1,
                        limit: item.limit.clone(),
                        cost: item.cost,
                    });
                    part.items.len() - 1
                }
            };
            positions.push((part_index, position));
        }
        (parts, positions)
    }

    /// Queues one part and waits for its decisions, never longer than the store's timeout: the
    /// batcher answers a part whose deadline passes, in the queue or in its call, with a
    /// timeout, so no check pays for a timer of its own.
    async fn submit(&self, slot: Option<Slot>, part: Part, at: Option<Micros>) -> PartReply {
        #[allow(clippy::disallowed_methods)] // A deadline on tokio's timer, not a decision.
        let deadline = tokio::time::Instant::now() + self.shared.config.timeout;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            part,
            slot,
            at,
            deadline,
            reply,
        };
        self.shared
            .queue
            .try_send(job)
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => {
                    StoreError::Unavailable("the Redis store's queue is full".to_owned())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    StoreError::Failed("the Redis batcher stopped".to_owned())
                }
            })?;
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::Failed("the Redis batcher stopped".to_owned())))
    }

    /// Runs the adjust script for one part.
    async fn adjust_part(
        &self,
        part: &Part,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        let (keys, spec) = encode_adjustments(part, adjustments, at);
        let mut connection = self.shared.connection.clone();
        let timeout = self.shared.config.timeout;
        let call =
            self.shared
                .program
                .call::<i64>(&mut connection, Entry::Adjust, &keys, &[], at, &spec);
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(store_error(&error, timeout)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Sends one pipeline of counter commands; the counts, 0 for a counter that is not there.
    async fn send_counters(&self, ops: &[CounterOp<'_>]) -> Result<Vec<u64>, StoreError> {
        let pipeline = counters::pipeline(ops);
        let mut connection = self.shared.connection.clone();
        let timeout = self.shared.config.timeout;
        let call = pipeline.query_async::<Vec<Option<u64>>>(&mut connection);
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(counts)) => Ok(counts.into_iter().map(Option::unwrap_or_default).collect()),
            Ok(Err(error)) => Err(store_error(&error, timeout)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Gives back the parts a cross-slot check reserved when another part denied or failed, on
    /// the same clock the check used.
    async fn release(
        &self,
        parts: &[(Option<Slot>, Part)],
        replies: &[PartReply],
        at: Option<Micros>,
    ) {
        let releases = parts
            .iter()
            .zip(replies)
            .filter_map(|((_, part), reply)| match reply {
                Ok((now, decisions)) if decisions.iter().all(Decision::allowed) => {
                    let refunds = vec![Adjustment::Refund { charged_at: *now }; part.items.len()];
                    Some(async move { self.adjust_part(part, &refunds, at).await })
                }
                _ => None,
            });
        // A release that fails leaves a reservation standing: fewer admissions, never more.
        join_all(releases).await;
    }
}

impl Store for RedisStore {
    async fn check(&self, check: &Check<'_>, at: Option<Micros>) -> Result<Verdict, StoreError> {
        check.validate()?;
        let (mut parts, positions) = self.plan(check);
        if parts.len() == 1 {
            let (slot, part) = parts.pop().expect("one part");
            let (now, decisions) = self.submit(slot, part, at).await?;
            return Ok(Verdict::from_decisions(
                now,
                positions.iter().map(|&(_, item)| decisions[item]),
            ));
        }
        if parts.is_empty() {
            return Ok(Verdict::from_decisions(at.unwrap_or(0), []));
        }
        // Several slots: every part is taken where it fits, then given back if any denied.
        let calls = parts
            .iter()
            .map(|(slot, part)| self.submit(*slot, part.clone(), at));
        let replies: Vec<PartReply> = join_all(calls).await;
        let all_admitted = replies.iter().all(
            |reply| matches!(reply, Ok((_, decisions)) if decisions.iter().all(Decision::allowed)),
        );
        if !all_admitted {
            self.release(&parts, &replies, at).await;
        }
        let mut answered = Vec::with_capacity(replies.len());
        for reply in replies {
            answered.push(reply?);
        }
        let now = answered.iter().map(|(now, _)| *now).max().unwrap_or(0);
        let decision_of = |&(part, item): &(usize, usize)| {
            let decision = answered[part].1[item];
            let reserved = !all_admitted && answered[part].1.iter().all(Decision::allowed);
            if reserved {
                // Taken and given back: report the room as it is again, as a memory store would.
                let cost = parts[part].1.items[item].cost;
                Decision::new(
                    true,
                    decision.limit(),
                    decision
                        .remaining()
                        .saturating_add(cost)
                        .min(decision.limit()),
                    decision.reset_after_micros(),
                    Some(0),
                    0,
                )
            } else {
                decision
            }
        };
        Ok(
            Verdict::from_decisions(now, positions.iter().map(decision_of))
                .with_item_times(positions.iter().map(|&(part, _)| answered[part].0)),
        )
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        check.validate_adjustments(adjustments)?;
        let (parts, positions) = self.plan(check);
        for (index, (_, part)) in parts.iter().enumerate() {
            let part_adjustments: Vec<Adjustment> = (0..part.items.len())
                .map(|item| Check::gathered_adjustment(&positions, (index, item), adjustments))
                .collect();
            self.adjust_part(part, &part_adjustments, at).await?;
        }
        Ok(())
    }

    async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        check.validate()?;
        let timeout = self.shared.config.timeout;
        // One DEL a key: on a cluster the keys of a check may live in different slots.
        for item in check.items() {
            let key = self.key_of(&item.key, item.limit);
            let mut connection = self.shared.connection.clone();
            let command = redis::cmd("DEL").arg(&key).to_owned();
            match tokio::time::timeout(timeout, command.query_async::<i64>(&mut connection)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(store_error(&error, timeout)),
                Err(_) => return Err(StoreError::Timeout(timeout)),
            }
        }
        Ok(())
    }

    async fn counters(&self, ops: &[CounterOp<'_>]) -> Result<Vec<u64>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        if !self.shared.connection.is_cluster() {
            return self.send_counters(ops).await;
        }
        let per_key = ops
            .iter()
            .map(|op| self.send_counters(std::slice::from_ref(op)));
        let counts = futures_util::future::try_join_all(per_key).await?;
        Ok(counts.into_iter().flatten().collect())
    }

    fn kind(&self) -> &'static str {
        if self.shared.connection.is_cluster() {
            "redis-cluster"
        } else {
            "redis"
        }
    }
}
