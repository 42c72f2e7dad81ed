//! A check's outcome (allowed, delayed or denied, its status and its waits), as every form of
//! its answer states it: the full answer and the brief one.

use tollgate::policy::{Action, Reason};
use tollgate::problem::ProblemKind;
use tollgate::{Evaluation, Micros, Verdict};

/// A check's outcome, as every form of its answer states it.
pub(super) struct Outcome<'a> {
    pub(super) name: &'static str,
    pub(super) status: u16,
    /// Microseconds until the same check would be admitted (0 when admitted now; `None` for
    /// never).
    pub(super) retry: Option<Micros>,
    pub(super) delay: Micros,
    pub(super) detail: Option<&'a str>,
}

impl<'a> Outcome<'a> {
    pub(super) fn of_verdict(verdict: &Verdict) -> Self {
        let (name, status, retry, delay) = match verdict.outcome() {
            tollgate::Outcome::Allow => ("allow", 200, Some(0), 0),
            tollgate::Outcome::Delay(delay) => ("delay", 200, Some(0), as_micros(delay)),
            tollgate::Outcome::Deny { retry_after } => (
                "deny",
                // A verdict's denial is a limit's: answered as a refusal over a limit is.
                ProblemKind::of(Reason::OverLimit).status(),
                retry_after.map(as_micros),
                0,
            ),
        };
        Self {
            name,
            status,
            retry,
            delay,
            detail: None,
        }
    }

    pub(super) fn of_evaluation(evaluation: &'a Evaluation) -> Self {
        let (name, status, retry, delay, detail) = match &evaluation.action {
            Action::Allow => ("allow", 200, Some(0), 0, None),
            Action::Delay(delay) => ("delay", 200, Some(0), as_micros(*delay), None),
            Action::Refuse(refusal) => (
                "deny",
                refusal.status(),
                refusal.retry_after.map(as_micros),
                0,
                Some(refusal.detail.as_str()),
            ),
        };
        Self {
            name,
            status,
            retry,
            delay,
            detail,
        }
    }
}

fn as_micros(duration: std::time::Duration) -> Micros {
    Micros::try_from(duration.as_micros()).unwrap_or(Micros::MAX)
}
