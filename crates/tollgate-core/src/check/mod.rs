//! Checks (the question) and verdicts (the answer).
//!
//! A check is a list of (key, limit, cost) items decided all-or-nothing: if any limit denies,
//! nothing is counted anywhere. Several limits on one key (10/s and 100/min and 1000/h) is the
//! common case; several keys (per user and per IP) is the other.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::clock::Micros;
use crate::limit::Limit;

mod verdict;

pub use crate::bounds::{MAX_COST, MAX_ITEMS, MAX_KEY_BYTES};
pub use verdict::{Outcome, Verdict};

/// One (key, limit, cost) triple of a check.
#[derive(Debug, Clone)]
pub struct Item<'a> {
    /// Who the limit counts for, such as `user:42` or `ip:203.0.113.7`.
    pub key: Cow<'a, str>,
    /// The limit.
    pub limit: &'a Limit,
    /// Units this request takes from the limit; 0 looks without counting.
    pub cost: u64,
}

/// The question: a list of (key, limit, cost) items, decided all-or-nothing.
#[derive(Debug, Clone)]
pub struct Check<'a> {
    cost: u64,
    items: SmallVec<[Item<'a>; 4]>,
    /// What the check is for, as metrics and logs name it (a policy and a limit, or Envoy's
    /// domain and rule); checks of limits given directly have none.
    labels: Option<(&'a str, &'a str)>,
    /// Decided by the store itself, never from a denial remembered nearby (see
    /// [`exact`](Check::exact)).
    exact: bool,
}

/// Why a check cannot be decided as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// Too many items.
    #[error("a check may hold at most {MAX_ITEMS} limits, this one holds {0}")]
    TooManyItems(usize),
    /// A cost above [`MAX_COST`].
    #[error(
        "item {index} (key {key:?}, limit {limit:?}): cost {cost} is above the maximum of {MAX_COST}"
    )]
    CostTooLarge {
        /// Position of the item in the check.
        index: usize,
        /// The item's key (cut to 64 bytes).
        key: String,
        /// The item's limit.
        limit: String,
        /// The cost given.
        cost: u64,
    },
    /// An adjustment list that does not match the check's items.
    #[error("{adjustments} adjustments were given for a check of {items} items")]
    AdjustmentCount {
        /// Items in the check.
        items: usize,
        /// Adjustments given.
        adjustments: usize,
    },
    /// An empty key.
    #[error("item {index} (limit {limit:?}): the key is empty")]
    EmptyKey {
        /// Position of the item in the check.
        index: usize,
        /// The item's limit.
        limit: String,
    },
    /// Two items on one key name limits of the same name that differ in algorithm, quota,
    /// burst or mode: one name stands for one limit, so such a check is a mistake.
    #[error(
        "items {first} and {second} (key {key:?}): two different limits are both named {limit:?} ({first_limit} and {second_limit}); give them different names"
    )]
    ConflictingLimits {
        /// Position of the first item.
        first: usize,
        /// Position of the second item.
        second: usize,
        /// The key (cut to 64 bytes).
        key: String,
        /// The name both limits carry.
        limit: String,
        /// The first limit, as written.
        first_limit: String,
        /// The second limit, as written.
        second_limit: String,
    },
    /// A key above [`MAX_KEY_BYTES`].
    #[error(
        "item {index} (limit {limit:?}): the key is {len} bytes long, the maximum is {MAX_KEY_BYTES}"
    )]
    KeyTooLong {
        /// Position of the item in the check.
        index: usize,
        /// The item's limit.
        limit: String,
        /// The key's length.
        len: usize,
    },
    /// A count of more counters than [`MAX_COUNTERS`](crate::bounds::MAX_COUNTERS).
    #[error(
        "a count may hold at most {max} counters, this one holds {0}",
        max = crate::bounds::MAX_COUNTERS
    )]
    TooManyCounters(usize),
    /// A counter key that is empty or above
    /// [`MAX_COUNTER_KEY_BYTES`](crate::bounds::MAX_COUNTER_KEY_BYTES).
    #[error(
        "counter {index}: the key is {len} bytes long, it must be 1 to {max} bytes",
        max = crate::bounds::MAX_COUNTER_KEY_BYTES
    )]
    CounterKeyLength {
        /// Position of the counter in the count.
        index: usize,
        /// The key's length.
        len: usize,
    },
    /// A counter of a window of no length.
    #[error("counter {index}: the window is 0 seconds long")]
    ZeroWindow {
        /// Position of the counter in the count.
        index: usize,
    },
}

