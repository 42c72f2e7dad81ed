//! Helpers for the unit tests: drive one limit through time and assert what it admits.

use crate::algorithm::{self, Algorithm, State};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

pub(crate) fn limit(algorithm: Algorithm, quota: &str) -> Limit {
    Limit::new("test", algorithm, quota.parse().expect("valid quota")).expect("valid limit")
}

/// One limit on one key, advanced by hand.
pub(crate) struct Run {
    limit: Limit,
    state: Option<State>,
    now: Micros,
}

impl Run {
    pub(crate) fn new(algorithm: Algorithm, quota: &str, now: Micros) -> Self {
        Self::from_limit(limit(algorithm, quota), now)
    }

    pub(crate) fn with_burst(algorithm: Algorithm, quota: &str, burst: u64, now: Micros) -> Self {
        let limit = Limit::builder("test", algorithm, quota.parse().expect("valid quota"))
            .burst(burst)
            .build()
            .expect("valid limit");
        Self::from_limit(limit, now)
    }

    pub(crate) fn from_limit(limit: Limit, now: Micros) -> Self {
        Self {
            limit,
            state: None,
            now,
        }
    }

    pub(crate) fn at(&mut self, now: Micros) -> &mut Self {
        self.now = now;
        self
    }

    /// Checks `cost` now, keeping the new state if admitted.
    pub(crate) fn check(&mut self, cost: u64) -> Decision {
        let (decision, state) = algorithm::step(self.state.as_ref(), &self.limit, self.now, cost);
        if decision.allowed() {
            self.state = Some(state);
        }
        decision
    }

    pub(crate) fn admits(&mut self, count: usize) -> &mut Self {
        for n in 0..count {
            let decision = self.check(1);
            assert!(
                decision.allowed(),
                "request {} of {count} at {}us was denied: {decision:?}",
                n + 1,
                self.now
            );
        }
        self
    }

    pub(crate) fn denies(&mut self, count: usize) -> &mut Self {
        for _ in 0..count {
            let decision = self.check(1);
            assert!(
                !decision.allowed(),
                "a request at {}us was admitted: {decision:?}",
                self.now
            );
        }
        self
    }

    pub(crate) fn then_denies(&mut self, count: usize) -> &mut Self {
        self.denies(count)
    }
}
