//! envoyproxy/ratelimit's own Redis keys for classic fixed windows, so that its pods and
//! Tollgate's, side by side on one Redis while one replaces the other, count every hit in one
//! counter: `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS`,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, `LOCAL_CACHE_SIZE_IN_BYTES` and the per-second
//! store (`REDIS_PERSECOND*`) as flags. The counting itself is the limiter's
//! ([`tollgate::Limiter::count`]); this module names the counters and the stores.

use std::path::PathBuf;
use std::time::Duration;

use tollgate::policy::StoreConfig;
use tollgate::{RedisAuth, RedisUrl};

use super::proto::common::rate_limit_descriptor::Entry;

/// `--rls-upstream-keys` and what goes with it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpstreamKeys {
    /// Keep the rate limit service's classic fixed windows as envoyproxy/ratelimit keeps them
    /// in Redis (its keys, INCRBY and EXPIRE, the window from this node's clock), so that its
    /// pods and these, on one Redis, share one limit; `algorithm:` rules keep Tollgate's keys.
    #[arg(long = "rls-upstream-keys", env = "TOLLGATE_RLS_UPSTREAM_KEYS")]
    pub enabled: bool,
    /// Put this before every such key, as envoyproxy/ratelimit's CACHE_KEY_PREFIX does.
    #[arg(
        long = "rls-key-prefix",
        env = "TOLLGATE_RLS_KEY_PREFIX",
        default_value = "",
        value_name = "STR"
    )]
    pub prefix: String,
    /// Keep each such key its window and a random extra below this (whole seconds), as
    /// envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS does; 0 for none.
    #[arg(
        long = "rls-expiration-jitter",
        env = "TOLLGATE_RLS_EXPIRATION_JITTER",
        default_value = "300s",
        value_parser = tollgate::parse_duration,
        value_name = "DURATION"
    )]
    pub expiration_jitter: Duration,
    /// Read a request's counters first and, when some would pass their limit, raise only
    /// those, as envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT does.
    #[arg(
        long = "rls-stop-increment-over-limit",
        env = "TOLLGATE_RLS_STOP_INCREMENT_OVER_LIMIT"
    )]
    pub stop_increment_over_limit: bool,
    /// Above 0, answer a counter found over its limit in process until its window ends,
    /// without raising it, as envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES does (the
    /// over-limit cache keeps a hash per key, at most 65 536 keys, whatever the size).
    #[arg(
        long = "rls-local-cache-bytes",
        env = "TOLLGATE_RLS_LOCAL_CACHE_BYTES",
        default_value_t = 0,
        value_name = "N"
    )]
    pub local_cache_bytes: u64,
    /// Keep the counters of one-second limits in the Redis at this URL, as
    /// envoyproxy/ratelimit's REDIS_PERSECOND does (TLS as for `--redis`).
    #[arg(
        long = "rls-per-second-redis",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS",
        value_name = "URL",
        hide_env_values = true,
        conflicts_with_all = ["per_second_redis_cluster", "per_second_redis_sentinel"]
    )]
    pub per_second_redis: Option<RedisUrl>,
    /// As `--rls-per-second-redis`, in the Redis Cluster reached through these node URLs.
    #[arg(
        long = "rls-per-second-redis-cluster",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS_CLUSTER",
        value_delimiter = ',',
        value_name = "URL,...",
        hide_env_values = true,
        conflicts_with = "per_second_redis_sentinel"
    )]
    pub per_second_redis_cluster: Vec<RedisUrl>,
    /// As `--rls-per-second-redis`, in the master these sentinels know by
    /// `--rls-per-second-redis-sentinel-master`.
    #[arg(
        long = "rls-per-second-redis-sentinel",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS_SENTINEL",
        value_delimiter = ',',
        value_name = "URL,...",
        hide_env_values = true,
        requires = "per_second_redis_sentinel_master"
    )]
    pub per_second_redis_sentinel: Vec<RedisUrl>,
    /// The per-second master's name in the sentinels' configuration.
    #[arg(
        long = "rls-per-second-redis-sentinel-master",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS_SENTINEL_MASTER",
        value_name = "NAME",
        requires = "per_second_redis_sentinel"
    )]
    pub per_second_redis_sentinel_master: Option<String>,
    /// The per-second Redis's ACL user, with the password of
    /// `--rls-per-second-redis-password-file` or `TOLLGATE_RLS_PER_SECOND_REDIS_PASSWORD`.
    #[arg(
        long = "rls-per-second-redis-username",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS_USERNAME",
        value_name = "USER"
    )]
    pub per_second_redis_username: Option<String>,
    /// A file holding the per-second Redis's password.
    #[arg(
        long = "rls-per-second-redis-password-file",
        env = "TOLLGATE_RLS_PER_SECOND_REDIS_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub per_second_redis_password_file: Option<PathBuf>,
    /// The per-second Redis's password given by a deployment's environment
    /// (envoyproxy/ratelimit's REDIS_PERSECOND_AUTH), not a flag.
    #[arg(skip)]
    pub per_second_redis_password: Option<String>,
}

/// How the rate limit service counts classic fixed windows in envoyproxy/ratelimit's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamCounting {
    /// Before every key (CACHE_KEY_PREFIX).
    pub prefix: String,
    /// The bound of the random extra life of a key (EXPIRATION_JITTER_MAX_SECONDS).
    pub expiration_jitter: Duration,
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
    pub stop_increment_over_limit: bool,
    /// Counters found over their limit are answered in process until their window ends.
    pub local_cache: bool,
}

