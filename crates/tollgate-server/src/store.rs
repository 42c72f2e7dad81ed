//! The store, from flags or the configuration file.

use std::path::Path;

use tollgate::policy::{RedisOptions, StoreConfig};
use tollgate::{AnyStore, Limiter, MemoryStore, RedisConfig, RedisStore};

/// `--log-keys`: how refused keys appear in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogKeys {
    /// As they are.
    Plain,
    /// As a short SHA-256 pseudonym.
    #[default]
    Hashed,
    /// Not at all.
    None,
}

impl From<LogKeys> for tollgate::KeyLogging {
    fn from(keys: LogKeys) -> Self {
        match keys {
            LogKeys::Plain => tollgate::KeyLogging::Plain,
            LogKeys::Hashed => tollgate::KeyLogging::Hashed,
            LogKeys::None => tollgate::KeyLogging::Omitted,
        }
    }
}

/// `--redis` / `--redis-cluster`, which override the configuration's `store`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreFlags {
    /// Use the Redis at this URL (overrides the configuration's `store`).
    #[arg(
        long,
        env = "TOLLGATE_REDIS",
        conflicts_with = "redis_cluster",
        value_name = "URL"
    )]
    pub redis: Option<String>,
    /// Use the Redis Cluster reached through these node URLs, comma-separated.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLUSTER",
        value_delimiter = ',',
        value_name = "URL,..."
    )]
    pub redis_cluster: Vec<String>,
    /// How refused keys appear in the logs.
    #[arg(long, env = "TOLLGATE_LOG_KEYS", value_enum, default_value = "hashed")]
    pub log_keys: LogKeys,
}

impl StoreFlags {
    /// The store the flags ask for, else the configuration's.
    pub fn choose(&self, configured: &StoreConfig) -> StoreConfig {
        match (&self.redis, self.redis_cluster.is_empty()) {
            (Some(url), _) => StoreConfig::Redis(url.clone()),
            (None, false) => StoreConfig::RedisCluster(self.redis_cluster.clone()),
            (None, true) => configured.clone(),
        }
    }
}

/// A short description for the start-up line.
pub fn describe(store: &StoreConfig) -> String {
    match store {
        StoreConfig::Memory => "memory (in process)".to_owned(),
        StoreConfig::Redis(url) => format!("redis at {url}"),
        StoreConfig::RedisCluster(urls) => format!("redis cluster via {}", urls.join(", ")),
    }
}

/// Connects to the store.
pub async fn connect(store: &StoreConfig, options: &RedisOptions) -> Result<AnyStore, String> {
    let config = RedisConfig {
        prefix: options.prefix.clone(),
        timeout: options.timeout,
        connect_timeout: options.connect_timeout,
        max_batch: options.max_batch,
    };
    match store {
        StoreConfig::Memory => Ok(AnyStore::Memory(MemoryStore::new())),
        StoreConfig::Redis(url) => RedisStore::connect(url, config)
            .await
            .map(AnyStore::Redis)
            .map_err(|error| format!("cannot connect to redis at {url}: {error}")),
        StoreConfig::RedisCluster(urls) => RedisStore::connect_cluster(urls, config)
            .await
            .map(AnyStore::Redis)
            .map_err(|error| format!("cannot connect to the redis cluster: {error}")),
    }
}

/// Loads the policies (or the built-in example), connects to the store the flags or the
/// policies name, and returns the limiter with a description of its store.
pub async fn open_limiter(
    config: Option<&Path>,
    flags: &StoreFlags,
) -> Result<(Limiter<AnyStore>, String), String> {
    let policies = crate::policies::load(config)?;
    if let Some(problem) =
        config.and_then(|path| crate::policies::empty_by_omission(path, &policies))
    {
        tracing::warn!("{problem}");
    }
    let chosen = flags.choose(&policies.config().store);
    let store = connect(&chosen, &policies.config().redis).await?;
    let limiter = Limiter::with_policies(store, policies);
    limiter.set_key_logging(flags.log_keys.into());
    Ok((limiter, describe(&chosen)))
}

/// Sweeps expired entries out of a memory store every `every`, so that keys seen once do not
/// sit in the maps until eviction makes room (memory then follows the live keys, not the
/// `max_keys` cap). Other stores expire their own keys.
pub fn sweep_expired(limiter: &Limiter<AnyStore>, every: std::time::Duration) {
    if !matches!(limiter.store(), AnyStore::Memory(_)) {
        return;
    }
    let limiter = limiter.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let AnyStore::Memory(memory) = limiter.store() {
                let swept = memory.purge_expired();
                if swept > 0 {
                    tracing::debug!(swept, "expired entries swept from the memory store");
                }
            }
        }
    });
}
