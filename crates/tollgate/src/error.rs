//! The library's error type.

use std::time::Duration;

use crate::refusal::{Reason, Refusal};
use crate::store::StoreError;
use tollgate_core::check::CheckError;
use tollgate_core::limit::LimitError;
use tollgate_core::quota::QuotaError;

/// Anything that can keep the library from answering.
///
/// A denial is not an error: it is a [`Verdict`](crate::Verdict). An error means no decision
/// could be made, and the caller's failure policy decides what happens next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A quota could not be parsed.
    #[error(transparent)]
    Quota(#[from] QuotaError),
    /// A limit is invalid.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// A check is malformed.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The store could not decide.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A request named a policy that is not configured.
    #[error("no policy is named {0:?}")]
    UnknownPolicy(String),
    /// A policy counts by the client's address (or falls back to it for a missing identity)
    /// and the request carries none: decided, it would put every client in one bucket.
    #[error(
        "policy {0:?} counts by the client's address and the request carries none: serve with axum's ConnectInfo (into_make_service_with_connect_info::<SocketAddr>()), insert a tollgate_tower::PeerAddr, or give attributes.ip"
    )]
    NoClientAddress(String),
    /// A receipt of charges that the request, planned again, no longer takes: the policies
    /// changed since. Nothing was given back.
    #[error(
        "the charge took {charged} charges where the policies in force take {now}: they changed since the check, and nothing was given back"
    )]
    ChargesChanged {
        /// Charges the receipt names.
        charged: usize,
        /// Charges the request takes now.
        now: usize,
    },
}

impl Error {
    /// The refusal of a request this error kept from being decided, for a frontend that must
    /// answer it all the same: the operator's mistake where a policy is keyed by an address the
    /// server does not give (`Misconfigured`), else a limiter that cannot decide
    /// (`Unavailable`, to be asked again in a second).
    pub fn refusal(&self) -> Refusal {
        match self {
            Error::NoClientAddress(_) => Refusal {
                reason: Reason::Misconfigured,
                retry_after: None,
                detail: format!("rate limiting is misconfigured: {self}"),
            },
            _ => Refusal {
                reason: Reason::Unavailable,
                retry_after: Some(Duration::from_secs(1)),
                detail: format!("the rate limiter cannot decide: {self}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_refused_as_the_operators_mistake_or_as_a_limiter_that_cannot_decide() {
        let misconfigured = Error::NoClientAddress("per-ip".to_owned()).refusal();
        assert_eq!(misconfigured.reason, Reason::Misconfigured);
        assert_eq!(misconfigured.retry_after, None);
        assert!(
            misconfigured.detail.contains("\"per-ip\""),
            "{misconfigured:?}"
        );
        let down = Error::Store(StoreError::Failed("connection refused".to_owned())).refusal();
        assert_eq!(down.reason, Reason::Unavailable);
        assert_eq!(down.retry_after, Some(Duration::from_secs(1)));
        assert!(down.detail.contains("connection refused"), "{down:?}");
    }
}
