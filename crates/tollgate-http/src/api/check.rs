//! `POST /v1/check` and `POST /v1/refund`: decide (or give back) a check for a named policy,
//! for every policy matching some attributes, or for limits given inline. An admitted check's
//! answer carries a charge token; a refund names it (see [`super::charge`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tollgate::headers::{Answer, Fields, LimitView, decision_fields};
use tollgate::policy::{ChargeSet, DecidedBy, HeaderFamily, QuotaUnit, Receipt, Selection};
use tollgate::{Decision, Evaluation, Limit, MAX_COST, Micros, Quota, Request, Verdict};

use super::AppState;
use super::body::read_body;
use super::brief::Brief;
use super::charge::Claim;
use super::inline::{InlineLimit, build_limits, inline_check};
use super::outcome::Outcome;
use super::problem::{ApiError, from_value, parse_json, parse_json_value};

/// The largest check request read, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The most request headers an attributes object may carry.
pub const MAX_HEADERS: usize = 64;

/// What the caller knows about the request being limited.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Attributes {
    ip: Option<String>,
    user: Option<String>,
    tenant: Option<String>,
    plan: Option<String>,
    api_key: Option<String>,
    route: Option<String>,
    method: Option<String>,
    host: Option<String>,
    path: Option<String>,
    content_length: Option<u64>,
    /// The SHA-256 of the request's body, in hex: an idempotency key is honoured only with it.
    body_sha256: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The body of `/v1/check` (and, with the `charge` of its answer, of `/v1/refund`, and with
/// the real cost as well, of `/v1/settle`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    pub(super) policy: Option<String>,
    /// Boxed: most checks give none, and the request is moved several times while it is read.
    pub(super) attributes: Option<Box<Attributes>>,
    pub(super) limits: Option<Vec<InlineLimit>>,
    pub(super) cost: Option<u64>,
    /// Refunds and settlements only: the charge token of the admitted check.
    pub(super) charge: Option<String>,
    /// Settlements only: what the work really cost.
    pub(super) actual: Option<u64>,
    /// Refused with a message that points at `charge`, which replaced it.
    pub(super) at: Option<Micros>,
}

impl CheckRequest {
    /// Reads and validates a check (or refund) body.
    pub(super) async fn read(body: axum::body::Body) -> Result<Self, ApiError> {
        let bytes = read_body(body, MAX_BODY_BYTES).await?;
        // A body without the text `null` holds no null: it is read straight into its type. One
        // with it takes the slower way that names the path of the first null.
        let request: Self =
            if memchr::memchr_iter(b'n', &bytes).any(|at| bytes[at..].starts_with(b"null")) {
                from_value(parse_json_value(&bytes)?)?
            } else {
                parse_json(&bytes)?
            };
        if request.limits.is_some() && request.policy.is_some() {
            return Err(ApiError::invalid(
                "give either a policy (with attributes) or inline limits, not both",
            ));
        }
        if request.limits.is_some() && request.attributes.is_some() {
            return Err(ApiError::invalid(
                "attributes: inline limits carry their own keys; give attributes with a policy, or none",
            ));
        }
        let over = |cost: Option<u64>| cost.filter(|cost| *cost > MAX_COST);
        if let Some(cost) = over(request.cost) {
            return Err(ApiError::invalid(format!(
                "cost: {cost} is above the maximum of {MAX_COST}"
            )));
        }
        if let Some(actual) = over(request.actual) {
            return Err(ApiError::invalid(format!(
                "actual: {actual} is above the maximum of {MAX_COST}"
            )));
        }
        for (index, limit) in request.limits.iter().flatten().enumerate() {
            if let Some(cost) = over(limit.cost) {
                return Err(ApiError::invalid(format!(
                    "limits[{index}].cost: {cost} is above the maximum of {MAX_COST}"
                )));
            }
        }
        Ok(request)
    }

    /// What the caller knows about the request (nothing, when no attributes were given).
    pub(super) fn attributes(&self) -> &Attributes {
        static NONE: std::sync::LazyLock<Attributes> =
            std::sync::LazyLock::new(Attributes::default);
        self.attributes.as_deref().unwrap_or(&NONE)
    }

    /// The named policy, else every policy the attributes match.
    pub(super) fn scope(&self) -> Selection<'_> {
        self.policy
            .as_deref()
            .map_or(Selection::Matching, Selection::Policy)
    }
}

pub(crate) fn header_list(attributes: &Attributes) -> Result<Vec<(String, String)>, ApiError> {
    if attributes.headers.len() > MAX_HEADERS {
        return Err(ApiError::invalid(format!(
            "attributes.headers: at most {MAX_HEADERS} headers"
        )));
    }
    Ok(attributes
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
        .collect())
}

