//! Token bucket: a bucket of `burst` tokens that refills one token every interval.
//!
//! Allows a burst up to the capacity, then the steady rate. Refill is counted in whole tokens
//! with the partial progress kept exactly, so the Rust and Lua versions agree to the microsecond.

use super::{Transition, outstanding};
use crate::clock::Micros;
use crate::limit::Limit;

/// Token bucket.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket;

/// A token bucket's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Tokens in the bucket; negative after a forced charge (debt).
    pub tokens: i64,
    /// The instant the count of tokens is accurate for; refill progress runs from here.
    pub last: Micros,
}

/// The capacity as a signed count of tokens: exact, since a limit's burst times its interval
/// stays below 2^50.
fn capacity(limit: &Limit) -> i64 {
    limit.capacity() as i64
}

impl Transition for TokenBucket {
    type State = State;

    fn fresh(limit: &Limit, now: Micros) -> State {
        State {
            tokens: capacity(limit),
            last: now,
        }
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        if now <= state.last {
            return;
        }
        let full = capacity(limit);
        let added = i64::try_from((now - state.last) / limit.interval()).unwrap_or(i64::MAX);
        let tokens = state.tokens.saturating_add(added);
        *state = if tokens >= full {
            State {
                tokens: full,
                last: now,
            }
        } else {
            State {
                tokens,
                last: state.last + added as u64 * limit.interval(),
            }
        };
    }

    fn admits(state: &State, limit: &Limit, _now: Micros, cost: u64) -> bool {
        cost <= limit.capacity() && state.tokens >= cost as i64
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        state.tokens = state
            .tokens
            .saturating_sub_unsigned(cost)
            .max(-(limit.max_debt() as i64));
    }

    fn refund(state: &mut State, limit: &Limit, now: Micros, amount: u64, charged_at: Micros) {
        // Seen as credit (whole tokens plus the refill progress since `last`), the bucket is a
        // capped continuous level like GCRA's, so the refund is given back on that scale.
        let interval = limit.interval() as i64;
        let poured = amount.min(limit.capacity() + limit.max_debt()) * limit.interval();
        let back = outstanding(poured, charged_at, now) as i64;
        let progress = now.saturating_sub(state.last) as i64;
        let credit = (state.tokens * interval + progress + back).min(capacity(limit) * interval);
        let tokens = credit.div_euclid(interval);
        *state = if tokens == capacity(limit) {
            State { tokens, last: now }
        } else {
            State {
                tokens,
                last: now - credit.rem_euclid(interval) as u64,
            }
        };
    }

    fn remaining(state: &State, _limit: &Limit, _now: Micros) -> u64 {
        state.tokens.max(0) as u64
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let missing = capacity(limit) - state.tokens;
        if missing <= 0 {
            0
        } else {
            (state.last + missing as u64 * limit.interval()).saturating_sub(now)
        }
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        if cost > limit.capacity() {
            return None;
        }
        let missing = cost as i64 - state.tokens;
        if missing <= 0 {
            Some(0)
        } else {
            Some((state.last + missing as u64 * limit.interval()).saturating_sub(now))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn spends_the_burst_then_follows_the_refill_rate() {
        let mut run = Run::with_burst(Algorithm::TokenBucket, "10/s", 20, 0);
        run.at(0).admits(20).then_denies(1);
        for tick in 1..=30 {
            run.at(tick * 100_000).admits(1).then_denies(1);
        }
    }

    #[test]
    fn keeps_partial_refill_progress() {
        let mut run = Run::new(Algorithm::TokenBucket, "10/s", 0);
        run.at(0).admits(10);
        run.at(150_000).admits(1).then_denies(1);
        let denied = run.check(1);
        assert_eq!(
            denied.retry_after().unwrap().as_micros(),
            50_000,
            "half an interval already passed"
        );
        run.at(199_999).denies(1);
        run.at(200_000).admits(1);
    }

    #[test]
    fn debt_from_a_forced_charge_delays_the_next_request() {
        let limit = crate::testing::limit(Algorithm::TokenBucket, "10/s");
        let mut state = TokenBucket::fresh(&limit, 0);
        TokenBucket::consume(&mut state, &limit, 0, 15);
        assert_eq!(state.tokens, -5);
        assert_eq!(TokenBucket::wait_for(&state, &limit, 0, 1), Some(600_000));
        TokenBucket::consume(&mut state, &limit, 0, 1_000);
        assert_eq!(state.tokens, -1_005, "what was used is owed in full");
        assert_eq!(
            TokenBucket::wait_for(&state, &limit, 0, 1),
            Some(100_600_000)
        );
        let bounded = Limit::builder("b", Algorithm::TokenBucket, "10/s".parse().unwrap())
            .max_debt(10)
            .build()
            .unwrap();
        let mut state = TokenBucket::fresh(&bounded, 0);
        TokenBucket::consume(&mut state, &bounded, 0, 1_000);
        assert_eq!(state.tokens, -10, "debt is capped at the limit's bound");
    }
}
