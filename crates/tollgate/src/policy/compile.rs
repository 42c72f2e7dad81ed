//! Checking a [`Config`] as a whole and preparing it for evaluation.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::client_ip::TrustedProxies;
use super::lists::AccessList;
use super::matcher::Matcher;
use super::model::{
    ConcurrencyConfig, Config, CostConfig, FailureMode, HeaderFamily, IdentityHeaders, KeyPart,
    LimitConfig, PenaltyConfig, PolicyConfig, SoftLimit, StatusRange, TierSource, UsageConfig,
};
use crate::algorithm::Algorithm;
use crate::headers::QuotaUnit;
use crate::yaml::{ConfigErrors, Origin, Reader};
use tollgate_core::clock::duration_to_micros;
use tollgate_core::limit::Limit;
use tollgate_core::quota::Quota;
use tollgate_core::spec::LimitSpec;

/// A limit as a policy applies it.
#[derive(Debug, Clone)]
pub struct PolicyLimit {
    /// The limit; its name (`policy/limit`) identifies its state.
    pub limit: Limit,
    /// The name as configured, shown in headers.
    pub label: Arc<str>,
    /// What its quota counts.
    pub unit: QuotaUnit,
}

/// The state limits behind a policy's escalating penalties.
#[derive(Debug, Clone)]
pub(crate) struct Penalty {
    /// Blocked while in debt: GCRA at one per millisecond with a burst of the longest block.
    pub(crate) block_box: Limit,
    /// Denials within the window; reaching the count earns a block.
    pub(crate) violations: Limit,
    /// Blocks within the decay period, which pick the next block's length.
    pub(crate) strikes: Limit,
    pub(crate) blocks: Vec<Duration>,
}

/// A compiled policy.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) name: Arc<str>,
    pub(crate) matcher: Matcher,
    pub(crate) key: Vec<KeyPart>,
    pub(crate) limits: Vec<PolicyLimit>,
    pub(crate) tiers: Vec<(String, Vec<PolicyLimit>)>,
    pub(crate) tier_from: TierSource,
    pub(crate) default_tier: usize,
    pub(crate) anonymous_tier: Option<usize>,
    pub(crate) cost: CostConfig,
    pub(crate) shadow: bool,
    pub(crate) partition_key: bool,
    pub(crate) soft_limit: Option<SoftLimit>,
    pub(crate) penalty: Option<Penalty>,
    pub(crate) concurrency: Option<PolicyLimit>,
    pub(crate) idempotency: Option<Idempotency>,
    pub(crate) refund_on: Arc<[StatusRange]>,
    pub(crate) usage: Option<Arc<UsageConfig>>,
    pub(crate) on_store_error: FailureMode,
    pub(crate) local_nodes: u64,
    pub(crate) allow: AccessList,
    pub(crate) deny: AccessList,
}

/// The two limits a policy's idempotent retries are kept in: one record per request (key and
/// fingerprint), and the count of records per client, so that one client cannot fill the
/// store with keys.
#[derive(Debug, Clone)]
pub(crate) struct Idempotency {
    pub(crate) record: Limit,
    pub(crate) keys: Limit,
}

/// A checked, prepared set of policies, ready to turn requests into checks.
#[derive(Debug, Clone)]
pub struct Policies {
    pub(crate) config: Arc<Config>,
    pub(crate) trusted: TrustedProxies,
    pub(crate) identity_headers: IdentityHeaders,
    pub(crate) allow: AccessList,
    pub(crate) deny: AccessList,
    pub(crate) idempotency_header: Option<String>,
    pub(crate) policies: Vec<Policy>,
    version: u64,
}

impl Policies {
    /// Checks a configuration as a whole (names unique, limits valid, tiers and template
    /// parameters consistent) and prepares it. `source` names the file in error messages.
    pub fn compile(config: Config, source: &str) -> Result<Policies, ConfigErrors> {
        let reader = Reader::detached(source);
        let mut names = HashSet::new();
        let mut policies = Vec::new();
        for policy in &config.policies {
            if !names.insert(policy.name.as_str()) {
                reader.error(
                    policy.origin,
                    format!("policy {:?}: another policy has the same name", policy.name),
                );
            }
            if let Some(compiled) = compile_policy(policy, &config, &reader) {
                policies.push(compiled);
            }
        }
        reader.finish()?;
        let version = fingerprint(&config);
        Ok(Policies {
            trusted: TrustedProxies::new(config.trusted_proxies.clone()),
            identity_headers: config.identity_headers.clone(),
            allow: AccessList::new(&config.allow),
            deny: AccessList::new(&config.deny),
            idempotency_header: config
                .idempotency
                .as_ref()
                .map(|i| i.header.to_ascii_lowercase()),
            policies,
            version,
            config: Arc::new(config),
        })
    }

    /// Reads and compiles a YAML configuration; `source` names the file in error messages.
    #[cfg(feature = "yaml")]
    pub fn from_yaml(source: &str, text: &str) -> Result<Policies, ConfigErrors> {
        Self::compile(Config::from_yaml(source, text)?, source)
    }

