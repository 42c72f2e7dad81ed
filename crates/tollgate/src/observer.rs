//! The observer hook: what the limiter and its store layers report as they decide, for
//! metrics, top keys and logs to subscribe to, instead of living inside the limiter (as
//! governor's middleware trait does). Every method has a default that does nothing, so an
//! observer implements only what it watches.

use std::sync::Arc;
use std::time::Duration;

pub use crate::layer::StoreObserver;
use crate::policy::{Evaluation, Request};
use crate::store::StoreError;
use tollgate_core::check::{Check, Verdict};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

/// One limit that refused a request decided by policies.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// The policy whose limit refused.
    pub policy: &'a str,
    /// The limit's name as the policy file writes it.
    pub label: &'a str,
    /// The limit.
    pub limit: &'a Limit,
    /// The key it counted.
    pub key: &'a str,
    /// Its decision.
    pub decision: &'a Decision,
    /// When the store decided, in its own time.
    pub at: tollgate_core::clock::Micros,
}

/// Receives what happens on the decision path: what the store layers see (a
/// [`StoreObserver`]) and what the limiter decides. Calls are made inline, on the hot path: keep
/// them cheap and never block.
pub trait Observer: StoreObserver {
    /// A check with its own limits was decided after `took`.
    fn checked(&self, _check: &Check<'_>, _verdict: &Verdict, _took: Duration) {}
    /// A request was decided by the policies after `took`.
    fn evaluated(&self, _request: &Request<'_>, _evaluation: &Evaluation, _took: Duration) {}
    /// A limit refused a request decided by the policies (once per refusing limit).
    fn refused(&self, _refused: &Refused<'_>) {}
}

/// Several observers as one, called in order.
#[derive(Clone, Default)]
pub struct Observers(Vec<Arc<dyn Observer>>);

impl Observers {
    /// No observers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one.
    pub fn push(&mut self, observer: Arc<dyn Observer>) {
        self.0.push(observer);
    }

    /// Adds every one of `others`, after these.
    pub fn extend(&mut self, others: Observers) {
        self.0.extend(others.0);
    }
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Observers({})", self.0.len())
    }
}

impl StoreObserver for Observers {
    fn store_called(&self, took: Duration, error: Option<&StoreError>) {
        self.0.iter().for_each(|o| o.store_called(took, error));
    }
    fn store_skipped(&self) {
        self.0.iter().for_each(|o| o.store_skipped());
    }
    fn cache_hit(&self) {
        self.0.iter().for_each(|o| o.cache_hit());
    }
}

impl Observer for Observers {
    fn checked(&self, check: &Check<'_>, verdict: &Verdict, took: Duration) {
        self.0.iter().for_each(|o| o.checked(check, verdict, took));
    }
    fn evaluated(&self, request: &Request<'_>, evaluation: &Evaluation, took: Duration) {
        self.0
            .iter()
            .for_each(|o| o.evaluated(request, evaluation, took));
    }
    fn refused(&self, refused: &Refused<'_>) {
        self.0.iter().for_each(|o| o.refused(refused));
    }
}
