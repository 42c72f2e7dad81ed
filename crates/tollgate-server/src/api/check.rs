//! `POST /v1/check` and `POST /v1/refund`: decide (or give back) a check for a named policy,
//! for every policy matching some attributes, or for limits given inline. An admitted check's
//! answer carries a charge token; a refund names it (see [`super::charge`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tollgate::headers::{Answer, LimitView, decision_fields};
use tollgate::policy::{Action, ChargeSet, DecidedBy, HeaderFamily, QuotaUnit, Receipt, Scope};
use tollgate::{
    Algorithm, CalendarError, CalendarSpec, Check, Decision, Evaluation, Limit, LimitSpec,
    MAX_COST, MAX_ITEMS, Micros, Quota, Request, Verdict, leaky_mode,
};

use super::AppState;
use super::charge::Claim;
use super::problem::{ApiError, from_value, parse_json, parse_json_value, read_body};

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

/// A limit given in the request itself.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InlineLimit {
    pub(super) key: String,
    algorithm: Algorithm,
    quota: Quota,
    burst: Option<u64>,
    mode: Option<String>,
    delay_after: Option<u64>,
    /// Where the limit counts: `region` (the default) or `global`.
    scope: Option<tollgate::Scope>,
    /// The most units a settlement may leave owing beyond the capacity.
    max_debt: Option<u64>,
    /// A fixed window's calendar periods (left out of a charge token's bytes when absent, so
    /// that tokens of limits without one read as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    calendar: Option<InlineCalendar>,
    name: Option<String>,
    cost: Option<u64>,
}

/// An inline limit's `calendar`, as a policy file writes it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct InlineCalendar {
    tz: Option<String>,
    anchor_day: Option<u64>,
    first_day: Option<String>,
    anchor_date: Option<String>,
}

impl InlineCalendar {
    /// The calendar it states (in UTC unless `tz` says otherwise); the error names the field.
    fn spec(&self) -> Result<CalendarSpec, CalendarError> {
        let mut spec = CalendarSpec::new(self.tz.as_deref().unwrap_or("UTC"))?;
        if let Some(day) = self.anchor_day {
            spec = spec.anchor_day(day)?;
        }
        if let Some(first) = &self.first_day {
            spec = spec.first_day(first)?;
        }
        if let Some(date) = &self.anchor_date {
            spec = spec.anchor_date(date)?;
        }
        Ok(spec)
    }
}

/// The body of `/v1/check` (and, with the `charge` of its answer, of `/v1/refund`, and with
/// the real cost as well, of `/v1/settle`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    policy: Option<String>,
    attributes: Option<Attributes>,
    pub(super) limits: Option<Vec<InlineLimit>>,
    cost: Option<u64>,
    /// Refunds and settlements only: the charge token of the admitted check.
    pub(super) charge: Option<String>,
    /// Settlements only: what the work really cost.
    pub(super) actual: Option<u64>,
    /// Refused with a message that points at `charge`, which replaced it.
    pub(super) at: Option<Micros>,
}

/// What a check asks, and nothing else: the bytes a charge token binds.
#[derive(Serialize)]
struct Canonical<'a> {
    policy: &'a Option<String>,
    attributes: &'a Option<Attributes>,
    limits: &'a Option<Vec<InlineLimit>>,
    cost: &'a Option<u64>,
}

impl CheckRequest {
    /// Reads and validates a check (or refund) body.
    pub(super) async fn read(body: axum::body::Body) -> Result<Self, ApiError> {
        let bytes = read_body(body, MAX_BODY_BYTES).await?;
        // A body without the text `null` holds no null: it is read straight into its type. One
        // with it takes the slower way that names the path of the first null.
        let request: Self = if bytes.windows(4).any(|four| four == b"null") {
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
        self.attributes.as_ref().unwrap_or(&NONE)
    }

    /// The body as a charge token binds it: the same check always reads the same.
    fn canonical(&self) -> Vec<u8> {
        let mut canonical = Vec::with_capacity(256);
        let written = serde_json::to_writer(
            &mut canonical,
            &Canonical {
                policy: &self.policy,
                attributes: &self.attributes,
                limits: &self.limits,
                cost: &self.cost,
            },
        );
        if written.is_err() {
            canonical.clear();
        }
        canonical
    }

    /// The named policy, else every policy the attributes match.
    pub(super) fn scope(&self) -> Scope<'_> {
        self.policy
            .as_deref()
            .map_or(Scope::Matching, Scope::Policy)
    }
}