    /// The configuration these were compiled from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A fingerprint of the configuration: equal configurations have equal versions.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Which header families responses carry.
    pub fn header_families(&self) -> &[HeaderFamily] {
        &self.config.headers
    }

    /// The names of the policies, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.policies.iter().map(|policy| &*policy.name)
    }

    /// Whether there is no policy and the file does not say so (`policies: []`): an empty or
    /// truncated file, which would switch every limit off.
    pub fn empty_by_omission(&self) -> bool {
        self.policies.is_empty() && !self.config.policies_listed
    }

    /// Each policy's name and what it does while the store cannot decide.
    pub fn failure_modes(&self) -> impl Iterator<Item = (&str, FailureMode)> {
        self.policies
            .iter()
            .map(|policy| (&*policy.name, policy.on_store_error))
    }

    /// The names of the policies that charge by usage.
    pub fn usage_policies(&self) -> impl Iterator<Item = &str> {
        self.policies
            .iter()
            .filter(|policy| policy.usage.is_some())
            .map(|policy| &*policy.name)
    }

    /// Every limit of every policy (all tiers), for inspection.
    pub fn limits(&self) -> impl Iterator<Item = (&str, &PolicyLimit)> {
        self.policies.iter().flat_map(|policy| {
            policy
                .limits
                .iter()
                .chain(policy.tiers.iter().flat_map(|(_, limits)| limits))
                .map(move |limit| (&*policy.name, limit))
        })
    }
}

fn fingerprint(config: &Config) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    format!("{config:?}").hash(&mut hasher);
    hasher.finish()
}

fn build_limit(
    config: &LimitConfig,
    state_name: String,
    reader: &Reader,
    what: &str,
) -> Option<Limit> {
    match config.spec.build(state_name) {
        Ok(limit) => Some(limit),
        Err(error) => {
            reader.error(
                config.origin,
                format!("{what}, limit {:?}: {}", config.name, error.detail()),
            );
            None
        }
    }
}

fn compile_limits(
    policy: &PolicyConfig,
    limits: &[LimitConfig],
    tier: Option<&str>,
    reader: &Reader,
    what: &str,
) -> Vec<PolicyLimit> {
    let unit = match policy.cost {
        CostConfig::Body => QuotaUnit::ContentBytes,
        _ => QuotaUnit::Requests,
    };
    let mut seen = HashSet::new();
    let mut compiled = Vec::new();
    for limit in limits {
        if !seen.insert(limit.name.as_str()) {
            reader.error(
                limit.origin,
                format!(
                    "{what}, limit {:?}: another limit has the same name",
                    limit.name
                ),
            );
        }
        let state_name = match tier {
            Some(tier) => format!("{}/{tier}/{}", policy.name, limit.name),
            None => format!("{}/{}", policy.name, limit.name),
        };
        if let Some(built) = build_limit(limit, state_name, reader, what) {
            compiled.push(PolicyLimit {
                limit: built,
                label: limit.name.as_str().into(),
                unit,
            });
        }
    }
    compiled
}

fn internal_limit(
    name: String,
    algorithm: Algorithm,
    count: u64,
    period: Duration,
    burst: Option<u64>,
) -> Option<Limit> {
    let quota = Quota::from_micros(count, duration_to_micros(period)).ok()?;
    // A block charges the box its burst and the block's length at once: what reaches past the
    // burst is the block, and one block never adds to another's.
    let spec = LimitSpec {
        burst,
        max_debt: burst,
        ..LimitSpec::new(algorithm, quota)
    };
    spec.build(name).ok()
}

/// Reports a problem of one policy, at a place in the file.
type Report<'a> = dyn Fn(Origin, String) + 'a;

