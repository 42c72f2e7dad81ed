//! The configuration model: everything a policy file can say, as plain values that can also be
//! built in code. [`Config::from_yaml`](crate::Config::from_yaml) reads it from a file;
//! [`Policies::compile`](crate::Policies::compile) checks it as a whole and prepares it.

use std::time::Duration;

use ipnet::IpNet;

use super::client_ip::ForwardedHeader;
pub use crate::headers::HeaderFamily;
use crate::yaml::Origin;
use tollgate_core::spec::LimitSpec;

/// Where state lives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreConfig {
    /// In process (the default).
    #[default]
    Memory,
    /// A single Redis at this URL.
    Redis(crate::RedisUrl),
    /// A Redis Cluster reached through these node URLs.
    RedisCluster(Vec<crate::RedisUrl>),
    /// The master that these sentinels know by `master`, followed across failovers.
    RedisSentinel {
        /// The sentinels' URLs.
        sentinels: Vec<crate::RedisUrl>,
        /// The master's name in the sentinels' configuration.
        master: String,
    },
}

/// The global tier: a store every region shares, for the limits of scope global, and how
/// this node leases from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalConfig {
    /// The global store.
    pub store: StoreConfig,
    /// Its Redis settings (`global_redis`; by default those of the `redis` section).
    pub redis: RedisOptions,
    /// How leases are sized and kept (`store.leases`).
    pub leases: crate::layer::LeaseTuning,
}

/// Options of a Redis store: its settings, and the guards the limiter puts in front of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// Key prefix, timeouts, batching.
    pub config: crate::RedisConfig,
    /// When the circuit breaker rests the store, and for how long.
    pub breaker: crate::BreakerConfig,
    /// Whether denied checks are remembered in process until they could pass. Default true.
    pub deny_cache: bool,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            config: crate::RedisConfig::default(),
            breaker: crate::BreakerConfig::default(),
            deny_cache: true,
        }
    }
}

/// The global store's timeout unless `global_redis.timeout` says otherwise. A global store is
/// far from most regions (40 to 150 ms is common), and leases are fetched ahead, so the regional
/// default of 100 ms would fail every lease of a region farther than that.
pub const GLOBAL_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

impl RedisOptions {
    /// These settings for a global store: the timeout raised to [`GLOBAL_STORE_TIMEOUT`].
    pub fn for_global(mut self) -> Self {
        self.config.timeout = self.config.timeout.max(GLOBAL_STORE_TIMEOUT);
        self
    }
}

/// Request headers a trusted front proxy sets with what the app's auth layer would otherwise
/// put in request extensions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentityHeaders {
    /// Header carrying the user id.
    pub user: Option<String>,
    /// Header carrying the tenant or organisation.
    pub tenant: Option<String>,
    /// Header carrying the plan.
    pub plan: Option<String>,
    /// Header carrying the API key.
    pub api_key: Option<String>,
}

/// An allow- or deny-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListEntry {
    /// Client addresses in a network (a single address is a /32 or /128).
    Network(IpNet),
    /// An exact key part, such as `user:42`, `api_key:abc` or `tenant:acme`.
    Key(String),
}

