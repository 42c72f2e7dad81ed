//! The global tier, a store layer: limits of [`Scope::Global`] are spent from units this node
//! leases from a global store that every region shares, while all other limits go to the
//! regional store it wraps. A check with both is decided as one:
//!
//! 1. its global items are spent from held units (or denied while a denial of the global
//!    store lasts); an item with nothing held is denied here while a lease is on its way
//!    (a busy key's is fetched then), and a quiet key's, with none on its way, asks the global
//!    store for a lease and waits;
//! 2. only then is the regional store asked, for the regional items alone;
//! 3. if either denies, the global units the check spent go back to this node's leases (they
//!    were taken from the global store, and stay counted there), and a check denied by the
//!    global tier charges nothing regionally.
//!
//! Every unit admitted anywhere was first taken from the global store, so all regions together
//! never admit more than it does. See [`GlobalLeases`] for how leases are sized, kept and given
//! back.

mod account;
mod leases;
mod stats;

use std::sync::Arc;

use futures_util::future::Either;
use smallvec::SmallVec;

pub use leases::{GlobalLeases, LeaseTuning};
pub use stats::GlobalStats;

use crate::algorithm::Adjustment;
use crate::store::{Store, StoreError};
use leases::Local;
use tollgate_core::check::{Check, Verdict};
use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;
use tollgate_core::scope::Scope;

/// A store whose global limits are spent from leases on a global store.
pub(crate) struct GlobalTier<S> {
    inner: S,
    leases: Option<Arc<GlobalLeases>>,
}

impl<S> std::fmt::Debug for GlobalTier<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalTier")
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

fn is_global(check: &Check<'_>) -> bool {
    check
        .items()
        .iter()
        .any(|item| item.limit.scope() == Scope::Global)
}

/// The items of `check` of one scope, as a check of their own.
fn of_scope<'a>(check: &Check<'a>, scope: Scope) -> Check<'a> {
    let mut part = Check::new(check.cost());
    for item in check.items() {
        if item.limit.scope() == scope {
            part.push(item.key.clone(), item.limit, item.cost);
        }
    }
    part
}

/// The adjustments of the items of `check` of one scope.
fn adjustments_of(
    check: &Check<'_>,
    adjustments: &[Adjustment],
    scope: Scope,
) -> SmallVec<[Adjustment; 4]> {
    check
        .items()
        .iter()
        .zip(adjustments)
        .filter(|(item, _)| item.limit.scope() == scope)
        .map(|(_, adjustment)| *adjustment)
        .collect()
}

impl<S: Store> GlobalTier<S> {
    /// `inner` as the regional store, with global limits leased from `leases` (none: a check
    /// of a global limit fails, saying no global store is configured).
    pub(crate) fn new(inner: S, leases: Option<Arc<GlobalLeases>>) -> Self {
        Self { inner, leases }
    }

    /// The regional store.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    /// The leases on the global store, when there is one.
    pub(crate) fn leases(&self) -> Option<&Arc<GlobalLeases>> {
        self.leases.as_ref()
    }

    fn leases_for(&self, check: &Check<'_>) -> Result<&Arc<GlobalLeases>, StoreError> {
        self.leases.as_ref().ok_or_else(|| {
            let name = check
                .items()
                .iter()
                .find(|item| item.limit.scope() == Scope::Global)
                .map_or("", |item| item.limit.name());
            StoreError::Failed(format!(
                "limit {name:?} has scope global, but no global store is configured"
            ))
        })
    }

    /// The regional items' decisions without counting (each at cost 0), for a check the
    /// global tier denied; `None` where the regional store cannot say.
    async fn regional_view(&self, check: &Check<'_>) -> Option<Verdict> {
        let mut peek = Check::new(0);
        for item in check.items() {
            if item.limit.scope() == Scope::Region {
                peek.push(item.key.clone(), item.limit, 0);
            }
        }
        if peek.is_empty() {
            return None;
        }
        self.inner.check(&peek, None).await.ok()
    }