pub(crate) fn request_of<'a>(
    attributes: &'a Attributes,
    headers: &'a Vec<(String, String)>,
) -> Result<Request<'a>, ApiError> {
    let mut request = Request::new(
        attributes.method.as_deref().unwrap_or("GET"),
        attributes.path.as_deref().unwrap_or("/"),
    );
    request.host = attributes.host.as_deref();
    request.route = attributes.route.as_deref();
    request.peer = match &attributes.ip {
        Some(ip) => Some(ip.parse::<IpAddr>().map_err(|_| {
            ApiError::invalid(format!("attributes.ip: {ip:?} is not an IP address"))
        })?),
        None => None,
    };
    request.headers = headers;
    request.user = attributes.user.as_deref();
    request.tenant = attributes.tenant.as_deref();
    request.plan = attributes.plan.as_deref();
    request.api_key = attributes.api_key.as_deref();
    request.content_length = attributes.content_length;
    if let Some(digest) = &attributes.body_sha256 {
        request.body_digest = Some(sha256_hex(digest).ok_or_else(|| {
            ApiError::invalid(format!(
                "attributes.body_sha256: {:?} is not a SHA-256 in hex (64 hex digits)",
                digest.get(..70).unwrap_or(digest)
            ))
        })?);
    }
    Ok(request)
}

/// A SHA-256 written in hex, if `text` is one.
fn sha256_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (index, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * index..2 * index + 2)?, 16).ok()?;
    }
    Some(digest)
}

pub(super) fn millis(micros: Micros) -> u64 {
    micros.div_ceil(1_000)
}

/// One limit's decision in an answer.
#[derive(Serialize)]
pub(super) struct DecisionView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy: Option<&'a str>,
    pub(super) limit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) unit: Option<&'static str>,
    pub(super) algorithm: &'static str,
    #[serde(serialize_with = "serialize_display")]
    pub(super) quota: Quota,
    pub(super) capacity: u64,
    pub(super) allowed: bool,
    pub(super) remaining: u64,
    pub(super) reset_after_ms: u64,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) delay_ms: u64,
}

fn serialize_display<S: serde::Serializer>(
    value: &Quota,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

impl<'a> DecisionView<'a> {
    fn new(decision: &Decision, limit: &'a Limit) -> Self {
        Self {
            policy: None,
            limit: limit.name(),
            key: None,
            unit: None,
            algorithm: limit.algorithm().as_str(),
            quota: limit.quota(),
            capacity: limit.capacity(),
            allowed: decision.allowed(),
            remaining: decision.remaining(),
            reset_after_ms: millis(decision.reset_after_micros()),
            retry_after_ms: decision.retry_after_micros().map(millis),
            delay_ms: millis(decision.delay_micros()),
        }
    }
}

/// What the policies said beyond the decisions (checks by policy only).
#[derive(Serialize)]
pub(super) struct PolicyView<'a> {
    pub(super) detail: Option<&'a str>,
    pub(super) decided_by: &'static str,
    pub(super) matched_policies: &'a [std::sync::Arc<str>],
    pub(super) violated_policies: &'a [std::sync::Arc<str>],
    pub(super) shadow_denied: &'a [std::sync::Arc<str>],
    pub(super) near_limit: bool,
    pub(super) replay: bool,
}

/// The answer to a check. `allowed` comes first, so a client may read it without parsing.
#[derive(Serialize)]
pub(crate) struct CheckAnswer<'a> {
    pub(super) allowed: bool,
    pub(super) verdict: &'static str,
    pub(super) status: u16,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) delay_ms: u64,
    pub(super) at: Micros,
    /// The token a refund of this check names; only when the check took something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) charge: Option<String>,
    pub(super) binding: Option<usize>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(super) policies: Option<PolicyView<'a>>,
    pub(super) decisions: Vec<DecisionView<'a>>,
}

fn with_fields(answer: &CheckAnswer<'_>, fields: Fields) -> Response {
    let mut response = Response::new(axum::body::Body::from(answer.to_json()));
    // Sized once for every field: a map grown by `add_fields` rehashes what it holds.
    let headers = response.headers_mut();
    *headers = axum::http::HeaderMap::with_capacity(fields.len() + 1);
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    tollgate_tower::add_fields(headers, fields);
    response
}

fn families(state: &AppState) -> Vec<HeaderFamily> {
    state.limiter.policies().map_or_else(
        || vec![HeaderFamily::Ietf],
        |p| p.header_families().to_vec(),
    )
}