/// How requests carrying the same idempotency key are charged once: a replay of the same
/// request (method, path, identity and body digest) is not charged again, and is answered
/// with the first request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyConfig {
    /// The request header carrying the key. Default `Idempotency-Key`.
    pub header: String,
    /// How long a key is remembered. Default 10 minutes.
    pub window: Duration,
    /// The most keys one client (one policy key) may have remembered per window; past it a
    /// request with a new key is refused until one ages out. Default 100, at most 10 000.
    pub max_keys: u64,
    /// The largest request body digested to tell replays apart, and the largest answer kept
    /// to replay, in bytes. Default 1 MiB.
    pub max_body: u64,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            header: "Idempotency-Key".to_owned(),
            window: Duration::from_secs(600),
            max_keys: 100,
            max_body: 1 << 20,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where state lives.
    pub store: StoreConfig,
    /// Options of a Redis store.
    pub redis: RedisOptions,
    /// The global store, when limits of scope global count across regions.
    pub global: Option<GlobalConfig>,
    /// Proxies whose forwarding header is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The forwarding header the trusted proxies write; the other is never read. Default
    /// `X-Forwarded-For`.
    pub forwarded_header: ForwardedHeader,
    /// IPv4 clients are grouped by this prefix length. Default 32 (each address alone).
    pub ipv4_prefix: u8,
    /// IPv6 clients are grouped by this prefix length. Default 64.
    pub ipv6_prefix: u8,
    /// Identity headers set by a trusted front proxy.
    pub identity_headers: IdentityHeaders,
    /// Which rate-limit header fields responses carry. Default: the IETF fields.
    pub headers: Vec<HeaderFamily>,
    /// Status of a deny-listed request: 403 or 429. Default 403.
    pub deny_status: u16,
    /// Requests that are never limited.
    pub allow: Vec<ListEntry>,
    /// Requests that are always refused.
    pub deny: Vec<ListEntry>,
    /// The most requests waiting out a delay at once; past it, they are refused. Default 1024.
    pub max_delayed: usize,
    /// Idempotent retries, for policies that do not turn them off.
    pub idempotency: Option<IdempotencyConfig>,
    /// The most (key, limit) states the in-process store holds (`memory.max_keys`); past it,
    /// the least recently used go. Default 1 000 000.
    pub memory_max_keys: usize,
    /// The policies, in order.
    pub policies: Vec<PolicyConfig>,
    /// Whether the file says `policies:` at all, an empty list included. A file that holds no
    /// policy without saying so (empty, or cut short) is taken for a mistake where it would
    /// switch every limit off.
    pub policies_listed: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            store: StoreConfig::Memory,
            redis: RedisOptions::default(),
            global: None,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::default(),
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            identity_headers: IdentityHeaders::default(),
            headers: vec![HeaderFamily::Ietf],
            deny_status: 403,
            allow: Vec::new(),
            deny: Vec::new(),
            max_delayed: 1024,
            idempotency: None,
            memory_max_keys: tollgate_core::store::memory::DEFAULT_MAX_KEYS,
            policies: Vec::new(),
            policies_listed: false,
        }
    }
}

/// Which requests a policy applies to. Every field given must match; an empty match applies
/// to every request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MatchConfig {
    /// Methods (any of them), upper case.
    pub methods: Vec<String>,
    /// Hosts (any of them): exact, or `*.example.com` for any subdomain.
    pub hosts: Vec<String>,
    /// An exact path (`/login`) or a template (`/users/{id}`, one segment per `{name}`).
    pub path: Option<String>,
    /// A path prefix (`/api/`).
    pub path_prefix: Option<String>,
}

/// One part of the key a policy counts by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// The client address (trusted-proxy aware, grouped by prefix).
    Ip,
    /// The user id.
    User,
    /// The API key.
    ApiKey,
    /// The tenant or organisation.
    Tenant,
    /// The route: the app's matched route, else the policy's path pattern, else the path.
    Route,
    /// The method.
    Method,
    /// The host.
    Host,
    /// The value of a request header.
    Header(String),
    /// A value from the path template (`/users/{id}` gives `param:id`).
    Param(String),
    /// A constant: one limit for every request the policy matches (`global` is `const:global`).
    Const(String),
    /// A value the application works out for each request ([`Request::custom_key`], such as
    /// the tower layer's key function gives); a request without one counts by its client
    /// address, as a missing identity does.
    ///
    /// [`Request::custom_key`]: crate::policy::Request::custom_key
    Custom,
}

/// Where a policy's tier comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierSource {
    /// The plan of the request's identity (an extension, or the identity plan header).
    Plan,
    /// A request header.
    Header(String),
}

/// What one request costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostConfig {
    /// The same for every request.
    Fixed(u64),
    /// A number in a request header, `default` when absent or unreadable, at most `max`.
    Header {
        /// The header.
        name: String,
        /// The cost when the header is absent or not a number.
        default: u64,
        /// The largest cost a header may claim.
        max: u64,
    },
    /// The request body size in bytes (`content-bytes`).
    Body,
}

/// Where a response reports what its request really cost (tokens generated, rows scanned):
/// the policy's cost is then an estimate charged up front, and the difference is settled when
/// the response ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageConfig {
    /// Where the number is.
    pub source: UsageSource,
    /// The most a response may report; larger reports count as this.
    pub max: u64,
}

/// Where a response carries its usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageSource {
    /// A response header field (lower case).
    Header(String),
    /// A trailer field (lower case).
    Trailer(String),
    /// A number in the JSON body, or in the last server-sent event whose JSON holds it, by a
    /// path of member names (`usage.completion_tokens`).
    Body(Vec<String>),
}