    /// A check with global items at an explicit time: the global store decides them at that
    /// time (no lease can), then the regional store the rest; a regional denial refunds the
    /// global charge.
    async fn at_time(
        &self,
        leases: &GlobalLeases,
        check: &Check<'_>,
        at: Micros,
    ) -> Result<Verdict, StoreError> {
        let global = of_scope(check, Scope::Global);
        let global_verdict = leases.direct(&global, Some(at)).await?;
        let regional = of_scope(check, Scope::Region);
        let regional_verdict = if global_verdict.is_denied() || regional.is_empty() {
            None
        } else {
            let verdict = self.inner.check(&regional, Some(at)).await?;
            if verdict.is_denied() {
                let refunds = global.refunds_at(global_verdict.at());
                leases.adjust(&global, &refunds, Some(at)).await?;
            }
            Some(verdict)
        };
        Ok(combine(
            check,
            at,
            global_verdict.decisions(),
            regional_verdict.as_ref().map(Verdict::decisions),
        ))
    }

    /// A check with global items, decided from leases: see the module's documentation.
    // One future on the hot path: split into helpers (async or not), the global check took
    // 3-10% more instructions (N=20000 scripts/instructions, limiter-global).
    #[allow(clippy::too_many_lines)]
    async fn leased(
        &self,
        leases: &Arc<GlobalLeases>,
        check: &Check<'_>,
    ) -> Result<Verdict, StoreError> {
        let now = leases.now();
        let items = check.items();
        let mut fetch = SmallVec::new();
        let mut local: SmallVec<[Option<Local>; 4]> = SmallVec::new();
        for item in items {
            if item.limit.scope() != Scope::Global {
                local.push(None);
                continue;
            }
            match leases.local(item, now, &mut fetch) {
                Ok(answer) => local.push(Some(answer)),
                Err(error) => {
                    leases.fetch_in_background(fetch);
                    put_back(leases, check, &local);
                    return Err(error);
                }
            }
        }
        leases.fetch_in_background(fetch);
        let mut denied = false;
        for (item, slot) in items.iter().zip(local.iter_mut()) {
            if denied {
                break;
            }
            if matches!(slot, Some(Local::Ask)) {
                match leases.ask(item).await {
                    Ok(answer) => *slot = Some(answer),
                    Err(error) => {
                        put_back(leases, check, &local);
                        return Err(error);
                    }
                }
            }
            denied = matches!(slot, Some(Local::Denied(_)));
        }
        let denied = denied
            || local
                .iter()
                .any(|slot| matches!(slot, Some(Local::Denied(_)) | Some(Local::Ask)));
        let regional_verdict = if denied {
            put_back(leases, check, &local);
            self.regional_view(check).await
        } else {
            let regional = of_scope(check, Scope::Region);
            if regional.is_empty() {
                None
            } else {
                match self.inner.check(&regional, None).await {
                    Ok(verdict) => {
                        if verdict.is_denied() {
                            put_back(leases, check, &local);
                        }
                        Some(verdict)
                    }
                    Err(error) => {
                        put_back(leases, check, &local);
                        return Err(error);
                    }
                }
            }
        };
        let global: SmallVec<[Decision; 4]> = local
            .iter()
            .flatten()
            .map(|slot| match slot {
                Local::Spent(decision, _) | Local::Denied(decision) => *decision,
                // Not asked: an earlier item denied the check.
                Local::Ask => Decision::new(false, 0, 0, 0, Some(0), 0),
            })
            .collect();
        // Refunds of this check are reckoned from its oldest charge: the global store charged
        // the units it spent when their lease was taken. Earlier is never more generous.
        let leased_at = local
            .iter()
            .flatten()
            .filter_map(|slot| match slot {
                Local::Spent(_, spent) => spent.iter().map(|part| part.taken_at).min(),
                _ => None,
            })
            .min();
        let at = match (regional_verdict.as_ref().map(Verdict::at), leased_at) {
            (Some(regional), Some(leased)) => regional.min(leased),
            (regional, leased) => regional.or(leased).unwrap_or(now),
        };
        let verdict = combine(
            check,
            at,
            &global,
            regional_verdict.as_ref().map(Verdict::decisions),
        );
        if verdict.is_admitted() {
            let units = items
                .iter()
                .filter(|item| item.limit.scope() == Scope::Global)
                .map(|item| item.cost)
                .sum();
            leases.admitted(units);
        }
        Ok(verdict)
    }
}

