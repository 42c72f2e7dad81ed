//! Leaky bucket: requests pour in, the bucket drains at the steady rate, and a request that
//! would overflow it is rejected. NGINX `limit_req` semantics.
//!
//! In [meter](crate::LeakyMode::Meter) mode an admitted request passes at once (NGINX
//! `nodelay`). In [queue](crate::LeakyMode::Queue) mode the first `delay_after` requests of a
//! burst pass at once and the rest are delayed until their turn at the steady rate, so what
//! leaves is smooth; past the burst, requests are rejected.
//!
//! The water is kept as time: how long the bucket needs to drain.

use super::{Transition, outstanding, owed_span};
use crate::algorithm::LeakyMode;
use crate::clock::Micros;
use crate::limit::Limit;

/// Leaky bucket.
#[derive(Debug, Clone, Copy)]
pub struct LeakyBucket;

/// A leaky bucket's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Microseconds the bucket needs to drain completely, as of `last`.
    pub water: Micros,
    /// The instant `water` was measured.
    pub last: Micros,
}

fn size(limit: &Limit) -> Micros {
    limit.capacity() * limit.interval()
}

impl Transition for LeakyBucket {
    type State = State;

    fn fresh(_limit: &Limit, now: Micros) -> State {
        State {
            water: 0,
            last: now,
        }
    }

    fn advance(state: &mut State, _limit: &Limit, now: Micros) {
        if now > state.last {
            state.water = state.water.saturating_sub(now - state.last);
            state.last = now;
        }
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.capacity() && state.water + cost * limit.interval() <= size(limit)
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        let poured = cost.saturating_mul(limit.interval());
        state.water = state.water.saturating_add(poured).min(owed_span(limit));
    }

    fn refund(state: &mut State, limit: &Limit, now: Micros, amount: u64, charged_at: Micros) {
        let poured = amount.min(limit.capacity() + limit.max_debt()) * limit.interval();
        state.water = state
            .water
            .saturating_sub(outstanding(poured, charged_at, now));
    }

    fn remaining(state: &State, limit: &Limit, _now: Micros) -> u64 {
        size(limit).saturating_sub(state.water) / limit.interval()
    }

    fn reset_after(state: &State, _limit: &Limit, now: Micros) -> Micros {
        (state.last + state.water).saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.capacity() {
            return None;
        }
        let overflow = (state.water + cost * limit.interval()).saturating_sub(size(limit));
        Some((state.last + overflow).saturating_sub(now))
    }

    fn delay(state: &State, limit: &Limit, now: Micros) -> Micros {
        match limit.mode() {
            LeakyMode::Meter => 0,
            LeakyMode::Queue { delay_after } => {
                let passes_at_once = delay_after * limit.interval();
                (state.last + state.water).saturating_sub(now + passes_at_once)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::limit::Limit;
    use crate::testing::Run;

    fn queue(burst: u64, delay_after: u64) -> Limit {
        Limit::builder("q", Algorithm::LeakyBucket, "10/s".parse().unwrap())
            .burst(burst)
            .mode(LeakyMode::Queue { delay_after })
            .build()
            .unwrap()
    }

    #[test]
    fn meter_rejects_when_full_and_drains_at_the_rate() {
        let mut run = Run::with_burst(Algorithm::LeakyBucket, "10/s", 5, 0);
        run.at(0).admits(5).then_denies(1);
        run.at(99_999).denies(1);
        run.at(100_000).admits(1).then_denies(1);
        assert_eq!(run.check(0).delay().as_micros(), 0, "a meter never delays");
    }

    #[test]
    fn queue_delays_a_burst_into_the_steady_rate_like_nginx() {
        // NGINX `rate=10r/s burst=4` (no nodelay): burst 5, delay_after 1.
        let mut run = Run::from_limit(queue(5, 1), 0);
        let delays: Vec<u128> = (0..5).map(|_| run.check(1).delay().as_micros()).collect();
        assert_eq!(delays, [0, 100_000, 200_000, 300_000, 400_000]);
        let rejected = run.check(1);
        assert!(!rejected.allowed());
        assert_eq!(rejected.retry_after().unwrap().as_micros(), 100_000);
    }

    #[test]
    fn queue_passes_delay_after_requests_at_once() {
        // NGINX `burst=5 delay=2`: burst 6, delay_after 3.
        let mut run = Run::from_limit(queue(6, 3), 0);
        let delays: Vec<u128> = (0..6).map(|_| run.check(1).delay().as_micros()).collect();
        assert_eq!(delays, [0, 0, 0, 100_000, 200_000, 300_000]);
        run.denies(1);
    }
}
