//! From a request to the items of its check: which policies match, which key each counts by,
//! which tier's limits apply, what the request costs. Pure: no store, no clock.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use super::client_ip::{client_ip, group_key};
use super::compile::{Policies, Policy, PolicyLimit};
use super::key;
use super::matcher::Params;
use super::model::{CostConfig, KeyPart, TierSource};
use super::request::Request;
use crate::headers::QuotaUnit;
use tollgate_core::check::MAX_COST;
use tollgate_core::limit::Limit;

/// What an item of a planned check is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A configured limit.
    Limit,
    /// The penalty box, looked at without counting.
    PenaltyBox,
    /// The record of an idempotency key.
    Idempotency,
    /// The count of a client's remembered idempotency keys.
    IdempotencyKeys,
    /// A slot of a concurrency limit.
    Concurrency,
}

/// One item of a planned check.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The key.
    pub key: String,
    /// The limit.
    pub limit: Limit,
    /// The cost.
    pub cost: u64,
    /// What it is for.
    pub role: Role,
    /// Index of its policy.
    pub policy: usize,
    /// The name shown in headers.
    pub label: Arc<str>,
    /// What its quota counts.
    pub unit: QuotaUnit,
}

/// Which policies a request is decided by (a limit's [`Scope`](crate::Scope) says where its
/// count lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection<'n> {
    /// Every policy whose match fits the request.
    Matching,
    /// Only the named policy, whatever its match says.
    Policy(&'n str),
}

/// What happens before any limit is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Decide by the limits.
    Proceed,
    /// On the allow list: never limited.
    Bypass,
    /// On the deny list: refused with this status.
    Refuse(u16),
    /// A policy counts body bytes and the body's length is unknown: refused as length required.
    LengthRequired,
    /// The path holds what servers read in different ways (an encoded `/`, a `\`, an
    /// encoded NUL): refused rather than matched one way and routed another.
    AmbiguousPath(super::path::AmbiguousPath),
    /// The policy at this index counts by the client's address (or falls back to it for a
    /// missing identity) and the request carries none: an error, never a key shared by every
    /// client.
    NoClientAddress(usize),
}

/// A request turned into checks.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Allow or deny list outcome.
    pub gate: Gate,
    /// The client address used for keys.
    pub client: Option<IpAddr>,
    /// Items of enforced policies, decided together, all-or-nothing.
    pub enforced: Vec<Planned>,
    /// Items of shadow policies, decided together, never blocking.
    pub shadow: Vec<Planned>,
    /// Names of the policies that matched.
    pub matched: Vec<Arc<str>>,
}

impl Plan {
    /// Replaces the cost of every configured limit's item (not the guards'). A cost of 0 is
    /// a look: it takes nothing at all, no concurrency slot and no idempotency record either.
    pub fn override_cost(&mut self, cost: u64) {
        for item in self.enforced.iter_mut().chain(self.shadow.iter_mut()) {
            match item.role {
                Role::Limit => item.cost = cost,
                Role::Concurrency if cost == 0 => item.cost = 0,
                _ => {}
            }
        }
        if cost == 0 {
            self.enforced
                .retain(|item| !matches!(item.role, Role::Idempotency | Role::IdempotencyKeys));
        }
    }
}

/// The identity of a request, from the request itself or the trusted identity headers.
struct Who<'r> {
    user: Option<Cow<'r, str>>,
    tenant: Option<Cow<'r, str>>,
    plan: Option<Cow<'r, str>>,
    api_key: Option<Cow<'r, str>>,
    /// Whether the request came straight from a trusted proxy, whose headers naming an
    /// identity or a tier are believed.
    from_trusted_proxy: bool,
}

impl Policies {
    /// Whether the request's nearest hop is a trusted proxy: only then are headers that name
    /// an identity or a tier read, so that a client cannot pick its own bucket, spend another
    /// user's quota or choose its plan by sending them.
    fn comes_through_trusted_proxy(&self, request: &Request<'_>) -> bool {
        request.peer.is_some_and(|peer| self.trusted.contains(peer))
    }

