//! Reading envoyproxy/ratelimit's variables: each with upstream's default when unset, parsed as
//! upstream parses it, every problem collected so that one start-up lists them all.

use std::collections::BTreeSet;
use std::time::Duration;

use super::values;

/// Every variable envoyproxy/ratelimit reads (its `src/settings/settings.go`); a deployment
/// written for it sets some of these and nothing else.
pub(crate) const KNOWN: &[&str] = &[
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_UDS",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "USE_STATSD",
    "STATSD_HOST",
    "STATSD_PORT",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "EXTRA_TAGS",
    "STATS_FLUSH_INTERVAL",
    "DISABLE_STATS",
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "MERGE_DOMAIN_CONFIG",
    "BACKEND_TYPE",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "NEAR_LIMIT_RATIO",
    "CACHE_KEY_PREFIX",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_POOL_SIZE",
    "REDIS_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_SENTINEL_AUTH",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
];

/// Variables so particular to envoyproxy/ratelimit that one of them set means the process was
/// started as it would be (`HOST`, `PORT`, `LOG_LEVEL` and the like are too common to tell).
pub(crate) fn telling(name: &str) -> bool {
    KNOWN.contains(&name)
        && !matches!(
            name,
            "HOST" | "PORT" | "DEBUG_HOST" | "DEBUG_PORT" | "LOG_LEVEL" | "LOG_FORMAT"
        )
}

/// The environment as upstream reads it.
pub(crate) struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    /// Problems, each naming its variable.
    pub(crate) errors: Vec<String>,
    /// The variables read, so that a test can tell every known one is.
    pub(crate) read: BTreeSet<&'static str>,
}

impl<'a> Env<'a> {
    /// The environment `lookup` gives.
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            lookup,
            errors: Vec::new(),
            read: BTreeSet::new(),
        }
    }

    /// The variable's value, set (empty included, as upstream has it) or not.
    pub(crate) fn raw(&mut self, name: &'static str) -> Option<String> {
        self.read.insert(name);
        (self.lookup)(name)
    }

    /// Whether the variable is set at all.
    pub(crate) fn is_set(&mut self, name: &'static str) -> bool {
        self.raw(name).is_some()
    }

    /// A text setting, `default` when unset.
    pub(crate) fn text(&mut self, name: &'static str, default: &str) -> String {
        self.raw(name).unwrap_or_else(|| default.to_owned())
    }

    fn parsed<T>(
        &mut self,
        name: &'static str,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> T {
        match self.raw(name) {
            None => default,
            Some(text) => match parse(&text) {
                Ok(value) => value,
                Err(problem) => {
                    self.errors.push(format!("{name}: {problem}"));
                    default
                }
            },
        }
    }

    /// A boolean setting.
    pub(crate) fn boolean(&mut self, name: &'static str, default: bool) -> bool {
        self.parsed(name, default, values::boolean)
    }

    /// A whole-number setting.
    pub(crate) fn integer(&mut self, name: &'static str, default: i64) -> i64 {
        self.parsed(name, default, values::integer)
    }

    /// A number setting.
    pub(crate) fn float(&mut self, name: &'static str, default: f64) -> f64 {
        self.parsed(name, default, values::float)
    }

    /// A duration setting.
    pub(crate) fn duration(&mut self, name: &'static str, default: Duration) -> Duration {
        self.parsed(name, default, values::duration)
    }

    /// A `k:v,k:v` setting.
    pub(crate) fn map(&mut self, name: &'static str) -> Vec<(String, String)> {
        self.parsed(name, Vec::new(), values::map)
    }

    /// A port setting: a whole number from 0 to 65 535.
    pub(crate) fn port(&mut self, name: &'static str, default: u16) -> u16 {
        let value = self.integer(name, i64::from(default));
        u16::try_from(value).unwrap_or_else(|_| {
            self.errors
                .push(format!("{name}: {value} is not a port (0 to 65535)"));
            default
        })
    }

    /// Records that `name` asks for what Tollgate does not do, and what to do instead.
    pub(crate) fn refuse(&mut self, name: &str, instead: &str) {
        self.errors
            .push(format!("{name}: not supported by Tollgate; {instead}"));
    }
}