impl InlineLimit {
    /// What the limit is, apart from its name, key and cost.
    fn spec(&self, index: usize) -> Result<LimitSpec, ApiError> {
        let mode = leaky_mode(self.mode.as_deref(), self.delay_after)
            .map_err(|error| ApiError::invalid(format!("limits[{index}].mode: {error}")))?;
        let calendar = self
            .calendar
            .as_ref()
            .map(InlineCalendar::spec)
            .transpose()
            .map_err(|error| ApiError::invalid(format!("limits[{index}].calendar.{error}")))?;
        Ok(LimitSpec {
            calendar,
            burst: self.burst,
            mode,
            scope: self.scope.unwrap_or_default(),
            max_debt: self.max_debt.map(|units| units.min(MAX_COST)),
            ..LimitSpec::new(self.algorithm, self.quota)
        })
    }

    fn build(&self, index: usize, spec: &LimitSpec) -> Result<Limit, ApiError> {
        // Unnamed limits are named by what they are, so the same limit keeps its state.
        let name = self.name.clone().unwrap_or_else(|| {
            format!(
                "inline:{}:{}:{}",
                self.algorithm,
                self.quota,
                self.burst.unwrap_or(0)
            )
        });
        spec.build(name)
            .map_err(|error| ApiError::invalid(format!("limits[{index}]: {error}")))
    }

    /// The limit, built once per spec and name: building formats its name and state name and
    /// digests the latter, which costs more than the rest of a check on the memory store.
    fn compiled(&self, index: usize) -> Result<Limit, ApiError> {
        let spec = self.spec(index)?;
        if self
            .name
            .as_ref()
            .is_some_and(|name| name.len() > MAX_CACHED_TEXT)
        {
            return self.build(index, &spec);
        }
        let key = (spec, self.name.clone());
        let compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(limit) = compiled.get(&key) {
            return Ok(limit.clone());
        }
        drop(compiled);
        let limit = self.build(index, &key.0)?;
        let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.len() >= MAX_COMPILED {
            compiled.clear();
        }
        compiled.insert(key, limit.clone());
        Ok(limit)
    }
}

/// The most compiled inline limits kept; past it, the cache starts afresh.
const MAX_COMPILED: usize = 4_096;
/// Names longer than this are built every time, so the cache stays small.
const MAX_CACHED_TEXT: usize = 128;

/// An inline limit's spec and name: what its built form depends on.
type CompiledKey = (LimitSpec, Option<String>);

/// Inline limits as built, by spec and name (bounded: see [`MAX_COMPILED`]).
static COMPILED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<CompiledKey, Limit>>,
> = std::sync::LazyLock::new(Default::default);

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

fn as_micros(duration: std::time::Duration) -> Micros {
    Micros::try_from(duration.as_micros()).unwrap_or(Micros::MAX)
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

fn with_fields(answer: &CheckAnswer<'_>, fields: Vec<(&'static str, String)>) -> Response {
    let mut response = Response::new(axum::body::Body::from(answer.to_json()));
    let headers = response.headers_mut();
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

pub(super) fn inline_check<'a>(
    limits: &'a [Limit],
    specs: &'a [InlineLimit],
    cost: u64,
) -> Check<'a> {
    let mut check = Check::new(cost);
    for (limit, spec) in limits.iter().zip(specs) {
        check.push(spec.key.as_str(), limit, spec.cost.unwrap_or(cost));
    }
    check
}