impl Default for UpstreamCounting {
    /// envoyproxy/ratelimit's defaults: no prefix, up to 300 s of jitter, every hit counted,
    /// no local cache.
    fn default() -> Self {
        Self {
            prefix: String::new(),
            expiration_jitter: Duration::from_secs(300),
            stop_increment_over_limit: false,
            local_cache: false,
        }
    }
}

impl UpstreamKeys {
    /// The counting the flags ask for, if any.
    pub fn counting(&self) -> Option<UpstreamCounting> {
        self.enabled.then(|| UpstreamCounting {
            prefix: self.prefix.clone(),
            expiration_jitter: self.expiration_jitter,
            stop_increment_over_limit: self.stop_increment_over_limit,
            local_cache: self.local_cache_bytes > 0,
        })
    }

    /// The per-second store the flags name, if any.
    fn per_second_store(&self) -> Option<StoreConfig> {
        if let Some(master) = &self.per_second_redis_sentinel_master {
            return Some(StoreConfig::RedisSentinel {
                sentinels: self.per_second_redis_sentinel.clone(),
                master: master.clone(),
            });
        }
        match (
            &self.per_second_redis,
            self.per_second_redis_cluster.is_empty(),
        ) {
            (Some(url), _) => Some(StoreConfig::Redis(url.clone())),
            (None, false) => Some(StoreConfig::RedisCluster(
                self.per_second_redis_cluster.clone(),
            )),
            (None, true) => None,
        }
    }

    /// The per-second Redis's credentials, from the flags, a file or the environment.
    fn per_second_auth(&self) -> Result<Option<RedisAuth>, String> {
        const ENV: &str = "TOLLGATE_RLS_PER_SECOND_REDIS_PASSWORD";
        let password = match (&self.per_second_redis_password_file, std::env::var(ENV)) {
            (Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .map_err(|error| {
                        format!(
                            "--rls-per-second-redis-password-file {}: {error}",
                            path.display()
                        )
                    })?
                    .trim_end_matches(['\r', '\n'])
                    .to_owned(),
            ),
            (None, Ok(password)) => Some(password),
            (None, Err(_)) => self.per_second_redis_password.clone(),
        };
        match (password, &self.per_second_redis_username) {
            (Some(password), username) => Ok(Some(RedisAuth {
                username: username.clone(),
                password,
            })),
            (None, Some(_)) => Err(format!(
                "--rls-per-second-redis-username needs a password: \
                 --rls-per-second-redis-password-file or {ENV}"
            )),
            (None, None) => Ok(None),
        }
    }

    /// The per-second store the flags name, if any, with its credentials. The binary
    /// connects it, as it connects every store: its timeouts and TLS are the main store's
    /// (upstream shares REDIS_TLS_* too), which only the binary's flags know.
    pub fn per_second(&self) -> Result<Option<PerSecondStore>, String> {
        let Some(store) = self.per_second_store() else {
            return Ok(None);
        };
        if !self.enabled {
            return Err(
                "--rls-per-second-redis* needs --rls-upstream-keys: only envoyproxy/ratelimit's \
                 counters are kept apart by their unit"
                    .to_owned(),
            );
        }
        let auth = self.per_second_auth()?;
        Ok(Some(PerSecondStore { store, auth }))
    }
}

/// Where the counters of one-second limits go (envoyproxy/ratelimit's REDIS_PERSECOND).
#[derive(Debug, Clone)]
pub struct PerSecondStore {
    /// The store.
    pub store: StoreConfig,
    /// Its own credentials, if any.
    pub auth: Option<RedisAuth>,
}

/// A descriptor's counter key before its window's start, as envoyproxy/ratelimit writes it:
/// the prefix, the domain and `_`, then `key_value_` for every entry of the request, the
/// `share_threshold` pattern standing for the value where one matched.
pub(crate) fn counter_key(
    prefix: &str,
    domain: &str,
    entries: &[Entry],
    shared: &[Option<String>],
) -> String {
    let length = entries
        .iter()
        .map(|entry| entry.key.len() + entry.value.len() + 2)
        .sum::<usize>();
    let mut key = String::with_capacity(prefix.len() + domain.len() + 1 + length);
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (index, entry) in entries.iter().enumerate() {
        key.push_str(&entry.key);
        key.push('_');
        let value = shared
            .get(index)
            .and_then(Option::as_deref)
            .unwrap_or(&entry.value);
        key.push_str(value);
        key.push('_');
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
        pairs
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect()
    }

    #[test]
    fn counter_keys_are_upstreams() {
        let request = entries(&[("generic_key", "api"), ("remote_address", "10.1.2.3")]);
        assert_eq!(
            counter_key("", "rl", &request, &[None, None]),
            "rl_generic_key_api_remote_address_10.1.2.3_"
        );
        assert_eq!(
            counter_key("ratelimit:", "rl", &request, &[None, None]),
            "ratelimit:rl_generic_key_api_remote_address_10.1.2.3_"
        );
        let shared = [Some("files*".to_owned())];
        assert_eq!(
            counter_key("", "rl", &entries(&[("path", "files/a")]), &shared),
            "rl_path_files*_"
        );
        assert_eq!(
            counter_key("", "d", &entries(&[("key", "")]), &[None]),
            "d_key__",
            "an empty value still takes its place"
        );
    }
}
