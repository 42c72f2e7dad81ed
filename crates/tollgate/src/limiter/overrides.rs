//! A limiter's overrides as an operator changes them (`limiter.overrides()`): set, read, list,
//! remove, import and export; every change logged (who, what, before, after) and counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Limiter;
use crate::overrides::table::compile_one;
use crate::overrides::{
    Change, MAX_ACTOR_BYTES, MAX_OVERRIDES, Override, OverrideBackend, OverrideError,
    OverrideState, OverrideTarget, OverrideWrite, OverrideWritten, StoredOverride, lines,
};
use crate::policy::{Plan, Policies, Request, Selection};
use crate::store::{Store, StoreError};

/// The overrides of a limiter: see [`crate::overrides`].
#[derive(Debug)]
pub struct Overrides<'l, S> {
    limiter: &'l Limiter<S>,
}

impl<S: Store> Limiter<S> {
    /// The overrides: who is let through, refused or limited otherwise than the policies say.
    pub fn overrides(&self) -> Overrides<'_, S> {
        Overrides { limiter: self }
    }

    /// The request's plan under `scope` with the overrides in force applied; `None` when the
    /// scope names a policy that does not exist.
    pub(super) fn plan(
        &self,
        policies: &Policies,
        scope: Selection<'_>,
        request: &Request<'_>,
    ) -> Option<Plan> {
        let mut plan = policies.plan_in(scope, request)?;
        self.inner
            .overrides
            .apply(policies, &mut plan, || self.inner.clock.now());
        Some(plan)
    }

    /// Compiles the overrides in force against `policies`, which are about to be.
    pub(super) fn recompile_overrides(&self, policies: &Policies) {
        let state = &self.inner.overrides;
        let table = state.table();
        let unfit = state.install(Some(policies), Arc::clone(&table.stored), table.version);
        warn_unfit(&unfit);
    }
}

/// Says which overrides apply to nothing and why.
fn warn_unfit(unfit: &[(String, String)]) {
    for (id, why) in unfit {
        // Named by policy and limit: the key is shown only as key logging allows.
        let target = OverrideTarget::from_id(id);
        tracing::warn!(
            policy = target.as_ref().map(|t| t.policy.as_str()),
            limit = target.as_ref().and_then(|t| t.limit.as_deref()),
            "an override applies to nothing under the policies in force: {why}"
        );
    }
}