/// Puts back the units a denied check spent from leases.
fn put_back(leases: &GlobalLeases, check: &Check<'_>, local: &[Option<Local>]) {
    for (item, slot) in check.items().iter().zip(local) {
        if let Some(Local::Spent(_, spent)) = slot {
            leases.put_back(item, spent);
        }
    }
}

/// The verdict of `check` from the global items' decisions and the regional items' (in
/// their order among the check's items); regional items the regional store was not asked
/// about (the global tier denied, and the regional store could not be read) show as
/// admitted, with their limit's capacity left.
fn combine(
    check: &Check<'_>,
    at: Micros,
    global: &[Decision],
    regional: Option<&[Decision]>,
) -> Verdict {
    let mut global = global.iter();
    let mut regional = regional.unwrap_or_default().iter();
    Verdict::from_decisions(
        at,
        check.items().iter().map(|item| {
            let next = if item.limit.scope() == Scope::Global {
                global.next()
            } else {
                regional.next()
            };
            next.copied().unwrap_or_else(|| {
                let capacity = item.limit.capacity();
                Decision::new(true, capacity, capacity, 0, Some(0), 0)
            })
        }),
    )
}

impl<S: Store> Store for GlobalTier<S> {
    /// A check without global items is the regional store's own future, not wrapped in
    /// another: every check passes this layer.
    fn check(
        &self,
        check: &Check<'_>,
        at: Option<Micros>,
    ) -> impl Future<Output = Result<Verdict, StoreError>> + Send {
        if !is_global(check) {
            return Either::Left(self.inner.check(check, at));
        }
        Either::Right(async move {
            let leases = self.leases_for(check)?;
            match at {
                Some(at) => self.at_time(leases, check, at).await,
                None => self.leased(leases, check).await,
            }
        })
    }

    /// Only a check without global limits, which is the regional store's own.
    fn check_now(&self, check: &Check<'_>) -> Option<Result<Verdict, StoreError>> {
        if is_global(check) {
            return None;
        }
        self.inner.check_now(check)
    }

    async fn adjust(
        &self,
        check: &Check<'_>,
        adjustments: &[Adjustment],
        at: Option<Micros>,
    ) -> Result<(), StoreError> {
        if !is_global(check) {
            return self.inner.adjust(check, adjustments, at).await;
        }
        let leases = self.leases_for(check)?;
        let regional = of_scope(check, Scope::Region);
        if !regional.is_empty() {
            let adjustments = adjustments_of(check, adjustments, Scope::Region);
            self.inner.adjust(&regional, &adjustments, at).await?;
        }
        let global = of_scope(check, Scope::Global);
        let adjustments = adjustments_of(check, adjustments, Scope::Global);
        leases.adjust(&global, &adjustments, at).await
    }

    async fn forget(&self, check: &Check<'_>) -> Result<(), StoreError> {
        if !is_global(check) {
            return self.inner.forget(check).await;
        }
        let leases = self.leases_for(check)?;
        let regional = of_scope(check, Scope::Region);
        if !regional.is_empty() {
            self.inner.forget(&regional).await?;
        }
        leases.forget(&of_scope(check, Scope::Global)).await
    }

    pass_to_inner!(counters);

    pass_to_inner!(describe);
}

#[cfg(test)]
mod tests;