pub(super) fn build_limits(specs: &[InlineLimit]) -> Result<Vec<Limit>, ApiError> {
    if specs.is_empty() || specs.len() > MAX_ITEMS {
        return Err(ApiError::invalid(format!(
            "limits: give 1 to {MAX_ITEMS} limits"
        )));
    }
    specs
        .iter()
        .enumerate()
        .map(|(index, spec)| spec.compiled(index))
        .collect()
}

fn verdict_answer<'a>(
    verdict: &Verdict,
    limits: &'a [Limit],
    specs: &'a [InlineLimit],
) -> CheckAnswer<'a> {
    let (name, retry, delay) = match verdict.outcome() {
        tollgate::Outcome::Allow => ("allow", Some(0), 0),
        tollgate::Outcome::Delay(delay) => ("delay", Some(0), as_micros(delay)),
        tollgate::Outcome::Deny { retry_after } => ("deny", retry_after.map(as_micros), 0),
    };
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
        status: if verdict.is_denied() { 429 } else { 200 },
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
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let request = CheckRequest::read(body).await?;
    if request.at.is_some() || request.charge.is_some() || request.actual.is_some() {
        return Err(ApiError::invalid(
            "at, charge, actual: only /v1/refund and /v1/settle name a charge",
        ));
    }
    let cost = request.cost.unwrap_or(1);
    if let Some(specs) = &request.limits {
        let limits = build_limits(specs)?;
        let check = inline_check(&limits, specs, cost);
        let verdict = state.limiter.check(&check).await?;
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
    let headers = header_list(request.attributes())?;
    let attributes = request_of(request.attributes(), &headers)?;
    let evaluation = state
        .limiter
        .evaluate_in(request.scope(), &attributes, request.cost)
        .await?;
    let fields = evaluation.header_fields(&families(&state));
    let mut answer = evaluation_answer(&evaluation);
    // Only what the store charged can be given back to it: not a fail-open pass, not a
    // decision of the local fallback, not a request that took nothing.
    if evaluation.is_admitted()
        && evaluation.decided_by == DecidedBy::Store
        && (evaluation.took_from_limits() || evaluation.holds_slots())
    {
        let mut charged = Vec::with_capacity(64);
        evaluation.identify_charges(|part| charged.extend_from_slice(part));
        let canonical = request.canonical();
        let token = state
            .charges
            .issue(evaluation.at, &canonical, &charged, &evaluation.receipt());
        answer.charge = Some(token);
    }
    Ok(with_fields(&answer, fields))
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

#[cfg(test)]
mod tests {
    use super::InlineLimit;

    fn inline(json: &str) -> InlineLimit {
        serde_json::from_str(json).expect("an inline limit")
    }

    #[test]
    fn compiled_limits_of_one_name_but_another_shape_are_not_confused() {
        let ten = inline(r#"{"key":"a","algorithm":"gcra","quota":"10/s","name":"shared"}"#);
        let twenty = inline(r#"{"key":"b","algorithm":"gcra","quota":"20/s","name":"shared"}"#);
        let queue = inline(
            r#"{"key":"c","algorithm":"leaky_bucket","quota":"10/s","burst":5,"mode":"queue","delay_after":2,"name":"shared"}"#,
        );
        let meter = inline(
            r#"{"key":"c","algorithm":"leaky_bucket","quota":"10/s","burst":5,"mode":"meter","name":"shared"}"#,
        );
        for _ in 0..2 {
            assert_eq!(ten.compiled(0).unwrap().count(), 10);
            assert_eq!(twenty.compiled(0).unwrap().count(), 20);
            assert_ne!(
                queue.compiled(0).unwrap().mode(),
                meter.compiled(0).unwrap().mode()
            );
        }
    }

    #[test]
    fn a_limit_that_does_not_build_is_refused_every_time() {
        let zero_burst = inline(r#"{"key":"a","algorithm":"gcra","quota":"10/s","burst":0}"#);
        for _ in 0..2 {
            let error = zero_burst.compiled(3).unwrap_err();
            assert!(error.detail.starts_with("limits[3]"), "{}", error.detail);
        }
    }
}
