//! How big a lease is, when the next is fetched, and how long its units may be spent: from the
//! node's demand, the round trip to the global store and the limit's algorithm.

use std::sync::atomic::Ordering;

use super::super::account::{Account, Sizing};
use super::GlobalLeases;
use crate::algorithm::Algorithm;
use tollgate_core::clock::{Micros, duration_to_micros};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

impl GlobalLeases {
    /// How long a lease should last: the horizon, and at least four round trips (round trips
    /// under load vary, and a lease should outlast the next one's fetch).
    pub(super) fn span(&self) -> Micros {
        duration_to_micros(self.tuning.horizon).max(4 * self.round_trip.load(Ordering::Relaxed))
    }

    /// The size of the next lease for `account` on `limit`.
    pub(super) fn size(&self, account: &Account, limit: &Limit, cost: u64, now: Micros) -> u64 {
        let span = self.span();
        let window_left = (limit.algorithm() == Algorithm::FixedWindow)
            .then(|| {
                account.seen.and_then(|seen| {
                    let ends = seen
                        .received
                        .saturating_add(seen.decision.reset_after_micros());
                    (ends > now).then(|| ends - now)
                })
            })
            .flatten();
        // What the global store said was left still holds if it is recent, and for a fixed
        // window, if its window has not ended.
        let recent = account.seen.filter(|seen| {
            now.saturating_sub(seen.received) < span
                && (limit.algorithm() != Algorithm::FixedWindow || window_left.is_some())
        });
        Sizing {
            cost,
            rate: account.demand.rate(now),
            span,
            most: (limit.capacity() * u64::from(self.tuning.max_share_percent) / 100).max(1),
            remaining: recent.map(|seen| seen.decision.remaining()),
            window_left,
        }
        .units()
    }

    /// Whether `account`, having spent, should fetch its next lease now: what it holds lasts
    /// less than three round trips at its rate (round trips vary), and it is used often enough to
    /// spend another lease before that expires.
    pub(super) fn wants_more(&self, account: &Account, limit: &Limit, now: Micros) -> bool {
        let rate = account.demand.rate(now);
        let hold = self.tuning.hold.as_secs_f64();
        let round_trip = self.round_trip.load(Ordering::Relaxed);
        account.fetching.is_none()
            && rate * hold >= 2.0
            && (self.lasting(account, limit, now, round_trip) as f64)
                < (rate * round_trip as f64 / 1e6 * 3.0).ceil() + 1.0
    }

    /// What `account` holds that a lease asked for now would not outlast: units expiring
    /// within three round trips do not count, so a lease is renewed before its hold runs out.
    /// A fixed window's units all expire as its window ends, as a lease asked for now would.
    pub(super) fn lasting(
        &self,
        account: &Account,
        limit: &Limit,
        now: Micros,
        round_trip: Micros,
    ) -> u64 {
        if limit.algorithm() == Algorithm::FixedWindow {
            account.held()
        } else {
            account.held_at(now.saturating_add(3 * round_trip))
        }
    }

    /// Whether checks of `account` come often enough that several would wait through one
    /// round trip to the global store; a quieter key's check, with no lease on its way, may as
    /// well ask and wait rather than be denied while one is fetched.
    pub(super) fn busy(&self, account: &Account, now: Micros) -> bool {
        let round_trip = self.round_trip.load(Ordering::Relaxed) as f64 / 1e6;
        account.demand.rate(now) * round_trip >= 2.0
    }

    /// Until when units leased at `sent` may be spent: a fixed window's until its window
    /// ends (measured from before the request, so never past the end), others' for the hold.
    pub(super) fn valid_until(&self, limit: &Limit, decision: &Decision, sent: Micros) -> Micros {
        if limit.algorithm() == Algorithm::FixedWindow {
            sent.saturating_add(decision.reset_after_micros())
        } else {
            sent.saturating_add(duration_to_micros(self.tuning.hold))
        }
    }
}

/// Whether a fixed window ends, as this node reckons it from `account`'s last answer, within
/// the next round trip: a lease asked for now would land in the old window, to expire at once.
pub(super) fn window_ending(
    account: &Account,
    limit: &Limit,
    now: Micros,
    round_trip: Micros,
) -> bool {
    if limit.algorithm() != Algorithm::FixedWindow {
        return false;
    }
    account.seen.is_some_and(|seen| {
        let ends = seen
            .received
            .saturating_add(seen.decision.reset_after_micros());
        now < ends && ends - now <= round_trip
    })
}
