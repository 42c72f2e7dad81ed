//! The six algorithms, each a pure state transition in its own file.
//!
//! An algorithm knows nothing of stores, clocks or keys: it takes a state, the time and a
//! cost, and returns a [`Decision`] and the next state. Every store runs the same transitions
//! (the memory store here in Rust, the Redis store in Lua), so their answers never fork.
//!
//! Each algorithm implements [`Transition`] as a handful of small pieces; [`Transition::step`]
//! composes them the same way for all six: bring the state forward to `now`, admit if the cost
//! fits, consume, and describe the result.

pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use leaky_bucket::LeakyBucket;
pub use sliding_log::SlidingLog;
pub use sliding_window::SlidingWindow;
pub use token_bucket::TokenBucket;

/// Which algorithm enforces a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Counts per aligned window; cheap, but admits up to twice the quota across a boundary.
    FixedWindow,
    /// Remembers every admitted request; exact, memory grows with the quota.
    SlidingLog,
    /// Weights the previous window's count by its overlap; cheap and close to exact.
    SlidingWindow,
    /// Tokens refill at a steady rate up to a capacity; allows bursts.
    TokenBucket,
    /// Drains at a steady rate; rejects when full (meter) or delays (queue).
    LeakyBucket,
    /// Generic cell rate algorithm: one timestamp per key, exact rate with a burst.
    Gcra,
}

impl Algorithm {
    /// All six, in a fixed order.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
    ];

    /// The name used in configuration and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether the algorithm enforces a steady rate with a burst (as opposed to a count per window).
    pub fn is_rate(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Gcra
        )
    }

    /// Whether the algorithm is exact: never admits more than its quota allows. Only the sliding
    /// window counter is approximate.
    pub fn is_exact(self) -> bool {
        self != Algorithm::SlidingWindow
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An algorithm name that is not one of the six.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown algorithm {0:?} (expected one of: fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra)"
)]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.as_str() == text)
            .ok_or_else(|| UnknownAlgorithm(text.to_owned()))
    }
}

/// How a leaky bucket treats a request that finds water in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LeakyMode {
    /// Admit at once while the bucket has room, reject when full (NGINX `nodelay`).
    #[default]
    Meter,
    /// Admit the first `delay_after` requests of a burst at once, delay the rest so that they
    /// leave at the steady rate, and reject past the burst (NGINX `burst=` with `delay=`:
    /// NGINX `burst=B delay=D` is `burst: B+1, delay_after: D+1`).
    Queue {
        /// How many back-to-back requests pass without delay; at least 1.
        delay_after: u64,
    },
}

/// One algorithm as a pure state transition, split into the pieces every store runs in the
/// same order. The Lua scripts of the Redis store implement the same pieces, line for line.
pub trait Transition {
    /// The per-key state.
    type State: Clone + fmt::Debug + PartialEq;

    /// The state of a key nobody has used yet.
    fn fresh(limit: &Limit, now: Micros) -> Self::State;

    /// Brings a stored state forward to `now` (refills, drains, rolls windows).
    fn advance(state: &Self::State, limit: &Limit, now: Micros) -> Self::State;

    /// Whether a request of `cost` fits now. Never true for a cost above the capacity.
    fn admits(state: &Self::State, limit: &Limit, now: Micros, cost: u64) -> bool;

    /// Takes `cost` unconditionally. The debt a forced charge can build is capped at one
    /// capacity beyond empty.
    fn consume(state: &mut Self::State, limit: &Limit, now: Micros, cost: u64);

    /// Gives back `amount` taken earlier, never beyond the full capacity.
    fn refund(state: &mut Self::State, limit: &Limit, now: Micros, amount: u64);

    /// How much is left now.
    fn remaining(state: &Self::State, limit: &Limit, now: Micros) -> u64;

    /// Time until the state is as good as fresh.
    fn reset_after(state: &Self::State, limit: &Limit, now: Micros) -> Micros;

    /// Time until a request of `cost` is admitted, or `None` if it never will be.
    fn wait_for(state: &Self::State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros>;

    /// How long an admitted request waits before it proceeds (leaky-bucket queue mode).
    fn delay(_state: &Self::State, _limit: &Limit, _now: Micros) -> Micros {
        0
    }

    /// Decides a request of `cost` at `now`: the decision and the state to store if the check
    /// as a whole is admitted.
    fn step(
        state: Option<&Self::State>,
        limit: &Limit,
        now: Micros,
        cost: u64,
    ) -> (Decision, Self::State) {
        let mut state = current::<Self>(state, limit, now);
        let allowed = Self::admits(&state, limit, now, cost);
        if allowed {
            Self::consume(&mut state, limit, now, cost);
        }
        let decision = describe::<Self>(&state, limit, now, cost, allowed);
        (decision, state)
    }

    /// Describes what a request of `cost` would get without counting it.
    fn peek(state: Option<&Self::State>, limit: &Limit, now: Micros, cost: u64) -> Decision {
        let state = current::<Self>(state, limit, now);
        let allowed = Self::admits(&state, limit, now, cost);
        describe::<Self>(&state, limit, now, cost, allowed)
    }
}

fn current<T: Transition + ?Sized>(
    state: Option<&T::State>,
    limit: &Limit,
    now: Micros,
) -> T::State {
    match state {
        Some(state) => T::advance(state, limit, now),
        None => T::fresh(limit, now),
    }
}

fn describe<T: Transition + ?Sized>(
    state: &T::State,
    limit: &Limit,
    now: Micros,
    cost: u64,
    allowed: bool,
) -> Decision {
    Decision {
        allowed,
        limit: limit.capacity(),
        remaining: T::remaining(state, limit, now),
        reset_after: Duration::from_micros(T::reset_after(state, limit, now)),
        retry_after: T::wait_for(state, limit, now, cost).map(Duration::from_micros),
        delay: Duration::from_micros(if allowed {
            T::delay(state, limit, now)
        } else {
            0
        }),
    }
}

/// The state of one key under one limit, for any algorithm.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Fixed window state.
    FixedWindow(fixed_window::State),
    /// Sliding log state (boxed: it is the one that grows).
    SlidingLog(Box<sliding_log::State>),
    /// Sliding window counter state.
    SlidingWindow(sliding_window::State),
    /// Token bucket state.
    TokenBucket(token_bucket::State),
    /// Leaky bucket state.
    LeakyBucket(leaky_bucket::State),
    /// GCRA state.
    Gcra(gcra::State),
}