impl<'a> Check<'a> {
    /// An empty check whose items cost `cost` unless given their own.
    pub fn new(cost: u64) -> Self {
        Self {
            cost,
            items: SmallVec::new(),
            labels: None,
            exact: false,
        }
    }

    /// Asks the store itself, never an over-limit cache that remembers a recent denial: for a
    /// caller that reads what is left from a denial (a quota service taking the rest of a
    /// slot), where a remembered denial would say nothing is.
    pub fn exact(mut self) -> Self {
        self.exact = true;
        self
    }

    /// Whether the check is [`exact`](Self::exact).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Names what the check is for: `policy` and `limit` as metrics and observers report it
    /// (Envoy's rate limit service names its domain and rule), from configuration, never from
    /// what a client sends, so that their number stays bounded.
    pub fn labelled(mut self, policy: &'a str, limit: &'a str) -> Self {
        self.labels = Some((policy, limit));
        self
    }

    /// The policy and limit the check is for, if it was [`labelled`](Self::labelled).
    pub fn labels(&self) -> Option<(&'a str, &'a str)> {
        self.labels
    }

    /// A check of one limit on one key, at a cost of 1.
    pub fn one(key: impl Into<Cow<'a, str>>, limit: &'a Limit) -> Self {
        Self::new(1).limit(key, limit)
    }

    /// Adds `limit` on `key` at the check's cost.
    pub fn limit(mut self, key: impl Into<Cow<'a, str>>, limit: &'a Limit) -> Self {
        self.push(key, limit, self.cost);
        self
    }

    /// Adds `limit` on `key` at its own cost.
    pub fn limit_with_cost(
        mut self,
        key: impl Into<Cow<'a, str>>,
        limit: &'a Limit,
        cost: u64,
    ) -> Self {
        self.push(key, limit, cost);
        self
    }

    /// Adds an item in place.
    pub fn push(&mut self, key: impl Into<Cow<'a, str>>, limit: &'a Limit, cost: u64) {
        self.items.push(Item {
            key: key.into(),
            limit,
            cost,
        });
    }

    /// The check's default cost.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The items, in the order they were added; a verdict's decisions follow the same order.
    pub fn items(&self) -> &[Item<'a>] {
        &self.items
    }

    /// Whether the check has no items (it is then always allowed).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// One refund per item, of what it took when it was admitted at `charged_at`: what giving
    /// a whole check back takes.
    pub fn refunds_at(&self, charged_at: Micros) -> SmallVec<[crate::Adjustment; 4]> {
        let refund = crate::Adjustment::Refund { charged_at };
        self.items.iter().map(|_| refund).collect()
    }

    /// Validates the check and that `adjustments` holds one adjustment per item, as a
    /// refund or charge needs.
    pub fn validate_adjustments(
        &self,
        adjustments: &[crate::Adjustment],
    ) -> Result<(), CheckError> {
        self.validate()?;
        if adjustments.len() != self.items.len() {
            return Err(CheckError::AdjustmentCount {
                items: self.items.len(),
                adjustments: adjustments.len(),
            });
        }
        Ok(())
    }

    /// The adjustment of a gathered entry. Stores gather a check's items by (key, limit): a pair
    /// listed twice is one entry whose cost is the sum of its listings' costs, and the
    /// adjustment of its first listing stands for it. `positions[i]` is the entry item `i` was
    /// gathered into; `adjustments` holds one adjustment per item.
    pub fn gathered_adjustment<P: PartialEq + Copy>(
        positions: &[P],
        entry: P,
        adjustments: &[crate::Adjustment],
    ) -> crate::Adjustment {
        let first = positions.iter().position(|&p| p == entry).unwrap_or(0);
        adjustments[first]
    }