/// Marks (and optionally slows) requests above a fraction of a quota.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftLimit {
    /// The fraction of the quota used above which a request is near the limit (0 to 1).
    pub at: f64,
    /// If set, near-limit requests are held this long before they proceed.
    pub tarpit: Option<Duration>,
}

/// Repeated violations put a key in a penalty box for growing durations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PenaltyConfig {
    /// Denials within `within` that earn a block.
    pub after: u64,
    /// Block durations, one per successive block; the last repeats.
    pub block: Vec<Duration>,
    /// The span in which `after` denials count. Default: the policy's longest period.
    pub within: Option<Duration>,
    /// After this long without a block, the next block starts again from the first duration.
    /// Default: the longest block.
    pub decay: Option<Duration>,
}

/// At most `max` requests in flight per key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyConfig {
    /// Requests in flight at once.
    pub max: u64,
    /// A slot not released within this long (a crashed node) frees itself. Default 60 s.
    pub lease: Duration,
}

/// What a policy does when the store fails (carried out by the limiter's failure handling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Let requests through.
    Allow,
    /// Refuse requests with 503.
    #[default]
    Deny,
    /// Decide with an in-process limiter using the same limits.
    Local,
}

impl FailureMode {
    /// The word that names it in a policy file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Allow => "allow",
            FailureMode::Deny => "deny",
            FailureMode::Local => "local",
        }
    }
}

impl std::str::FromStr for FailureMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        [FailureMode::Allow, FailureMode::Deny, FailureMode::Local]
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| format!("unknown mode {text:?} (expected one of: allow, deny, local)"))
    }
}

/// A limit as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    /// The name shown in headers and logs; unique within its policy.
    pub name: String,
    /// Algorithm, quota, burst, mode and lease.
    pub spec: LimitSpec,
    /// Where it was written.
    pub origin: Origin,
}

/// A range of response statuses.
pub type StatusRange = (u16, u16);

/// One policy.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Unique name.
    pub name: String,
    /// Which requests it applies to.
    pub matcher: MatchConfig,
    /// What it counts by; several parts make a composite key.
    pub key: Vec<KeyPart>,
    /// Limits that always apply.
    pub limits: Vec<LimitConfig>,
    /// Limits by tier, in order.
    pub tiers: Vec<(String, Vec<LimitConfig>)>,
    /// Where the tier comes from. Default: the identity's plan.
    pub tier_from: TierSource,
    /// The tier for unknown plans (and missing ones, unless an `anonymous` tier exists).
    /// Default: the first tier.
    pub default_tier: Option<String>,
    /// What a request costs; with `usage`, what it is estimated to cost until its response says.
    pub cost: CostConfig,
    /// Where the response reports the real cost, settled when it ends.
    pub usage: Option<UsageConfig>,
    /// Report the partition key (`pk`, a digest of the key) in the IETF fields.
    pub partition_key: bool,
    /// Decide and report, never block.
    pub shadow: bool,
    /// Near-limit marking and tarpit.
    pub soft_limit: Option<SoftLimit>,
    /// Escalating penalties.
    pub penalty: Option<PenaltyConfig>,
    /// Requests in flight per key.
    pub concurrency: Option<ConcurrencyConfig>,
    /// Whether idempotent retries are charged once (with the global idempotency settings).
    pub idempotency: bool,
    /// Responses with these statuses give the request's cost back.
    pub refund_on: Vec<StatusRange>,
    /// What to do when the store fails.
    pub on_store_error: FailureMode,
    /// With `local`, each node enforces the limits divided by this (the expected node count).
    pub local_nodes: u64,
    /// Allow list of this policy only.
    pub allow: Vec<ListEntry>,
    /// Deny list of this policy only.
    pub deny: Vec<ListEntry>,
    /// Where it was written.
    pub origin: Origin,
}

impl PolicyConfig {
    /// A policy with the defaults: every request, keyed by client address, no limits yet.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            matcher: MatchConfig::default(),
            key: vec![KeyPart::Ip],
            limits: Vec::new(),
            tiers: Vec::new(),
            tier_from: TierSource::Plan,
            default_tier: None,
            cost: CostConfig::Fixed(1),
            usage: None,
            partition_key: false,
            shadow: false,
            soft_limit: None,
            penalty: None,
            concurrency: None,
            idempotency: true,
            refund_on: Vec::new(),
            on_store_error: FailureMode::default(),
            local_nodes: 1,
            allow: Vec::new(),
            deny: Vec::new(),
            origin: Origin::default(),
        }
    }
}
