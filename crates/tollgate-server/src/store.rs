//! The store, from flags or the configuration file.

use std::path::Path;

use tollgate::policy::{GlobalConfig, RedisOptions, StoreConfig};
use tollgate::{AnyStore, Limiter, MemoryStore, RedisStore, RedisUrl, Store, StoreError};

/// `--redis` / `--redis-cluster`, which override the configuration's `store`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreFlags {
    /// The most (key, limit) states the in-process store holds (overrides the configuration's
    /// `memory.max_keys`; default 1 000 000); past it the least recently used are evicted.
    #[arg(long, env = "TOLLGATE_MEMORY_MAX_KEYS", value_name = "N", value_parser = clap::value_parser!(u64).range(1_000..=1_000_000_000))]
    pub memory_max_keys: Option<u64>,
    /// Use the Redis at this URL (overrides the configuration's `store`).
    #[arg(
        long,
        env = "TOLLGATE_REDIS",
        conflicts_with = "redis_cluster",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis: Option<RedisUrl>,
    /// Use the Redis Cluster reached through these node URLs, comma-separated.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLUSTER",
        value_delimiter = ',',
        value_name = "URL,...",
        hide_env_values = true
    )]
    pub redis_cluster: Vec<RedisUrl>,
    /// Use the Redis master these sentinels know by `--redis-sentinel-master`, comma-separated
    /// (`rediss://` for TLS to sentinels and data nodes alike); failovers are followed.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_SENTINEL",
        value_delimiter = ',',
        value_name = "URL,...",
        hide_env_values = true,
        conflicts_with_all = ["redis", "redis_cluster"],
        requires = "redis_sentinel_master"
    )]
    pub redis_sentinel: Vec<RedisUrl>,
    /// The master's name in the sentinels' configuration.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_SENTINEL_MASTER",
        value_name = "NAME",
        requires = "redis_sentinel"
    )]
    pub redis_sentinel_master: Option<String>,
    /// For rediss:// URLs: the CA certificates (PEM) to verify Redis with, instead of the
    /// system's.
    #[arg(long, env = "TOLLGATE_REDIS_CA", value_name = "FILE")]
    pub redis_ca: Option<std::path::PathBuf>,
    /// For rediss:// URLs: a client certificate (PEM) for Redis servers that require mutual TLS.
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLIENT_CERT",
        value_name = "FILE",
        requires = "redis_client_key"
    )]
    pub redis_client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "TOLLGATE_REDIS_CLIENT_KEY",
        value_name = "FILE",
        requires = "redis_client_cert"
    )]
    pub redis_client_key: Option<std::path::PathBuf>,
    /// The Redis ACL user, with the password of `--redis-password-file` or
    /// `TOLLGATE_REDIS_PASSWORD` (kept out of the URL, and so out of process listings).
    #[arg(long, env = "TOLLGATE_REDIS_USERNAME", value_name = "USER")]
    pub redis_username: Option<String>,
    /// A file holding the Redis password; `TOLLGATE_REDIS_PASSWORD` gives it directly. It
    /// takes the place of a password in the URL.
    #[arg(long, env = "TOLLGATE_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub redis_password_file: Option<std::path::PathBuf>,
    /// Lease the limits of scope global from the Redis at this URL, shared by every region
    /// (overrides the configuration's `store.global`).
    #[arg(
        long,
        env = "TOLLGATE_GLOBAL_REDIS",
        conflicts_with = "global_redis_cluster",
        value_name = "URL",
        hide_env_values = true
    )]
    pub global_redis: Option<RedisUrl>,
    /// Lease the limits of scope global from the Redis Cluster reached through these node
    /// URLs, comma-separated.
    #[arg(
        long,
        env = "TOLLGATE_GLOBAL_REDIS_CLUSTER",
        value_delimiter = ',',
        value_name = "URL,...",
        hide_env_values = true
    )]
    pub global_redis_cluster: Vec<RedisUrl>,
    /// As `--redis-ca`, for the global store.
    #[arg(long, env = "TOLLGATE_GLOBAL_REDIS_CA", value_name = "FILE")]
    pub global_redis_ca: Option<std::path::PathBuf>,
    /// As `--redis-client-cert`, for the global store.
    #[arg(
        long,
        env = "TOLLGATE_GLOBAL_REDIS_CLIENT_CERT",
        value_name = "FILE",
        requires = "global_redis_client_key"
    )]
    pub global_redis_client_cert: Option<std::path::PathBuf>,
    /// As `--redis-client-key`, for the global store.
    #[arg(
        long,
        env = "TOLLGATE_GLOBAL_REDIS_CLIENT_KEY",
        value_name = "FILE",
        requires = "global_redis_client_cert"
    )]
    pub global_redis_client_key: Option<std::path::PathBuf>,
    /// As `--redis-username`, for the global store (its password from
    /// `--global-redis-password-file` or `TOLLGATE_GLOBAL_REDIS_PASSWORD`).
    #[arg(long, env = "TOLLGATE_GLOBAL_REDIS_USERNAME", value_name = "USER")]
    pub global_redis_username: Option<String>,
    /// As `--redis-password-file`, for the global store.
    #[arg(long, env = "TOLLGATE_GLOBAL_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub global_redis_password_file: Option<std::path::PathBuf>,
    /// How long connecting to a Redis node may take (overrides the configuration's
    /// `redis.connect_timeout`).
    #[arg(long, env = "TOLLGATE_REDIS_CONNECT_TIMEOUT", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub redis_connect_timeout: Option<std::time::Duration>,
    /// Exit with an error if the store has not answered this long after start-up, as
    /// envoyproxy/ratelimit's REDIS_STARTUP_MAX_ELAPSED_TIME (by default the server keeps
    /// trying, answering by the failure modes meanwhile).
    #[arg(long, env = "TOLLGATE_REDIS_STARTUP_TIMEOUT", value_parser = tollgate::parse_duration, value_name = "DURATION")]
    pub redis_startup_timeout: Option<std::time::Duration>,
    /// The Redis password given by a deployment's environment (envoyproxy/ratelimit's
    /// REDIS_AUTH), not a flag: passwords stay out of process listings.
    #[arg(skip)]
    pub redis_password: Option<String>,
    /// How refused keys appear in the logs: plain, hashed (a keyed pseudonym) or none.
    #[arg(
        long,
        env = "TOLLGATE_LOG_KEYS",
        default_value = "hashed",
        value_name = "plain|hashed|none"
    )]
    pub log_keys: tollgate::KeyLogging,
    /// A file holding the secret hashed keys are keyed with (at least 16 bytes), so that
    /// several nodes show a key under the same pseudonym; `TOLLGATE_LOG_KEYS_SECRET` gives it
    /// directly. Without either, each process keys with a random secret of its own.
    #[arg(long, env = "TOLLGATE_LOG_KEYS_SECRET_FILE", value_name = "FILE")]
    pub log_keys_secret_file: Option<std::path::PathBuf>,
    /// Where the overrides live and how often they are read again.
    #[command(flatten)]
    pub overrides: crate::overrides::OverrideFlags,
}