/// Runs `$body` with `$alg` bound to the algorithm's type and `$state` to the typed state (or
/// `None` when the stored state belongs to another algorithm, which then starts fresh).
macro_rules! with_algorithm {
    ($limit:expr, $stored:expr, |$alg:ident, $state:ident, $wrap:ident| $body:expr) => {
        match $limit.algorithm() {
            Algorithm::FixedWindow => {
                type $alg = FixedWindow;
                let $state = match $stored {
                    Some(State::FixedWindow(s)) => Some(s),
                    _ => None,
                };
                let $wrap = State::FixedWindow;
                $body
            }
            Algorithm::SlidingLog => {
                type $alg = SlidingLog;
                let $state = match $stored {
                    Some(State::SlidingLog(s)) => Some(&**s),
                    _ => None,
                };
                let $wrap = |s| State::SlidingLog(Box::new(s));
                $body
            }
            Algorithm::SlidingWindow => {
                type $alg = SlidingWindow;
                let $state = match $stored {
                    Some(State::SlidingWindow(s)) => Some(s),
                    _ => None,
                };
                let $wrap = State::SlidingWindow;
                $body
            }
            Algorithm::TokenBucket => {
                type $alg = TokenBucket;
                let $state = match $stored {
                    Some(State::TokenBucket(s)) => Some(s),
                    _ => None,
                };
                let $wrap = State::TokenBucket;
                $body
            }
            Algorithm::LeakyBucket => {
                type $alg = LeakyBucket;
                let $state = match $stored {
                    Some(State::LeakyBucket(s)) => Some(s),
                    _ => None,
                };
                let $wrap = State::LeakyBucket;
                $body
            }
            Algorithm::Gcra => {
                type $alg = Gcra;
                let $state = match $stored {
                    Some(State::Gcra(s)) => Some(s),
                    _ => None,
                };
                let $wrap = State::Gcra;
                $body
            }
        }
    };
}

/// Decides a request of `cost` under `limit`: the decision and the state to store if admitted.
pub fn step(state: Option<&State>, limit: &Limit, now: Micros, cost: u64) -> (Decision, State) {
    with_algorithm!(limit, state, |A, typed, wrap| {
        let (decision, next) = A::step(typed, limit, now, cost);
        (decision, wrap(next))
    })
}

/// Describes what a request of `cost` would get under `limit`, without counting it.
pub fn peek(state: Option<&State>, limit: &Limit, now: Micros, cost: u64) -> Decision {
    with_algorithm!(limit, state, |A, typed, _wrap| A::peek(
        typed, limit, now, cost
    ))
}

/// How a stored state changes outside a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    /// Give back what an earlier check took (a request that failed upstream).
    Refund,
    /// Take the amount unconditionally (the real cost turned out higher than charged).
    Charge,
}

/// Applies an adjustment of `amount` at `now` and returns the new state and the time until it
/// is as good as fresh.
pub fn adjust(
    state: Option<&State>,
    limit: &Limit,
    now: Micros,
    adjustment: Adjustment,
    amount: u64,
) -> (State, Micros) {
    with_algorithm!(limit, state, |A, typed, wrap| {
        let mut next = current::<A>(typed, limit, now);
        match adjustment {
            Adjustment::Refund => A::refund(&mut next, limit, now, amount),
            Adjustment::Charge => A::consume(&mut next, limit, now, amount),
        }
        let reset_after = A::reset_after(&next, limit, now);
        (wrap(next), reset_after)
    })
}

/// The start of the window of length `period` that holds `now`, windows being aligned to the
/// Unix epoch so that every node and every store agrees on them.
pub(crate) fn window_start(now: Micros, period: Micros) -> Micros {
    now - now % period
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.as_str().parse::<Algorithm>(), Ok(algorithm));
        }
        let error = "tokenbucket".parse::<Algorithm>().unwrap_err().to_string();
        assert!(
            error.contains("unknown algorithm \"tokenbucket\" (expected one of"),
            "{error}"
        );
    }

    #[test]
    fn a_state_of_another_algorithm_starts_fresh() {
        let quota = "2/s".parse().unwrap();
        let gcra = Limit::new("x", Algorithm::Gcra, quota).unwrap();
        let window = Limit::new("x", Algorithm::FixedWindow, quota).unwrap();
        let (_, window_state) = step(None, &window, 0, 2);
        let (decision, _) = step(Some(&window_state), &gcra, 0, 2);
        assert!(decision.allowed);
    }
}