    fn who<'r>(&self, request: &'r Request<'r>) -> Who<'r> {
        let from_trusted_proxy = self.comes_through_trusted_proxy(request);
        let from = |value: Option<&'r str>, header: &Option<String>| {
            value.map(Cow::Borrowed).or_else(|| {
                header
                    .as_deref()
                    .filter(|_| from_trusted_proxy)
                    .and_then(|name| request.headers.first(name))
                    .map(Cow::Borrowed)
            })
        };
        let headers = &self.identity_headers;
        Who {
            user: from(request.user, &headers.user),
            tenant: from(request.tenant, &headers.tenant),
            plan: from(request.plan, &headers.plan),
            api_key: from(request.api_key, &headers.api_key),
            from_trusted_proxy,
        }
    }

    /// Turns a request into the items of its checks, by every policy it matches.
    pub fn plan(&self, request: &Request<'_>) -> Plan {
        self.plan_in(Selection::Matching, request)
            .unwrap_or_else(|| unreachable!("every request has a matching-policies plan"))
    }

    /// Turns a request into the items of its checks within `scope`; `None` when the scope names
    /// a policy that does not exist.
    pub fn plan_in(&self, scope: Selection<'_>, request: &Request<'_>) -> Option<Plan> {
        let named = match scope {
            Selection::Matching => None,
            Selection::Policy(name) => Some(self.policies.iter().position(|p| &*p.name == name)?),
        };
        Some(self.plan_selected(named, request))
    }

    fn plan_selected(&self, named: Option<usize>, request: &Request<'_>) -> Plan {
        let client = self.client_of(request);
        let who = self.who(request);
        let identity = [
            ("user", who.user.as_deref()),
            ("api_key", who.api_key.as_deref()),
            ("tenant", who.tenant.as_deref()),
        ];
        let mut plan = Plan {
            gate: Gate::Proceed,
            client,
            enforced: Vec::new(),
            shadow: Vec::new(),
            matched: Vec::new(),
        };
        if self.allow.contains(client, &identity) {
            plan.gate = Gate::Bypass;
            return plan;
        }
        if self.deny.contains(client, &identity) {
            plan.gate = Gate::Refuse(self.config.deny_status);
            return plan;
        }
        let client_key = client
            .map(|address| group_key(address, self.config.ipv4_prefix, self.config.ipv6_prefix));
        // Matched by the path as an upstream routes it, not as the client spelled it.
        let path = match super::path::normalize(request.path) {
            Ok(path) => path,
            Err(ambiguous) => {
                plan.gate = Gate::AmbiguousPath(ambiguous);
                return plan;
            }
        };
        for (index, policy) in self.policies.iter().enumerate() {
            let Some(params) = params_for(policy, index, named, request, &path) else {
                continue;
            };
            if policy.allow.contains(client, &identity) {
                continue;
            }
            plan.matched.push(Arc::clone(&policy.name));
            if policy.deny.contains(client, &identity) {
                plan.gate = Gate::Refuse(self.config.deny_status);
                return plan;
            }
            if policy.cost == CostConfig::Body && request.length_unknown && !policy.shadow {
                plan.gate = Gate::LengthRequired;
                return plan;
            }
            let Some(key) = key_of(policy, request, &path, &who, client_key.as_deref(), &params)
            else {
                plan.gate = Gate::NoClientAddress(index);
                return plan;
            };
            let cost = cost_of(&policy.cost, request);
            let target = if policy.shadow {
                &mut plan.shadow
            } else {
                &mut plan.enforced
            };
            for limit in policy.limits.iter().chain(tier_of(policy, request, &who)) {
                target.push(planned(index, limit, key.clone(), cost, Role::Limit));
            }
            if !policy.shadow {
                self.plan_guards(&mut plan.enforced, index, policy, &key, request, &path);
            }
        }
        plan
    }

    /// The client's address, through the trusted proxies' forwarding header.
    fn client_of(&self, request: &Request<'_>) -> Option<std::net::IpAddr> {
        request.peer.map(|peer| {
            let header = self.config.forwarded_header;
            client_ip(
                peer,
                request.headers.joined(header.as_str()).as_deref(),
                header,
                &self.trusted,
            )
        })
    }

    /// The items of an enforced policy beyond its limits: its penalty box (looked at without
    /// counting), the idempotency record of a request that carries a key (with the count of
    /// the client's records), a concurrency slot.
    fn plan_guards(
        &self,
        enforced: &mut Vec<Planned>,
        index: usize,
        policy: &Policy,
        key: &str,
        request: &Request<'_>,
        path: &str,
    ) {
        if let Some(penalty) = &policy.penalty {
            let item = internal(index, policy, &penalty.block_box, key.to_owned(), 0);
            enforced.push(Planned {
                role: Role::PenaltyBox,
                ..item
            });
        }
        // A key is honoured only with the body's digest: its record is the request's
        // fingerprint, so that it replays only the very same request.
        if let (Some(idempotency), Some(header)) = (&policy.idempotency, &self.idempotency_header)
            && let Some(value) = request.headers.first(header)
            && let Some(digest) = &request.body_digest
        {
            let mut record_key = key.to_owned();
            key::push(
                &mut record_key,
                "idempotency",
                &fingerprint(value, request.method, path, digest),
            );
            let record = internal(index, policy, &idempotency.record, record_key, 1);
            enforced.push(Planned {
                role: Role::Idempotency,
                ..record
            });
            let keys = internal(index, policy, &idempotency.keys, key.to_owned(), 1);
            enforced.push(Planned {
                role: Role::IdempotencyKeys,
                label: format!("{}/idempotency-keys", policy.name).into(),
                ..keys
            });
        }
        if let Some(slot) = &policy.concurrency {
            enforced.push(planned(index, slot, key.to_owned(), 1, Role::Concurrency));
        }
    }
}