impl StoreFlags {
    /// The secret hashed keys are keyed with, when one is configured.
    fn log_keys_secret(&self) -> Result<Option<tollgate::secret::Secret>, String> {
        let bytes = match (
            &self.log_keys_secret_file,
            std::env::var_os("TOLLGATE_LOG_KEYS_SECRET"),
        ) {
            (Some(path), _) => std::fs::read(path)
                .map_err(|error| format!("--log-keys-secret-file {}: {error}", path.display()))?,
            (None, Some(value)) => value.into_encoded_bytes(),
            (None, None) => return Ok(None),
        };
        tollgate::secret::Secret::from_bytes(bytes.trim_ascii())
            .map(Some)
            .map_err(|error| format!("the log keys secret: {error}"))
    }

    /// The Redis settings of `options` with the flags' certificates and credentials.
    pub fn redis_options(&self, options: &RedisOptions) -> Result<RedisOptions, String> {
        let mut options = Access {
            flag: "--redis",
            env: "TOLLGATE_REDIS_PASSWORD",
            ca: &self.redis_ca,
            client_cert: &self.redis_client_cert,
            client_key: &self.redis_client_key,
            username: &self.redis_username,
            password_file: &self.redis_password_file,
            password: self.redis_password.as_deref(),
        }
        .apply(options)?;
        if let Some(timeout) = self.redis_connect_timeout {
            options.config.connect_timeout = timeout;
        }
        Ok(options)
    }

