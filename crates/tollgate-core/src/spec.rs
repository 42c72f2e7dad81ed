//! A limit as configuration states it, before it has a name: the fields the policy file, the
//! check API's inline limits and the Envoy service's rules all give, read and built into a
//! [`Limit`] by one set of rules.

use std::sync::Arc;

use crate::algorithm::{Algorithm, LeakyMode};
use crate::calendar::CalendarSpec;
use crate::limit::{Limit, LimitError};
use crate::quota::Quota;
use crate::scope::Scope;

/// The parts of a limit other than its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The quota.
    pub quota: Quota,
    /// The burst of a rate algorithm; `None` for the quota count.
    pub burst: Option<u64>,
    /// The leaky bucket's mode; `None` for a meter.
    pub mode: Option<LeakyMode>,
    /// Units each node leases at a time from a shared store; 0 for none.
    pub lease: u64,
    /// Where the limit counts.
    pub scope: Scope,
    /// The most units a forced charge may owe beyond the capacity; `None` for the default
    /// (see [`crate::LimitBuilder::max_debt`]).
    pub max_debt: Option<u64>,
    /// A window algorithm forgets its debt when its window ends (see
    /// [`crate::LimitBuilder::debt_expires_with_window`]).
    pub debt_expires_with_window: bool,
    /// The calendar a fixed window counts by; `None` for windows aligned to the Unix epoch
    /// (see [`crate::LimitBuilder::calendar`]).
    pub calendar: Option<CalendarSpec>,
}

impl LimitSpec {
    /// A spec with the algorithm's defaults.
    pub fn new(algorithm: Algorithm, quota: Quota) -> Self {
        Self {
            algorithm,
            quota,
            burst: None,
            mode: None,
            lease: 0,
            scope: Scope::Region,
            max_debt: None,
            debt_expires_with_window: false,
            calendar: None,
        }
    }

    /// The limit named `name`, checked as a whole.
    pub fn build(&self, name: impl Into<Arc<str>>) -> Result<Limit, LimitError> {
        let mut builder = Limit::builder(name, self.algorithm, self.quota);
        if let Some(burst) = self.burst {
            builder = builder.burst(burst);
        }
        if let Some(mode) = self.mode {
            builder = builder.mode(mode);
        }
        if let Some(units) = self.max_debt {
            builder = builder.max_debt(units);
        }
        builder
            .lease(self.lease)
            .scope(self.scope)
            .debt_expires_with_window(self.debt_expires_with_window)
            .calendar(self.calendar.clone())
            .build()
    }
}

/// The leaky-bucket mode that `mode` (`meter` or `queue`) and `delay_after` name: `delay_after`
/// alone means a queue, a queue without it delays from the second request, and a meter has no
/// `delay_after`. The error says what is wrong, for the caller to place.
pub fn leaky_mode(
    mode: Option<&str>,
    delay_after: Option<u64>,
) -> Result<Option<LeakyMode>, String> {
    match (mode, delay_after) {
        (None, None) => Ok(None),
        (None | Some("queue"), delay_after) => Ok(Some(LeakyMode::Queue {
            delay_after: delay_after.unwrap_or(1),
        })),
        (Some("meter"), None) => Ok(Some(LeakyMode::Meter)),
        (Some("meter"), Some(_)) => {
            Err("delay_after applies only to mode queue, not meter".to_owned())
        }
        (Some(other), _) => Err(format!(
            "unknown leaky-bucket mode {other:?} (expected one of: meter, queue)"
        )),
    }
}

impl LimitError {
    /// The message without its `limit "name": ` prefix, for callers that name the limit their
    /// own way (a place in a file, a field of a request).
    pub fn detail(&self) -> String {
        let message = self.to_string();
        let prefix = match self.name() {
            Some(name) => format!("limit {name:?}: "),
            None => return message,
        };
        message
            .strip_prefix(&prefix)
            .map_or_else(|| message.clone(), str::to_owned)
    }

    fn name(&self) -> Option<&str> {
        match self {
            LimitError::ZeroQuota { name, .. }
            | LimitError::ZeroBurst { name }
            | LimitError::BurstNotApplicable { name, .. }
            | LimitError::ModeNotApplicable { name, .. }
            | LimitError::DelayAfterOutOfRange { name, .. }
            | LimitError::Overflow { name, .. }
            | LimitError::LogTooLarge { name }
            | LimitError::LeaseNotApplicable { name, .. }
            | LimitError::GlobalNotApplicable { name }
            | LimitError::CalendarNotApplicable { name, .. }
            | LimitError::Calendar { name, .. } => Some(name),
            LimitError::EmptyName => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_one_way() {
        assert_eq!(leaky_mode(None, None), Ok(None));
        assert_eq!(
            leaky_mode(None, Some(3)),
            Ok(Some(LeakyMode::Queue { delay_after: 3 }))
        );
        assert_eq!(
            leaky_mode(Some("queue"), None),
            Ok(Some(LeakyMode::Queue { delay_after: 1 }))
        );
        assert_eq!(leaky_mode(Some("meter"), None), Ok(Some(LeakyMode::Meter)));
        assert!(leaky_mode(Some("meter"), Some(2)).is_err());
        let unknown = leaky_mode(Some("drip"), None).unwrap_err();
        assert!(unknown.contains("\"drip\""), "{unknown}");
    }

    #[test]
    fn a_limit_errors_detail_drops_only_its_own_name() {
        let quota: Quota = "10/s".parse().unwrap();
        let spec = LimitSpec {
            burst: Some(0),
            ..LimitSpec::new(Algorithm::Gcra, quota)
        };
        let error = spec.build("odd: name").unwrap_err();
        assert_eq!(error.detail(), "the burst must be at least 1");
        assert_eq!(LimitError::EmptyName.detail(), "a limit needs a name");
    }

    #[test]
    fn a_spec_builds_the_limit_its_builder_would() {
        let quota: Quota = "10/m".parse().unwrap();
        let spec = LimitSpec {
            burst: Some(6),
            mode: Some(LeakyMode::Queue { delay_after: 2 }),
            ..LimitSpec::new(Algorithm::LeakyBucket, quota)
        };
        let built = spec.build("l").unwrap();
        let by_hand = Limit::builder("l", Algorithm::LeakyBucket, quota)
            .burst(6)
            .mode(LeakyMode::Queue { delay_after: 2 })
            .build()
            .unwrap();
        assert_eq!(built, by_hand);
    }
}