/// The key `policy` counts `request` by; `None` when it needs the client's address and the
/// request carries none.
fn key_of(
    policy: &Policy,
    request: &Request<'_>,
    path: &str,
    who: &Who<'_>,
    client_key: Option<&str>,
    params: &Params<'_, '_>,
) -> Option<String> {
    // Room for a typical key (`ip:2001:db8::/64`, `user:...|route:...`) at once: built from
    // nothing, it grew twice a request.
    let mut built = String::with_capacity(64);
    for part in &policy.key {
        // A missing identity falls back to the client address: never to a shared bucket that one
        // client could drain for everyone, never to no limit at all.
        let (name, value): (Cow<'_, str>, Cow<'_, str>) = match part {
            KeyPart::Ip => ("ip".into(), client_key?.into()),
            KeyPart::User => identity_or_ip("user", who.user.as_deref(), client_key)?,
            KeyPart::ApiKey => identity_or_ip("api_key", who.api_key.as_deref(), client_key)?,
            KeyPart::Tenant => identity_or_ip("tenant", who.tenant.as_deref(), client_key)?,
            KeyPart::Route => {
                let pattern = policy.matcher.pattern();
                let route = request
                    .route
                    .or((!pattern.is_empty()).then_some(pattern))
                    .unwrap_or(path);
                ("route".into(), route.into())
            }
            KeyPart::Method => ("method".into(), request.method.to_ascii_uppercase().into()),
            KeyPart::Host => (
                "host".into(),
                request.host.unwrap_or("-").to_ascii_lowercase().into(),
            ),
            KeyPart::Header(name) => (
                format!("header:{name}").into(),
                request.headers.first(name).unwrap_or("-").into(),
            ),
            KeyPart::Param(name) => (
                format!("param:{name}").into(),
                params
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or("-", |(_, v)| v)
                    .into(),
            ),
            KeyPart::Const(value) => ("const".into(), value.as_str().into()),
            KeyPart::Custom => identity_or_ip("custom", request.custom_key, client_key)?,
        };
        key::push(&mut built, &name, &value);
    }
    Some(built)
}