    /// The global store's Redis settings of `options` with the flags' certificates and
    /// credentials.
    pub fn global_redis_options(&self, options: &RedisOptions) -> Result<RedisOptions, String> {
        Access {
            flag: "--global-redis",
            env: "TOLLGATE_GLOBAL_REDIS_PASSWORD",
            ca: &self.global_redis_ca,
            client_cert: &self.global_redis_client_cert,
            client_key: &self.global_redis_client_key,
            username: &self.global_redis_username,
            password_file: &self.global_redis_password_file,
            password: None,
        }
        .apply(options)
    }

    /// The global store the flags ask for, else the configuration's (with its settings and
    /// lease tuning); `None` for none.
    pub fn choose_global(&self, configured: Option<&GlobalConfig>) -> Option<GlobalConfig> {
        let chosen = match (&self.global_redis, self.global_redis_cluster.is_empty()) {
            (Some(url), _) => Some(StoreConfig::Redis(url.clone())),
            (None, false) => Some(StoreConfig::RedisCluster(self.global_redis_cluster.clone())),
            (None, true) => None,
        };
        match (chosen, configured) {
            (Some(store), Some(configured)) => Some(GlobalConfig {
                store,
                ..configured.clone()
            }),
            (Some(store), None) => Some(GlobalConfig {
                store,
                redis: RedisOptions::default().for_global(),
                leases: tollgate::LeaseTuning::default(),
            }),
            (None, configured) => configured.cloned(),
        }
    }

    /// The store the flags ask for, else the configuration's.
    pub fn choose(&self, configured: &StoreConfig) -> StoreConfig {
        if let Some(master) = &self.redis_sentinel_master {
            return StoreConfig::RedisSentinel {
                sentinels: self.redis_sentinel.clone(),
                master: master.clone(),
            };
        }
        match (&self.redis, self.redis_cluster.is_empty()) {
            (Some(url), _) => StoreConfig::Redis(url.clone()),
            (None, false) => StoreConfig::RedisCluster(self.redis_cluster.clone()),
            (None, true) => configured.clone(),
        }
    }
}

/// Certificates and credentials for one Redis store, from flags, files or the environment.
struct Access<'a> {
    /// The flags' common prefix, for messages.
    flag: &'a str,
    /// The variable that may hold the password.
    env: &'a str,
    ca: &'a Option<std::path::PathBuf>,
    client_cert: &'a Option<std::path::PathBuf>,
    client_key: &'a Option<std::path::PathBuf>,
    username: &'a Option<String>,
    password_file: &'a Option<std::path::PathBuf>,
    /// A password given directly, used when neither the file nor the variable gives one.
    password: Option<&'a str>,
}

impl Access<'_> {
    /// `options` with these certificates and credentials where given.
    fn apply(&self, options: &RedisOptions) -> Result<RedisOptions, String> {
        let mut options = options.clone();
        let tls = &mut options.config.tls;
        if self.ca.is_some() {
            tls.ca_file.clone_from(self.ca);
        }
        if self.client_cert.is_some() {
            tls.client_cert.clone_from(self.client_cert);
            tls.client_key.clone_from(self.client_key);
        }
        let flag = self.flag;
        let password = match (self.password_file, std::env::var_os(self.env)) {
            (Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .map_err(|error| format!("{flag}-password-file {}: {error}", path.display()))?
                    .trim_end_matches(['\r', '\n'])
                    .to_owned(),
            ),
            (None, Some(value)) => Some(
                value
                    .into_string()
                    .map_err(|_| format!("{} is not valid UTF-8", self.env))?,
            ),
            (None, None) => self.password.map(str::to_owned),
        };
        match (password, self.username) {
            (Some(password), username) => {
                options.config.auth = Some(tollgate::RedisAuth {
                    username: username.clone(),
                    password,
                });
            }
            (None, Some(_)) => {
                return Err(format!(
                    "{flag}-username needs a password: {flag}-password-file or {}",
                    self.env
                ));
            }
            (None, None) => {}
        }
        Ok(options)
    }
}

