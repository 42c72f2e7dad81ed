//! What the engine tells Envoy: assignments (a token bucket for a share, a blanket rule
//! otherwise) and abandonments, sent to each stream in one message.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::bucket::{BucketName, Shared, Target};
use super::engine::Rlqs;
use super::share;
use super::state::{Envoy, Outgoing, State};
use crate::rls::proto::quota::RateLimitQuotaResponse;
use crate::rls::proto::quota::rate_limit_quota_response::BucketAction;
use crate::rls::proto::quota::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::rls::proto::types::RateLimitStrategy;
use crate::rls::proto::types::rate_limit_strategy::{BlanketRule, Strategy};

impl Rlqs {
    /// Gives `envoy` a share of `share` units: the action that tells it.
    pub(super) fn assign(
        &self,
        envoy: &mut Envoy,
        name: &BucketName,
        shared: &Shared,
        share: u64,
    ) -> BucketAction {
        envoy.share = share;
        envoy.assigned = true;
        assignment(name, strategy_of(shared, share), self.ttl())
    }

    /// Sends each stream its actions in one message. A stream whose queue is full no longer
    /// reads what it is assigned: it is dropped (its shares go at the next turn).
    pub(super) fn send(&self, state: &mut State, outgoing: HashMap<u64, Outgoing>) {
        let mut stuck = Vec::new();
        for (stream, actions) in outgoing {
            let Some(open) = state.streams.get(&stream) else {
                continue;
            };
            let (mut assigned, mut abandoned) = (0, 0);
            for (_, action) in &actions {
                match action.bucket_action {
                    Some(Action::AbandonAction(_)) => abandoned += 1,
                    _ => assigned += 1,
                }
            }
            let message = RateLimitQuotaResponse {
                bucket_action: actions.into_iter().map(|(_, action)| action).collect(),
            };
            if open.outbox.try_send(Ok(message)).is_err() {
                stuck.push(stream);
                continue;
            }
            self.counters
                .assignments
                .fetch_add(assigned, Ordering::Relaxed);
            self.counters
                .abandoned
                .fetch_add(abandoned, Ordering::Relaxed);
        }
        for stream in stuck {
            self.counters
                .streams_dropped
                .fetch_add(1, Ordering::Relaxed);
            super::streams::drop_stream(state, stream);
        }
    }
}

/// A blanket rule's strategy: every request denied, or every request allowed.
pub(super) fn blanket(target: &Target) -> Strategy {
    let rule = match target {
        Target::DenyAll => BlanketRule::DenyAll,
        _ => BlanketRule::AllowAll,
    };
    Strategy::BlanketRule(rule as i32)
}

/// A share as Envoy enforces it: a token bucket, or every request denied for a share of none.
fn strategy_of(shared: &Shared, share: u64) -> Strategy {
    if share == 0 {
        return Strategy::BlanketRule(BlanketRule::DenyAll as i32);
    }
    Strategy::TokenBucket(share::token_bucket(share, shared.period))
}

/// An assignment of `strategy` to the bucket `name`, in force for `ttl`.
pub(super) fn assignment(name: &BucketName, strategy: Strategy, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(name.id.clone()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: prost_types::Duration::try_from(ttl).ok(),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

/// Tells Envoy the bucket `name` is no longer assigned from here.
pub(super) fn abandon(name: &BucketName) -> BucketAction {
    BucketAction {
        bucket_id: Some(name.id.clone()),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}