    /// Checks the sizes that come from outside (item count, key length, cost), and that one
    /// name on one key stands for one limit.
    #[inline]
    pub fn validate(&self) -> Result<(), CheckError> {
        let items = self.items.as_slice();
        let sound = |item: &Item<'_>| {
            (1..=MAX_KEY_BYTES).contains(&item.key.len()) && item.cost <= MAX_COST
        };
        match items {
            // The common check of one limit: no names to compare.
            [item] if sound(item) => Ok(()),
            _ if items.len() <= MAX_ITEMS && items.iter().all(sound) => {
                self.names_are_unambiguous()
            }
            _ => self.explain(),
        }
    }

    fn names_are_unambiguous(&self) -> Result<(), CheckError> {
        for (second, later) in self.items.iter().enumerate().skip(1) {
            for (first, earlier) in self.items[..second].iter().enumerate() {
                if earlier.limit.name() == later.limit.name()
                    && earlier.limit.state_id() != later.limit.state_id()
                    && earlier.key == later.key
                {
                    return Err(CheckError::ConflictingLimits {
                        first,
                        second,
                        key: later.key.chars().take(64).collect(),
                        limit: later.limit.name().to_owned(),
                        first_limit: earlier.limit.to_string(),
                        second_limit: later.limit.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Finds the first problem `validate` saw and says what and where.
    #[cold]
    fn explain(&self) -> Result<(), CheckError> {
        if self.items.len() > MAX_ITEMS {
            return Err(CheckError::TooManyItems(self.items.len()));
        }
        for (index, item) in self.items.iter().enumerate() {
            let limit = || item.limit.name().to_owned();
            if item.key.is_empty() {
                return Err(CheckError::EmptyKey {
                    index,
                    limit: limit(),
                });
            }
            if item.key.len() > MAX_KEY_BYTES {
                return Err(CheckError::KeyTooLong {
                    index,
                    limit: limit(),
                    len: item.key.len(),
                });
            }
            if item.cost > MAX_COST {
                return Err(CheckError::CostTooLarge {
                    index,
                    key: item.key.chars().take(64).collect(),
                    limit: limit(),
                    cost: item.cost,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_item_and_the_problem() {
        let limit = Limit::new("per-user", crate::Algorithm::Gcra, "1/s".parse().unwrap()).unwrap();
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        let cases = [
            (
                Check::new(1).limit("", &limit),
                "item 0 (limit \"per-user\"): the key is empty",
            ),
            (
                Check::new(1).limit("a", &limit).limit(long, &limit),
                "item 1 (limit \"per-user\"): the key is 1025 bytes long",
            ),
            (
                Check::new(MAX_COST + 1).limit("a", &limit),
                "cost 1099511627777 is above the maximum",
            ),
        ];
        for (check, message) in cases {
            let error = check.validate().unwrap_err().to_string();
            assert!(error.contains(message), "{error}");
        }
        let mut many = Check::new(1);
        for _ in 0..=MAX_ITEMS {
            many.push("k", &limit, 1);
        }
        assert_eq!(
            many.validate(),
            Err(CheckError::TooManyItems(MAX_ITEMS + 1))
        );
    }

    #[test]
    fn two_different_limits_of_one_name_on_one_key_are_refused() {
        let gcra = Limit::new("hourly", crate::Algorithm::Gcra, "1/h".parse().unwrap()).unwrap();
        let window = Limit::new(
            "hourly",
            crate::Algorithm::FixedWindow,
            "1/h".parse().unwrap(),
        )
        .unwrap();
        let error = Check::new(1)
            .limit("user:1", &gcra)
            .limit("user:1", &window)
            .validate()
            .unwrap_err();
        assert!(
            error.to_string().contains(
                "items 0 and 1 (key \"user:1\"): two different limits are both named \"hourly\""
            ),
            "{error}"
        );
        // The same limit twice is one limit at the summed cost; other keys are other states.
        assert!(
            Check::new(1)
                .limit("user:1", &gcra)
                .limit("user:1", &gcra)
                .validate()
                .is_ok()
        );
        assert!(
            Check::new(1)
                .limit("user:1", &gcra)
                .limit("user:2", &window)
                .validate()
                .is_ok()
        );
    }
}