/// A short description for the start-up line; passwords in URLs are masked.
pub fn describe(store: &StoreConfig) -> String {
    match store {
        StoreConfig::Memory => "memory (in process)".to_owned(),
        StoreConfig::Redis(url) => format!("redis at {url}"),
        StoreConfig::RedisCluster(urls) => {
            let urls: Vec<String> = urls.iter().map(ToString::to_string).collect();
            format!("redis cluster via {}", urls.join(", "))
        }
        StoreConfig::RedisSentinel { sentinels, master } => {
            let urls: Vec<String> = sentinels.iter().map(ToString::to_string).collect();
            format!("redis master {master:?} via sentinels {}", urls.join(", "))
        }
    }
}

/// Builds the store. A Redis store connects in the background and keeps trying while Redis is
/// unreachable, so the server starts and answers by the policies' failure modes meanwhile;
/// this waits for the first attempt only, to say how it went. A URL that does not parse is an
/// error.
pub async fn connect(
    store: &StoreConfig,
    options: &RedisOptions,
    memory_max_keys: usize,
) -> Result<AnyStore, String> {
    let config = options.config.clone();
    // Only configuration is wrong here (the URL, the prefix): say what, not "the store failed".
    let refused = |error: StoreError| match error {
        StoreError::Failed(message) => format!("bad redis store: {message}"),
        other => format!("bad redis store: {other}"),
    };
    let redis = match store {
        StoreConfig::Memory => {
            let memory = MemoryStore::builder().max_keys(memory_max_keys).build();
            return Ok(AnyStore::Memory(memory));
        }
        StoreConfig::Redis(url) => RedisStore::open(url.expose(), config).map_err(refused)?,
        StoreConfig::RedisCluster(urls) => {
            let exposed: Vec<&str> = urls.iter().map(RedisUrl::expose).collect();
            RedisStore::open_cluster(&exposed, config).map_err(refused)?
        }
        StoreConfig::RedisSentinel { sentinels, master } => {
            let exposed: Vec<&str> = sentinels.iter().map(RedisUrl::expose).collect();
            RedisStore::open_sentinel(&exposed, master, config).map_err(refused)?
        }
    };
    // A server that does not answer at all (not even a refusal) takes the connect timeout, and
    // the client retries a few times within an attempt: give it that, not more.
    let patience = options.config.connect_timeout.saturating_mul(4);
    let _ = tokio::time::timeout(patience, redis.first_attempt()).await;
    if !redis.is_connected() {
        tracing::warn!(
            "{}: not connected yet; serving by each policy's on_store_error meanwhile and \
             retrying in the background (with --readiness store, /readyz answers 503 until \
             connected)",
            describe(store)
        );
    } else if let Err(error) = tollgate_http::store_health::probe(&redis).await {
        // Connected, yet a check fails: a Redis user without a command the checks need, say.
        tracing::error!(
            "{}: connected, but a check fails: {error}; tollgate_store_up is 0 while it does",
            describe(store)
        );
    }
    Ok(AnyStore::Redis(redis))
}

