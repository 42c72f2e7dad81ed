//! `POST /v1/usage`: what a client has used of each limit that applies to it, for a platform's
//! "your usage this month" page. The body is `/v1/check`'s; nothing is charged, no slot taken,
//! no penalty earned, no metric moved.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use tollgate::policy::{Action, QuotaUnit, Reason};
use tollgate::{Algorithm, Decision, Limit, Micros};

use super::AppState;
use super::check::{CheckRequest, header_list, millis, request_of};
use super::inline::{build_limits, inline_check};
use super::problem::ApiError;

/// One limit's usage.
#[derive(Debug, Serialize)]
struct LimitUsage {
    /// The policy the limit belongs to (limits given inline have none).
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    /// The limit's name.
    name: String,
    /// The key it counts, for limits given inline (a policy's keys are its own business).
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    algorithm: &'static str,
    quota: String,
    /// What the quota counts (`requests`, `bytes`, `tokens`, ...).
    unit: &'static str,
    /// How many it admits at once.
    limit: u64,
    used: u64,
    remaining: u64,
    /// When the window counted now began, for the window algorithms (milliseconds since the
    /// Unix epoch); the rate algorithms have no window.
    window_start_ms: Option<u64>,
    /// When the limit is back to its full capacity, unused from then on (milliseconds since
    /// the Unix epoch), and how long until then.
    reset_ms: u64,
    reset_after_ms: u64,
}

impl LimitUsage {
    fn new(limit: &Limit, decision: &Decision, at: Micros) -> Self {
        let capacity = limit.capacity();
        let remaining = decision.remaining().min(capacity);
        let reset = at.saturating_add(decision.reset_after_micros());
        let period = limit.quota().period_micros();
        let window_start = match limit.algorithm() {
            Algorithm::FixedWindow => Some(reset.saturating_sub(period)),
            Algorithm::SlidingWindow | Algorithm::SlidingLog => Some(at.saturating_sub(period)),
            _ => None,
        };
        Self {
            policy: None,
            name: limit.name().to_owned(),
            key: None,
            algorithm: limit.algorithm().as_str(),
            quota: limit.quota().to_string(),
            unit: QuotaUnit::Requests.as_str(),
            limit: capacity,
            used: capacity - remaining,
            remaining,
            window_start_ms: window_start.map(millis),
            reset_ms: millis(reset),
            reset_after_ms: millis(decision.reset_after_micros()),
        }
    }
}

/// Why requests are refused now whatever the limits say: a penalty box, a deny list.
#[derive(Debug, Serialize)]
struct Refused {
    reason: &'static str,
    detail: String,
    retry_after_ms: Option<u64>,
}

/// The answer.
#[derive(Debug, Serialize)]
pub(crate) struct UsageAnswer {
    /// The store's time of the reading, in microseconds since the Unix epoch.
    at: Micros,
    limits: Vec<LimitUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<Refused>,
}

/// `POST /v1/usage`.
pub(crate) async fn usage(
    State(state): State<AppState>,
    body: axum::body::Body,
) -> Result<Json<UsageAnswer>, ApiError> {
    let request = CheckRequest::read(body).await?;
    if request.at.is_some() || request.charge.is_some() || request.actual.is_some() {
        return Err(ApiError::invalid(
            "at, charge, actual: a usage reading names no charge",
        ));
    }
    let answer = match &request.limits {
        Some(specs) => {
            let limits = build_limits(specs)?;
            let check = inline_check(&limits, specs, 0);
            let verdict = state.limiter.look(&check).await?;
            UsageAnswer {
                at: verdict.at(),
                limits: limits
                    .iter()
                    .zip(specs)
                    .zip(verdict.decisions())
                    .map(|((limit, spec), decision)| LimitUsage {
                        key: Some(spec.key.clone()),
                        ..LimitUsage::new(limit, decision, verdict.at())
                    })
                    .collect(),
                refused: None,
            }
        }
        None => {
            let headers = header_list(request.attributes())?;
            let attributes = request_of(request.attributes(), &headers)?;
            let evaluation = state.limiter.look_in(request.scope(), &attributes).await?;
            let refused = match &evaluation.action {
                Action::Refuse(refusal) if refusal.reason != Reason::OverLimit => Some(Refused {
                    reason: refusal.reason.as_str(),
                    detail: refusal.detail.clone(),
                    retry_after_ms: refusal.retry_after.map(|wait| wait.as_millis() as u64),
                }),
                _ => None,
            };
            UsageAnswer {
                at: evaluation.at,
                limits: evaluation
                    .applied
                    .iter()
                    .map(|applied| LimitUsage {
                        policy: Some(applied.policy.to_string()),
                        name: applied.label.to_string(),
                        unit: applied.unit.as_str(),
                        ..LimitUsage::new(&applied.limit, &applied.decision, evaluation.at)
                    })
                    .collect(),
                refused,
            }
        }
    };
    Ok(Json(answer))
}