fn verdict_answer<'a>(
    verdict: &Verdict,
    limits: &'a [Limit],
    specs: &'a [InlineLimit],
) -> CheckAnswer<'a> {
    let Outcome {
        name,
        status,
        retry,
        delay,
        ..
    } = Outcome::of_verdict(verdict);
    let decisions = verdict
        .decisions()
        .iter()
        .zip(limits.iter().zip(specs))
        .map(|(decision, (limit, spec))| DecisionView {
            key: Some(spec.key.as_str()),
            ..DecisionView::new(decision, limit)
        })
        .collect();
    CheckAnswer {
        allowed: verdict.is_admitted(),
        verdict: name,
        status,
        retry_after_ms: retry.map(millis),
        delay_ms: millis(delay),
        at: verdict.at(),
        charge: None,
        binding: verdict.binding_index(),
        policies: None,
        decisions,
    }
}

pub(crate) fn evaluation_answer(evaluation: &Evaluation) -> CheckAnswer<'_> {
    let Outcome {
        name,
        status,
        retry,
        delay,
        detail,
    } = Outcome::of_evaluation(evaluation);
    let decisions = evaluation
        .applied
        .iter()
        .map(|applied| DecisionView {
            policy: Some(&applied.policy),
            limit: &applied.label,
            unit: (applied.unit != QuotaUnit::Requests).then(|| applied.unit.as_str()),
            ..DecisionView::new(&applied.decision, &applied.limit)
        })
        .collect();
    CheckAnswer {
        allowed: evaluation.is_admitted(),
        verdict: name,
        status,
        retry_after_ms: retry.map(millis),
        delay_ms: millis(delay),
        at: evaluation.at,
        charge: None,
        binding: evaluation.binding,
        policies: Some(PolicyView {
            detail,
            decided_by: evaluation.decided_by.as_str(),
            matched_policies: &evaluation.matched,
            violated_policies: &evaluation.violated,
            shadow_denied: &evaluation.shadow_denied,
            near_limit: evaluation.near_limit,
            replay: evaluation.idempotent.as_ref().is_some_and(|i| i.replay),
        }),
        decisions,
    }
}

/// `POST /v1/check`.
pub(crate) async fn check(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // Read in place: the `HeaderMap` extractor would copy every field of every check.
    let brief = super::brief::wanted(request.headers());
    let request = CheckRequest::read(request.into_body()).await?;
    if request.at.is_some() || request.charge.is_some() || request.actual.is_some() {
        return Err(ApiError::invalid(
            "at, charge, actual: only /v1/refund and /v1/settle name a charge",
        ));
    }
    let cost = request.cost.unwrap_or(1);
    if let Some(specs) = &request.limits {
        let limits = build_limits(specs)?;
        let check = inline_check(&limits, specs, cost);
        // Decided at once when the store can; the store's future, kilobytes of it, is boxed
        // for the checks that must wait for it.
        let verdict = match state.limiter.check_now(&check) {
            Some(verdict) => verdict?,
            None => Box::pin(state.limiter.check(&check)).await?,
        };
        if brief {
            return Ok(Brief::of_verdict(&verdict).response());
        }
        let views: Vec<LimitView<'_>> = limits
            .iter()
            .zip(verdict.decisions())
            .map(|(limit, decision)| LimitView {
                label: limit.name(),
                limit,
                unit: QuotaUnit::Requests,
                decision: *decision,
                partition: None,
            })
            .collect();
        let decided = if verdict.is_denied() {
            Answer::Refused {
                retry_after: verdict.retry_after(),
            }
        } else {
            Answer::Admitted { near_limit: false }
        };
        let fields = decision_fields(
            &families(&state),
            &views,
            verdict.binding_index(),
            verdict.at(),
            decided,
        );
        let mut answer = verdict_answer(&verdict, &limits, specs);
        if verdict.is_admitted() {
            let mut charged = Vec::with_capacity(64);
            ChargeSet::of_check(&check).identify(|part| charged.extend_from_slice(part));
            let receipt = Receipt::of_check(&check, &verdict);
            let canonical = request.canonical();
            let token = state
                .charges
                .issue(verdict.at(), &canonical, &charged, &receipt);
            answer.charge = Some(token);
        }
        return Ok(with_fields(&answer, fields));
    }
    // Boxed: a policy evaluation's future takes over a kilobyte, which an inline check's
    // future would otherwise reserve and copy.
    Box::pin(policy_check(&state, &request, brief)).await
}

/// The rest of `POST /v1/check` for a check by policy.
async fn policy_check(
    state: &AppState,
    request: &CheckRequest,
    brief: bool,
) -> Result<Response, ApiError> {
    let headers = header_list(request.attributes())?;
    let attributes = request_of(request.attributes(), &headers)?;
    let evaluation = state
        .limiter
        .evaluate_in(request.scope(), &attributes, request.cost)
        .await?;
    // A brief answer carries a charge only to release concurrency slots, which would
    // otherwise be held until they expire.
    let charged = !brief || evaluation.holds_slots();
    let charge = charged
        .then(|| charge_of(state, request, &evaluation))
        .flatten();
    if brief {
        let mut answer = Brief::of_evaluation(&evaluation);
        answer.charge = charge;
        return Ok(answer.response());
    }
    let fields = evaluation.header_fields(&families(state));
    let mut answer = evaluation_answer(&evaluation);
    answer.charge = charge;
    Ok(with_fields(&answer, fields))
}

