//! The overrides in force, compiled against the policies in force: for each policy and key,
//! the limits that replace the policy's and whether the identity is let through or refused.
//! A plan pays for it only when the table holds something, and then one lookup per limit.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

use super::model::{Change, Override, SetLimit, StoredOverride};
use crate::policy::{Gate, Plan, Planned, Policies, PolicyLimit, Role};
use tollgate_core::clock::Micros;
use tollgate_core::limit::Limit;

/// What a compiled override does.
#[derive(Debug, Clone)]
enum Effect {
    /// Replaces each of these limits (by the state id of the policy's) with its own.
    Replace(Vec<(u64, Limit)>),
    /// Lets the identity through the policy.
    Allow,
    /// Refuses it.
    Deny,
}

#[derive(Debug, Clone)]
struct Compiled {
    /// One limit's name, or every limit.
    limit: Option<Arc<str>>,
    effect: Effect,
    expires_at: Option<Micros>,
}

/// The overrides in force, compiled against one set of policies.
#[derive(Debug, Default)]
pub(crate) struct OverrideTable {
    /// Policy name → key → the overrides of that identity.
    by_policy: HashMap<Arc<str>, HashMap<String, SmallVec<[Compiled; 1]>>>,
    /// Every override, as stored, in id order.
    pub(crate) stored: Arc<Vec<StoredOverride>>,
    /// The version of the table read.
    pub(crate) version: u64,
}

/// Every limit of `policy`'s that a change of `limit` (`None`: all) applies to: its own limits
/// and each tier's.
fn targeted<'p>(
    policies: &'p Policies,
    policy: &str,
    limit: Option<&'p str>,
) -> Option<impl Iterator<Item = &'p PolicyLimit>> {
    let policy = policies.policies.iter().find(|p| &*p.name == policy)?;
    let all = policy
        .limits
        .iter()
        .chain(policy.tiers.iter().flat_map(|(_, limits)| limits.iter()));
    Some(all.filter(move |one| limit.is_none_or(|name| &*one.label == name)))
}

/// `limit` with what `set` gives in place of its own.
fn with_set(limit: &Limit, set: &SetLimit) -> Result<Limit, String> {
    let algorithm = set.algorithm.unwrap_or(limit.algorithm());
    let mut builder = Limit::builder(limit.name(), algorithm, set.quota.unwrap_or(limit.quota()));
    if let Some(burst) = set.burst.or(limit.burst().filter(|_| set.quota.is_none())) {
        builder = builder.burst(burst);
    }
    // A leaky bucket keeps its mode and a fixed window its calendar: "50000/month" stays a
    // month that starts on the billing day.
    if algorithm == limit.algorithm() {
        if algorithm == crate::algorithm::Algorithm::LeakyBucket {
            builder = builder.mode(limit.mode());
        }
        builder = builder.calendar(limit.calendar().map(|c| c.spec().clone()));
    }
    builder
        .scope(limit.scope())
        .pinned(limit.pinned())
        .build()
        .map_err(|error| error.detail())
}

/// What `item` does to the limits it targets under `policies`; the error names the limit.
pub(crate) fn compile_one(
    policies: &Policies,
    item: &Override,
) -> Result<Vec<(u64, Limit)>, String> {
    let Some(limits) = targeted(policies, &item.policy, item.limit.as_deref()) else {
        return Err(format!("policy: no policy is named {:?}", item.policy));
    };
    let mut replaced = Vec::new();
    for one in limits {
        let limit = &one.limit;
        let changed = match &item.change {
            Change::Set(set) => with_set(limit, set),
            Change::Multiply(factor) => limit.multiplied(*factor).ok_or_else(|| {
                format!("multiplied by {factor}, the quota or burst is out of range")
            }),
            Change::Allow | Change::Deny => continue,
        };
        let changed = changed.map_err(|error| format!("limit {:?}: {error}", one.label))?;
        replaced.push((limit.state_id(), changed));
    }
    if replaced.is_empty() && matches!(item.change, Change::Set(_) | Change::Multiply(_)) {
        return Err(format!(
            "limit: policy {:?} has no limit named {:?}",
            item.policy,
            item.limit.as_deref().unwrap_or_default()
        ));
    }
    Ok(replaced)
}