fn compile_policy(policy: &PolicyConfig, config: &Config, reader: &Reader) -> Option<Policy> {
    let what = format!("policy {:?}", policy.name);
    let at = |origin: Origin, message: String| reader.error(origin, format!("{what}: {message}"));
    let matcher = Matcher::new(&policy.matcher);
    check_outline(policy, &matcher, &at);
    let limits = compile_limits(policy, &policy.limits, None, reader, &what);
    let tiers: Vec<(String, Vec<PolicyLimit>)> = policy
        .tiers
        .iter()
        .map(|(tier, limits)| {
            let tier_what = format!("{what}, tier {tier:?}");
            (
                tier.clone(),
                compile_limits(policy, limits, Some(tier), reader, &tier_what),
            )
        })
        .collect();
    let default_tier = default_tier(policy, &tiers, &at);
    if policy.limits.is_empty() && policy.tiers.is_empty() && policy.concurrency.is_none() {
        at(
            policy.origin,
            "no limits: give it limits, tiers or a concurrency limit".to_owned(),
        );
    }
    let longest_period = limits
        .iter()
        .chain(tiers.iter().flat_map(|(_, limits)| limits))
        .map(|l| l.limit.quota().period())
        .max()
        .unwrap_or(Duration::from_secs(60));
    let penalty = policy
        .penalty
        .as_ref()
        .and_then(|penalty| compile_penalty(policy, penalty, longest_period, &at));
    let concurrency = policy
        .concurrency
        .as_ref()
        .and_then(|concurrency| compile_concurrency(policy, concurrency, &at));
    let idempotency = match (&config.idempotency, policy.idempotency) {
        (Some(settings), true) => {
            let limit = |name: &str, count: u64| {
                internal_limit(
                    format!("{}/~{name}", policy.name),
                    Algorithm::SlidingLog,
                    count,
                    settings.window,
                    None,
                )
            };
            match (
                limit("idempotency", 1),
                limit("idempotency-keys", settings.max_keys),
            ) {
                (Some(record), Some(keys)) => Some(Idempotency { record, keys }),
                _ => {
                    at(
                        policy.origin,
                        "idempotency: window or max_keys out of range".to_owned(),
                    );
                    None
                }
            }
        }
        _ => None,
    };
    Some(Policy {
        name: policy.name.as_str().into(),
        anonymous_tier: tiers.iter().position(|(tier, _)| tier == "anonymous"),
        matcher,
        key: policy.key.clone(),
        limits,
        tiers,
        tier_from: policy.tier_from.clone(),
        default_tier,
        cost: policy.cost.clone(),
        shadow: policy.shadow,
        partition_key: policy.partition_key,
        soft_limit: policy.soft_limit.clone(),
        penalty,
        concurrency,
        idempotency,
        refund_on: policy.refund_on.as_slice().into(),
        usage: policy.usage.clone().map(Arc::new),
        on_store_error: policy.on_store_error,
        local_nodes: policy.local_nodes,
        allow: AccessList::new(&policy.allow),
        deny: AccessList::new(&policy.deny),
    })
}

/// The policy's name and its key's path parameters.
fn check_outline(policy: &PolicyConfig, matcher: &Matcher, at: &Report<'_>) {
    if policy.name.is_empty() || policy.name.contains('/') {
        at(
            policy.origin,
            "a policy name must be non-empty and may not contain '/'".to_owned(),
        );
    }
    for part in &policy.key {
        if let KeyPart::Param(name) = part
            && !matcher.params().contains(&name.as_str())
        {
            at(
                policy.origin,
                format!(
                    "key part param:{name} needs a path template with {{{name}}} in match.path"
                ),
            );
        }
    }
}

/// The position of the default tier among `tiers` (the first when none is named).
fn default_tier(
    policy: &PolicyConfig,
    tiers: &[(String, Vec<PolicyLimit>)],
    at: &Report<'_>,
) -> usize {
    let Some(name) = &policy.default_tier else {
        return 0;
    };
    let position = tiers.iter().position(|(tier, _)| tier == name);
    if position.is_none() {
        at(
            policy.origin,
            format!("default_tier {name:?} is not one of its tiers"),
        );
    }
    if tiers.is_empty() {
        at(
            policy.origin,
            "default_tier is set but the policy has no tiers".to_owned(),
        );
    }
    position.unwrap_or(0)
}

/// The three limits a penalty keeps its state in: the box, the violations and the strikes.
fn compile_penalty(
    policy: &PolicyConfig,
    penalty: &PenaltyConfig,
    longest_period: Duration,
    at: &Report<'_>,
) -> Option<Penalty> {
    let longest = penalty
        .block
        .iter()
        .max()
        .copied()
        .unwrap_or(Duration::from_secs(60));
    let longest_ms = u64::try_from(longest.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let within = penalty.within.unwrap_or(longest_period);
    let decay = penalty.decay.unwrap_or(longest);
    let built = (
        internal_limit(
            format!("{}/~penalty-box", policy.name),
            Algorithm::Gcra,
            1,
            Duration::from_millis(1),
            Some(longest_ms),
        ),
        internal_limit(
            format!("{}/~penalty-violations", policy.name),
            Algorithm::SlidingLog,
            penalty.after,
            within,
            None,
        ),
        internal_limit(
            format!("{}/~penalty-strikes", policy.name),
            Algorithm::SlidingLog,
            penalty.block.len() as u64,
            decay,
            None,
        ),
    );
    match built {
        (Some(block_box), Some(violations), Some(strikes)) => Some(Penalty {
            block_box,
            violations,
            strikes,
            blocks: penalty.block.clone(),
        }),
        _ => {
            at(
                policy.origin,
                "penalty: the block durations, after, within or decay are out of range".to_owned(),
            );
            None
        }
    }
}

/// The limit a policy's concurrency slots are counted in.
fn compile_concurrency(
    policy: &PolicyConfig,
    concurrency: &ConcurrencyConfig,
    at: &Report<'_>,
) -> Option<PolicyLimit> {
    let limit = internal_limit(
        format!("{}/~concurrency", policy.name),
        Algorithm::SlidingLog,
        concurrency.max,
        concurrency.lease,
        None,
    );
    if limit.is_none() {
        at(
            policy.origin,
            "concurrency: max or lease out of range (max at most 10000)".to_owned(),
        );
    }
    limit.map(|limit| PolicyLimit {
        limit,
        label: "concurrency".into(),
        unit: QuotaUnit::ConcurrentRequests,
    })
}