/// The charge token of an admitted policy check. Only what the store charged can be given
/// back to it: not a fail-open pass, not a decision of the local fallback, not a request that
/// took nothing.
fn charge_of(state: &AppState, request: &CheckRequest, evaluation: &Evaluation) -> Option<String> {
    if !(evaluation.is_admitted()
        && evaluation.decided_by == DecidedBy::Store
        && (evaluation.took_from_limits() || evaluation.holds_slots()))
    {
        return None;
    }
    let mut charged = Vec::with_capacity(64);
    evaluation.identify_charges(|part| charged.extend_from_slice(part));
    let canonical = request.canonical();
    Some(
        state
            .charges
            .issue(evaluation.at, &canonical, &charged, &evaluation.receipt()),
    )
}

/// `POST /v1/refund`: gives back what an admitted check took, once: the body is the check's
/// and the `charge` of its answer.
pub(crate) async fn refund(
    State(state): State<AppState>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    afterwards(state, body, Afterwards::Refund).await
}

/// `POST /v1/settle`: charges an admitted check at its real cost once it is known (LLM tokens
/// generated, bytes sent): the body is the check's, the `charge` of its answer and `actual`.
/// The difference from what the check took is refunded, or charged even past the limit (the
/// work is done: later requests wait it out). A charge is refunded or settled once.
pub(crate) async fn settle(
    State(state): State<AppState>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    afterwards(state, body, Afterwards::Settle).await
}

/// `POST /v1/release`: releases the concurrency slots an admitted check holds, once, when the
/// work it admitted ends (whether or not its charge is refunded): the body is the check's and
/// the `charge` of its answer. Without it, a slot frees itself when its lease runs out.
pub(crate) async fn release(
    State(state): State<AppState>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    afterwards(state, body, Afterwards::Release).await
}

/// What is done with an admitted check's charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Afterwards {
    Refund,
    Settle,
    Release,
}

async fn afterwards(
    state: AppState,
    body: axum::body::Body,
    what: Afterwards,
) -> Result<Response, ApiError> {
    let request = CheckRequest::read(body).await?;
    if request.at.is_some() {
        return Err(ApiError::invalid(
            "at: a refund or settlement names the charge it undoes: send the `charge` of the admitted check's answer instead",
        ));
    }
    let actual = match (what, request.actual) {
        (Afterwards::Refund, Some(_)) => {
            return Err(ApiError::invalid(
                "actual: a refund gives everything back; to charge the real cost, use /v1/settle",
            ));
        }
        (Afterwards::Release, Some(_)) => {
            return Err(ApiError::invalid(
                "actual: a release frees slots; to charge the real cost, use /v1/settle",
            ));
        }
        (Afterwards::Settle, None) => {
            return Err(ApiError::invalid(
                "actual: required: what the work really cost",
            ));
        }
        (_, actual) => actual,
    };
    let token = request.charge.as_deref().ok_or_else(|| {
        ApiError::invalid(
            "charge: required: the `charge` of the admitted check's answer (a denied check took nothing and has none)",
        )
    })?;
    let cost = request.cost.unwrap_or(1);
    // What the check took from: its inline limits, or its policies' charges planned again.
    let set = match &request.limits {
        Some(specs) => {
            let limits = build_limits(specs)?;
            ChargeSet::of_check(&inline_check(&limits, specs, cost))
        }
        None => {
            let headers = header_list(request.attributes())?;
            let attributes = request_of(request.attributes(), &headers)?;
            state
                .limiter
                .charges_for(request.scope(), &attributes, request.cost)?
        }
    };
    let mut charged = Vec::with_capacity(64);
    set.identify(|part| charged.extend_from_slice(part));
    let claim = match what {
        Afterwards::Release => Claim::Release,
        Afterwards::Refund | Afterwards::Settle => Claim::GiveBack,
    };
    let receipt = state
        .charges
        .redeem(&state.limiter, token, &request.canonical(), &charged, claim)
        .await?;
    match (what, actual) {
        (Afterwards::Release, _) => state.limiter.release_charges(&set, &receipt).await?,
        (_, Some(actual)) => state.limiter.settle_charges(&set, &receipt, actual).await?,
        (_, None) => state.limiter.refund_charges(&set, &receipt).await?,
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