impl OverrideTable {
    /// `stored` compiled against `policies`; an override that no longer fits them (its policy
    /// or limit is gone) is kept as stored and applies to nothing, returned with why.
    pub(crate) fn compile(
        policies: Option<&Policies>,
        stored: Arc<Vec<StoredOverride>>,
        version: u64,
    ) -> (Self, Vec<(String, String)>) {
        let mut table = Self {
            by_policy: HashMap::new(),
            stored: Arc::clone(&stored),
            version,
        };
        let mut unfit = Vec::new();
        let Some(policies) = policies else {
            return (table, unfit);
        };
        for one in stored.iter() {
            let item = &one.item;
            let effect = match &item.change {
                Change::Allow => Effect::Allow,
                Change::Deny => Effect::Deny,
                Change::Set(_) | Change::Multiply(_) => match compile_one(policies, item) {
                    Ok(limits) => Effect::Replace(limits),
                    Err(why) => {
                        unfit.push((item.target().id(), why));
                        continue;
                    }
                },
            };
            if targeted(policies, &item.policy, None).is_none() {
                unfit.push((
                    item.target().id(),
                    format!("no policy is named {:?}", item.policy),
                ));
                continue;
            }
            let compiled = Compiled {
                limit: item.limit.as_deref().map(Arc::from),
                effect,
                expires_at: item.expiry().ok().flatten(),
            };
            table
                .by_policy
                .entry(Arc::from(item.policy.as_str()))
                .or_default()
                .entry(item.key.clone())
                .or_default()
                .push(compiled);
        }
        (table, unfit)
    }

    /// Whether anything applies: a plan is left alone otherwise.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_policy.is_empty()
    }

    /// The override of `item` at `now` (read only for an override that expires): one for its
    /// limit by name before one for every limit.
    fn of(
        &self,
        policies: &Policies,
        item: &Planned,
        now: &impl Fn() -> Micros,
    ) -> Option<&Effect> {
        let name = &policies.policies.get(item.policy)?.name;
        let found = self.by_policy.get(name)?.get(&item.key)?;
        let now = found
            .iter()
            .any(|one| one.expires_at.is_some())
            .then(now)
            .unwrap_or_default();
        let live = |one: &&Compiled| one.expires_at.is_none_or(|at| at > now);
        let named = found
            .iter()
            .filter(live)
            .find(|one| one.limit.as_deref() == Some(&*item.label));
        named
            .or_else(|| found.iter().filter(live).find(|one| one.limit.is_none()))
            .map(|one| &one.effect)
    }

    /// Applies the overrides to `plan` at `now` (the clock is read only where an override
    /// that expires is found): replaces limits, drops every item of a policy the
    /// identity is let through, refuses a request an enforced policy's override denies.
    pub(crate) fn apply(&self, policies: &Policies, plan: &mut Plan, now: impl Fn() -> Micros) {
        let mut allowed: SmallVec<[usize; 2]> = SmallVec::new();
        let mut denied = false;
        for (items, enforced) in [(&mut plan.enforced, true), (&mut plan.shadow, false)] {
            for item in items.iter_mut().filter(|item| item.role == Role::Limit) {
                match self.of(policies, item, &now) {
                    Some(Effect::Replace(limits)) => {
                        let id = item.limit.state_id();
                        if let Some((_, limit)) = limits.iter().find(|(of, _)| *of == id) {
                            item.limit = limit.clone();
                        }
                    }
                    Some(Effect::Allow) => allowed.push(item.policy),
                    Some(Effect::Deny) => denied |= enforced,
                    None => {}
                }
            }
        }
        if !allowed.is_empty() {
            plan.enforced.retain(|item| !allowed.contains(&item.policy));
            plan.shadow.retain(|item| !allowed.contains(&item.policy));
        }
        if denied && plan.gate == Gate::Proceed {
            plan.gate = Gate::Refuse(policies.config.deny_status);
        }
    }
}