/// Connects the per-second store the rate limit service's flags name, if any, and gives
/// `limiter` it for the counters of one-second windows; says which, for the start-up log. Its
/// timeouts and TLS are the main store's (upstream shares REDIS_TLS_* too), its credentials
/// its own.
pub async fn connect_per_second(
    limiter: &Limiter<AnyStore>,
    flags: &StoreFlags,
    keys: &tollgate_envoy::rls::UpstreamKeys,
) -> Result<(), String> {
    let Some(per_second) = keys.per_second()? else {
        return Ok(());
    };
    let configured = limiter
        .policies()
        .map(|policies| policies.config().redis.clone())
        .unwrap_or_default();
    let mut options = flags.redis_options(&configured)?;
    options.config.auth = per_second.auth;
    let connected = connect(&per_second.store, &options, 1_000).await?;
    tracing::info!(
        "the counters of one-second limits go to {}",
        describe(&per_second.store)
    );
    limiter.settings().set_per_second_store(Some(connected));
    Ok(())
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
    let max_keys = flags
        .memory_max_keys
        .map_or(policies.config().memory_max_keys, |n| n as usize);
    let redis_options = flags.redis_options(&policies.config().redis)?;
    let store = connect(&chosen, &redis_options, max_keys).await?;
    let mut description = describe(&chosen);
    if let AnyStore::Redis(redis) = &store
        && !redis.is_connected()
    {
        description.push_str(" (not connected yet; retrying)");
    }
    let global = flags.choose_global(policies.config().global.as_ref());
    if global.is_none()
        && let Some((policy, limit)) = policies
            .limits()
            .find(|(_, limit)| limit.limit.scope() == tollgate::Scope::Global)
    {
        return Err(format!(
            "policy {policy:?}, limit {:?}: scope global needs a global store (store.global in \
             the configuration, or --global-redis / --global-redis-cluster)",
            &*limit.label
        ));
    }
    let mut builder = Limiter::builder(store);
    if let Some(global) = global {
        let options = flags.global_redis_options(&global.redis)?;
        let store = connect(&global.store, &options, max_keys).await?;
        description.push_str(&format!(
            "; global limits leased from {}",
            describe(&global.store)
        ));
        builder = builder.global(store, global.leases);
    }
    #[cfg(feature = "otel")]
    if tollgate_http::otel::enabled() {
        builder = builder.observer(std::sync::Arc::new(crate::otel::SpanObserver));
    }
    let limiter = builder.build();
    limiter.settings().set_policies(policies);
    limiter.telemetry().set_key_logging(flags.log_keys);
    if let Some(secret) = flags.log_keys_secret()? {
        limiter.telemetry().set_key_log_secret(secret);
    }
    crate::overrides::attach(&limiter, &flags.overrides).await?;
    Ok((limiter, description))
}

/// Sweeps expired entries out of a memory store every `every`, so that keys seen once do not
/// sit in the maps until eviction makes room (memory then follows the live keys, not the
/// `max_keys` cap). Other stores expire their own keys.
pub fn sweep_expired(limiter: &Limiter<AnyStore>, every: std::time::Duration) {
    if !matches!(limiter.store(), AnyStore::Memory(_)) {
        return;
    }
    let limiter = limiter.clone();
    let mut bound = BoundWarning::default();
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
                bound.note(memory.held_keys());
            }
        }
    });
}

/// Says when the in-process store reaches its key bound: at once, then at most every ten
/// minutes while it keeps evicting, since each eviction forgets a (least recently used) state.
#[derive(Debug, Default)]
struct BoundWarning {
    evictions: u64,
    warned: Option<std::time::Instant>,
}

impl BoundWarning {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(600);

    fn note(&mut self, held: Option<tollgate::store::HeldKeys>) {
        let Some(held) = held else { return };
        if held.evictions <= self.evictions {
            return;
        }
        #[allow(clippy::disallowed_methods)] // When to log again, not a decision.
        let now = std::time::Instant::now();
        if self
            .warned
            .is_some_and(|at| now.duration_since(at) < Self::EVERY)
        {
            return;
        }
        tracing::warn!(
            max_keys = held.max,
            evicted = held.evictions - self.evictions,
            "the in-process store is at its bound of {} keys and evicts the least recently used \
             to make room; raise memory.max_keys (or --memory-max-keys) if clients in use lose \
             their state",
            held.max
        );
        self.evictions = held.evictions;
        self.warned = Some(now);
    }
}