/// The identity part `part` of a key, or the client's address for a missing identity; `None`
/// when neither is known.
fn identity_or_ip<'v>(
    part: &'static str,
    value: Option<&'v str>,
    client_key: Option<&'v str>,
) -> Option<(Cow<'v, str>, Cow<'v, str>)> {
    match value {
        Some(value) if !value.is_empty() => Some((part.into(), value.into())),
        _ => Some(("ip".into(), client_key?.into())),
    }
}

fn tier_of<'p>(policy: &'p Policy, request: &Request<'_>, who: &Who<'_>) -> &'p [PolicyLimit] {
    if policy.tiers.is_empty() {
        return &[];
    }
    let plan = match &policy.tier_from {
        TierSource::Plan => who.plan.as_deref(),
        TierSource::Header(name) if who.from_trusted_proxy => request.headers.first(name),
        TierSource::Header(_) => None,
    };
    let index = match plan {
        Some(plan) => policy
            .tiers
            .iter()
            .position(|(tier, _)| tier == plan)
            .unwrap_or(policy.default_tier),
        None => policy.anonymous_tier.unwrap_or(policy.default_tier),
    };
    &policy.tiers[index].1
}

fn cost_of(cost: &CostConfig, request: &Request<'_>) -> u64 {
    match cost {
        CostConfig::Fixed(cost) => *cost,
        CostConfig::Header { name, default, max } => request
            .headers
            .first(name)
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map_or(*default, |cost| cost.min(*max)),
        CostConfig::Body => request.content_length.unwrap_or(0).min(MAX_COST),
    }
}

/// The template parameters of a policy that applies to the request, or `None` when it does
/// not. A named policy applies whatever the request's method and path; its template parameters
/// still come from the path when it fits.
fn params_for<'m, 'p>(
    policy: &'m Policy,
    index: usize,
    named: Option<usize>,
    request: &Request<'_>,
    path: &'p str,
) -> Option<Params<'m, 'p>> {
    let matched = || policy.matcher.matches(request.method, request.host, path);
    match named {
        Some(chosen) if chosen != index => None,
        Some(_) => Some(matched().unwrap_or_default()),
        None => matched(),
    }
}

/// What an idempotency record is kept under: the key the client sent, the method, the path and
/// the body's digest, digested together (32 hex digits, whatever the key's length).
fn fingerprint(key: &str, method: &str, path: &str, body: &[u8; 32]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in [
        key.as_bytes(),
        method.to_ascii_uppercase().as_bytes(),
        path.as_bytes(),
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.update(body);
    let digest = hasher.finalize();
    let mut text = String::with_capacity(32);
    crate::hex::push(&mut text, &digest[..16]);
    text
}

/// One of a policy's limits as an item of the check.
fn planned(index: usize, limit: &PolicyLimit, key: String, cost: u64, role: Role) -> Planned {
    Planned {
        key,
        limit: limit.limit.clone(),
        cost,
        role,
        policy: index,
        label: Arc::clone(&limit.label),
        unit: limit.unit,
    }
}

/// One of a policy's internal limits (penalty box, idempotency record) as an item of the
/// check, labelled with the policy's name.
fn internal(index: usize, policy: &Policy, limit: &Limit, key: String, cost: u64) -> Planned {
    Planned {
        key,
        limit: limit.clone(),
        cost,
        role: Role::Limit,
        policy: index,
        label: Arc::clone(&policy.name),
        unit: QuotaUnit::Requests,
    }
}

#[cfg(test)]
#[cfg(feature = "yaml")]
mod tests;
