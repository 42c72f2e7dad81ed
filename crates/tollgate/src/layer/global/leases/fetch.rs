//! Fetching leases from the global store: in the background for checks that spent, or for a
//! check that waits; each answer updates the round trip and the account it lands in.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::super::account::Seen;
use super::{AccountKey, GlobalLeases};
use crate::store::{Store, StoreError};
use tollgate_core::check::Check;
use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

impl GlobalLeases {
    /// Fetches the leases `fetch` lists in the background (not at all when there is no tokio
    /// runtime to spawn on: checks then ask when they run out).
    pub(in crate::layer::global) fn fetch_in_background(
        self: &Arc<Self>,
        fetch: SmallVec<[(String, Limit, u64); 2]>,
    ) {
        self.start_sweeper();
        for (key, limit, units) in fetch {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                let mut accounts = self.lock();
                if let Some(account) = accounts.get_mut(&AccountKey { key, limit }) {
                    account.fetching = None;
                }
                continue;
            };
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            let leases = Arc::clone(self);
            runtime.spawn(async move {
                let _ = leases.fetch(&key, &limit, units, 1).await;
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                leases.landed.notify_waiters();
            });
        }
    }

    /// Fetches a lease as a task of its own where there is a runtime, so that it lands (and
    /// its account stops fetching) even if the check waiting for it is cancelled.
    pub(super) async fn fetch_detached(
        self: &Arc<Self>,
        key: &str,
        limit: &Limit,
        units: u64,
        need: u64,
    ) -> Result<Decision, StoreError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let fetched = self.fetch(key, limit, units, need).await;
            self.landed.notify_waiters();
            return fetched;
        };
        let (leases, key, limit) = (Arc::clone(self), key.to_owned(), limit.clone());
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        runtime
            .spawn(async move {
                let fetched = leases.fetch(&key, &limit, units, need).await;
                leases.in_flight.fetch_sub(1, Ordering::AcqRel);
                leases.landed.notify_waiters();
                fetched
            })
            .await
            .map_err(|error| StoreError::Failed(format!("fetching a global lease: {error}")))?
    }

    /// Takes a lease of `units` (or, when the global store has less left but at least `need`,
    /// what it has) and keeps it. Returns the global store's last decision.
    async fn fetch(
        &self,
        key: &str,
        limit: &Limit,
        units: u64,
        need: u64,
    ) -> Result<Decision, StoreError> {
        let sent = self.clock.now();
        let mut asked = units;
        let mut answer = self.call(key, limit, asked).await;
        if let Ok((decision, _)) = &answer {
            let left = decision.remaining();
            // Only what the asker can use: a check too costly for what is left takes nothing.
            if !decision.allowed() && left >= need.max(1) && left < asked {
                asked = left;
                answer = self.call(key, limit, asked).await;
            }
        }
        let received = self.clock.now();
        let sample = received.saturating_sub(sent);
        let previous = self.round_trip.load(Ordering::Relaxed);
        let smoothed = if previous == 0 {
            sample
        } else {
            (previous * 3 + sample) / 4
        };
        self.round_trip.store(smoothed, Ordering::Relaxed);
        let mut accounts = self.lock();
        let account = accounts
            .entry(AccountKey {
                key: key.to_owned(),
                limit: limit.clone(),
            })
            .or_default();
        account.fetching = None;
        account.unreachable = answer.is_err();
        let (decision, at) = answer?;
        account.seen = Some(Seen { decision, received });
        if !decision.allowed() {
            account.denied_until = decision
                .retry_after_micros()
                .map(|retry| sent.saturating_add(retry));
            return Ok(decision);
        }
        self.counters.leased(asked);
        account.denied_until = None;
        let id = self.chunks.fetch_add(1, Ordering::Relaxed) + 1;
        account.add(id, asked, self.valid_until(limit, &decision, sent), at);
        account.last_used = received;
        Ok(decision)
    }

    /// One call to the global store for `units` of (key, limit): its decision and time.
    async fn call(
        &self,
        key: &str,
        limit: &Limit,
        units: u64,
    ) -> Result<(Decision, Micros), StoreError> {
        self.counters.called();
        let mut check = Check::new(0);
        check.push(key, limit, units);
        let verdict = self.global.check(&check, None).await?;
        let decision = verdict.decisions().first().copied().ok_or_else(|| {
            StoreError::Failed("the global store answered without a decision".to_owned())
        })?;
        Ok((decision, verdict.at()))
    }
}