impl<S: Store> Overrides<'_, S> {
    fn state(&self) -> &OverrideState {
        &self.limiter.inner.overrides
    }

    /// Keeps overrides in `backend` from now on (the default is this process's memory); the
    /// table in force is read from it at the next [`refresh`](Self::refresh).
    pub fn attach(&self, backend: Arc<dyn OverrideBackend>) {
        self.state().attach(backend);
    }

    /// Where the overrides are kept: `memory`, `file` or `redis`.
    pub fn kind(&self) -> &'static str {
        self.state().backend().kind()
    }

    /// The version of the table in force.
    pub fn version(&self) -> u64 {
        self.state().table().version
    }

    /// Every override in force, by policy, key and limit.
    pub fn list(&self) -> Arc<Vec<StoredOverride>> {
        Arc::clone(&self.state().table().stored)
    }

    /// The override in force for `target`.
    pub fn get(&self, target: &OverrideTarget) -> Option<StoredOverride> {
        self.list()
            .iter()
            .find(|one| one.item.target() == *target)
            .cloned()
    }

    /// Reads the table again if the backend's version moved; `true` when it did.
    pub async fn refresh(&self) -> Result<bool, StoreError> {
        let refreshed = self.read_again().await;
        if refreshed.is_err() {
            #[cfg(feature = "metrics")]
            self.limiter.inner.metrics.record_override_refresh_failure();
        }
        refreshed
    }

    async fn read_again(&self) -> Result<bool, StoreError> {
        let backend = self.state().backend();
        if backend.version().await? == self.version() {
            return Ok(false);
        }
        let snapshot = backend.load().await?;
        let (stored, unreadable) = OverrideState::read(&snapshot);
        warn_unfit(&unreadable);
        let count = stored.len();
        let policies = self.limiter.policies();
        let unfit = self
            .state()
            .install(policies.as_deref(), Arc::new(stored), snapshot.version);
        warn_unfit(&unfit);
        #[cfg(feature = "metrics")]
        self.limiter.inner.metrics.set_overrides(count);
        tracing::debug!(version = snapshot.version, count, "overrides read");
        Ok(true)
    }

    /// Refreshes every `every`, for ever: a change made on another node applies here within
    /// `every` and one read of the backend. A failure is logged when it starts and when it
    /// ends, and counted each time; the table in force stays meanwhile.
    pub async fn follow(&self, every: Duration) {
        let mut failing = false;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match self.refresh().await {
                Ok(_) if failing => {
                    failing = false;
                    tracing::info!("overrides: the backend answers again");
                }
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(
                        %error,
                        "overrides: cannot read the backend; the overrides read last stay in force"
                    );
                }
                _ => {}
            }
        }
    }

    /// Checks `item` against the policies in force.
    fn check(&self, item: &Override) -> Result<(), String> {
        item.validate()?;
        let policies = self
            .limiter
            .policies()
            .ok_or_else(|| "policy: no policies are loaded".to_owned())?;
        match item.change {
            Change::Allow | Change::Deny => {
                if !policies.names().any(|name| name == item.policy) {
                    return Err(format!("policy: no policy is named {:?}", item.policy));
                }
            }
            Change::Set(_) | Change::Multiply(_) => {
                compile_one(&policies, item)?;
            }
        }
        Ok(())
    }

    /// Sets `item` if its override is at version `replaces` now (0: there is none), as written
    /// by `actor`; the override as stored, with its new version.
    pub async fn put(
        &self,
        item: Override,
        replaces: u64,
        actor: &str,
    ) -> Result<StoredOverride, OverrideError> {
        check_actor(actor)?;
        self.check(&item).map_err(OverrideError::Invalid)?;
        if replaces == 0 && self.list().len() >= MAX_OVERRIDES {
            return Err(OverrideError::Full);
        }
        let target = item.target();
        let mut stored = StoredOverride {
            item,
            updated_by: actor.to_owned(),
            updated_at: crate::overrides::rfc3339(self.limiter.inner.clock.now()),
            version: 0,
        };
        let body = body_of(&stored);
        let before = self.get(&target);
        let id = target.id();
        stored.version = self.write(&id, replaces, Some(&body)).await?;
        self.changed("put", actor, before.as_ref(), Some(&stored))
            .await;
        Ok(stored)
    }

    /// Removes the override of `target` if it is at version `replaces` now; the override as it
    /// was.
    pub async fn remove(
        &self,
        target: &OverrideTarget,
        replaces: u64,
        actor: &str,
    ) -> Result<Option<StoredOverride>, OverrideError> {
        check_actor(actor)?;
        if replaces == 0 {
            return Err(OverrideError::NotFound);
        }
        let before = self.get(target);
        match self.write(&target.id(), replaces, None).await {
            Err(OverrideError::Conflict { current: 0 }) => return Err(OverrideError::NotFound),
            written => written?,
        };
        self.changed("delete", actor, before.as_ref(), None).await;
        Ok(before)
    }

    async fn write(
        &self,
        id: &str,
        replaces: u64,
        body: Option<&str>,
    ) -> Result<u64, OverrideError> {
        match self.state().backend().write(id, replaces, body).await? {
            OverrideWritten::Done { version } => Ok(version),
            OverrideWritten::Conflict { current } => Err(OverrideError::Conflict { current }),
        }
    }

    /// Logs and counts a change, and reads the table again so that it applies here at once.
    async fn changed(
        &self,
        operation: &'static str,
        actor: &str,
        before: Option<&StoredOverride>,
        after: Option<&StoredOverride>,
    ) {
        self.log_change(operation, actor, before, after);
        self.read_back().await;
    }

    /// Logs a change (who, what, before, after; keys as the logs show keys) and counts it.
    fn log_change(
        &self,
        operation: &'static str,
        actor: &str,
        before: Option<&StoredOverride>,
        after: Option<&StoredOverride>,
    ) {
        let shown = |one: Option<&StoredOverride>| {
            one.map_or_else(|| "null".to_owned(), |one| self.shown(one).to_string())
        };
        let target = after.or(before).map(|one| &one.item);
        tracing::info!(
            target: "tollgate::audit",
            operation,
            actor,
            policy = target.map(|item| item.policy.as_str()),
            key = target.map(|item| self.limiter.inner.denials.key_for_logs(&item.key)),
            limit = target.and_then(|item| item.limit.as_deref()),
            before = %shown(before),
            after = %shown(after),
            "override changed"
        );
        #[cfg(feature = "metrics")]
        self.limiter.inner.metrics.record_override_change(operation);
    }

    /// Reads the table again after a write (should that fail, [`follow`](Self::follow) reads
    /// it later).
    async fn read_back(&self) {
        if let Err(error) = self.refresh().await {
            tracing::warn!(%error, "overrides: written, but not read back yet");
        }
    }

    /// `one` as JSON with its key as the logs show keys (see
    /// [`set_key_logging`](Limiter::set_key_logging)): for listings that anyone with read
    /// access sees.
    pub fn shown(&self, one: &StoredOverride) -> serde_json::Value {
        let mut value = one.to_json();
        value["key"] = self
            .limiter
            .inner
            .denials
            .key_for_logs(&one.item.key)
            .into();
        value
    }

    /// Every override in force as JSON lines (see [`lines`]), keys as they are.
    pub fn export(&self) -> String {
        lines::export(&self.list())
    }

    /// Sets every override of `text` (JSON lines), each replacing whatever version of it is
    /// stored when the import starts, in one batch (a file is saved once). The whole text is
    /// checked first: the error names the first bad line, and then nothing is written. Should
    /// another writer change one of the same overrides meanwhile, that line alone is not
    /// written and the error names it. Returns how many were written.
    pub async fn import(&self, text: &str, actor: &str) -> Result<usize, OverrideError> {
        check_actor(actor)?;
        let (numbers, items): (Vec<usize>, Vec<Override>) = lines::parse(text)
            .map_err(OverrideError::Invalid)?
            .into_iter()
            .unzip();
        for (item, number) in items.iter().zip(&numbers) {
            self.check(item)
                .map_err(|error| OverrideError::Invalid(format!("line {number}: {error}")))?;
        }
        self.refresh().await?;
        let current: HashMap<OverrideTarget, StoredOverride> = self
            .list()
            .iter()
            .map(|one| (one.item.target(), one.clone()))
            .collect();
        let targets: Vec<OverrideTarget> = items.iter().map(Override::target).collect();
        let new = targets.iter().filter(|t| !current.contains_key(t)).count();
        if current.len() + new > MAX_OVERRIDES {
            return Err(OverrideError::Full);
        }
        let updated_at = crate::overrides::rfc3339(self.limiter.inner.clock.now());
        let mut stored: Vec<StoredOverride> = items
            .into_iter()
            .map(|item| StoredOverride {
                item,
                updated_by: actor.to_owned(),
                updated_at: updated_at.clone(),
                version: 0,
            })
            .collect();
        let ids: Vec<String> = targets.iter().map(OverrideTarget::id).collect();
        let bodies: Vec<String> = stored.iter().map(body_of).collect();
        let writes: Vec<OverrideWrite<'_>> = ids
            .iter()
            .zip(&bodies)
            .zip(&targets)
            .map(|((id, body), target)| OverrideWrite {
                id,
                replaces: current.get(target).map_or(0, |one| one.version),
                body: Some(body),
            })
            .collect();
        let outcomes = self.state().backend().write_all(&writes).await?;
        let mut conflict = None;
        let mut written = 0;
        for ((one, outcome), number) in stored.iter_mut().zip(outcomes).zip(&numbers) {
            match outcome {
                OverrideWritten::Done { version } => {
                    one.version = version;
                    written += 1;
                    self.log_change("put", actor, current.get(&one.item.target()), Some(one));
                }
                OverrideWritten::Conflict { .. } => {
                    conflict.get_or_insert(*number);
                }
            }
        }
        self.read_back().await;
        match conflict {
            Some(number) => Err(OverrideError::Invalid(format!(
                "line {number}: changed by another writer during the import, so not written; the other lines were"
            ))),
            None => Ok(written),
        }
    }
}

/// The body stored for `stored`: the override and who wrote it when (its version is the
/// record's).
fn body_of(stored: &StoredOverride) -> String {
    let mut value = stored.to_json();
    if let Some(object) = value.as_object_mut() {
        object.remove("version");
    }
    value.to_string()
}

fn check_actor(actor: &str) -> Result<(), OverrideError> {
    if actor.is_empty() || actor.len() > MAX_ACTOR_BYTES {
        return Err(OverrideError::Invalid(format!(
            "actor: must be 1 to {MAX_ACTOR_BYTES} bytes"
        )));
    }
    Ok(())
}
