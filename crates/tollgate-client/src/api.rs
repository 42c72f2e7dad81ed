//! A typed client for the server's HTTP check API: `POST /v1/check` and `/v1/refund`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::TollgateClientBuilder;

/// What went wrong calling the check API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The base URL is not a URL.
    #[error("invalid Tollgate URL {url:?}: {reason}")]
    Url {
        /// What was given.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// The server could not be reached, or did not answer within the timeout.
    #[error("cannot reach Tollgate: {0}")]
    Transport(#[source] reqwest::Error),
    /// A refund or settlement of a check that took nothing: a denied check has no charge.
    #[error("nothing to refund or settle: the check took nothing (its answer carries no charge)")]
    NothingToRefund,
    /// TLS settings that cannot be used: a CA or client certificate that does not parse, a key
    /// that does not match its certificate, no CA to verify the server with.
    #[error("TLS settings for Tollgate: {0}")]
    Tls(String),
    /// The server refused the request (a 4xx or 5xx with a problem detail).
    #[error("Tollgate answered {status}: {detail}")]
    Status {
        /// The status.
        status: u16,
        /// The problem's detail, or the body.
        detail: String,
    },
}

/// What the caller knows about the request being limited.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Attributes {
    /// The client's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The API key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The route template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The request body's length, for policies that count bytes (`cost: body`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_length: Option<u64>,
    /// The SHA-256 of the request's body in hex: an idempotency key among the headers is
    /// honoured only with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// Request headers the policies read.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// A limit given with the check.
#[derive(Debug, Clone, Serialize)]
pub struct InlineLimit {
    /// Who it counts for.
    pub key: String,
    /// `fixed_window`, `sliding_log`, `sliding_window`, `token_bucket`, `leaky_bucket`, `gcra`.
    pub algorithm: String,
    /// Such as `10/s`.
    pub quota: String,
    /// The burst of a rate algorithm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// A leaky bucket's mode: `meter` (refuse when full) or `queue` (delay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// In queue mode, how many requests pass at once before the rest are delayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_after: Option<u64>,
    /// Where the limit counts: `region` (the default) or `global` (across every region, on a
    /// server with a global store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The limit's name (by default made from its algorithm, quota and burst).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What this limit takes, when not the check's cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// The most units a settlement may leave owing beyond the capacity (by default the
    /// server's: all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_debt: Option<u64>,
    /// A fixed window's quota counted per calendar period in a time zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar: Option<Calendar>,
}

/// Calendar periods for a fixed window (`quota: 10000/month` with a calendar): each period
/// starts at local midnight in `tz`, on the anchor, instead of on the Unix epoch's grid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Calendar {
    /// A tz database name such as `Europe/Berlin` (the server's default: UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// Months: the day each period starts on, 1 to 31 (the month's last day where it has
    /// fewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor_day: Option<u8>,
    /// Weeks: the day each period starts on, such as `sunday` (the server's default: monday).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_day: Option<String>,
    /// Years: the month and day each period starts on, `MM-DD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor_date: Option<String>,
}

impl InlineLimit {
    /// A limit of `quota` by `algorithm` on `key`.
    pub fn new(
        key: impl Into<String>,
        algorithm: impl Into<String>,
        quota: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            algorithm: algorithm.into(),
            quota: quota.into(),
            burst: None,
            mode: None,
            delay_after: None,
            scope: None,
            name: None,
            cost: None,
            max_debt: None,
            calendar: None,
        }
    }
}

/// One limit's decision.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DecisionAnswer {
    /// Its policy (policy checks).
    pub policy: Option<String>,
    /// Its name.
    pub limit: String,
    /// Whether it admits.
    pub allowed: bool,
    /// What is left.
    pub remaining: u64,
    /// Until fully restored.
    pub reset_after_ms: u64,
    /// Until a request of the same cost fits; `None` for never.
    pub retry_after_ms: Option<u64>,
}

/// The answer to a check.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CheckAnswer {
    /// Whether to go ahead (possibly after `delay_ms`).
    pub allowed: bool,
    /// `allow`, `delay` or `deny`.
    pub verdict: String,
    /// The status to answer the limited request with.
    pub status: u16,
    /// When to try again; `None` for never.
    pub retry_after_ms: Option<u64>,
    /// How long to hold the request before going ahead.
    pub delay_ms: u64,
    /// The decision's time.
    pub at: u64,
    /// The token a refund of this check names; only when the check took something.
    #[serde(default)]
    pub charge: Option<String>,
    /// Every limit's decision.
    pub decisions: Vec<DecisionAnswer>,
    /// Why it was refused (policy checks).
    #[serde(default)]
    pub detail: Option<String>,
    /// The check repeats an admitted one with the same idempotency key (policy checks): it
    /// took nothing, and the caller answers it as it answered the first.
    #[serde(default)]
    pub replay: bool,
}

impl CheckAnswer {
    /// How long to wait before retrying, when refused and it can ever pass.
    pub fn retry_after(&self) -> Option<Duration> {
        (!self.allowed)
            .then_some(self.retry_after_ms)
            .flatten()
            .map(Duration::from_millis)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) attributes: Option<&'a Attributes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) limits: Option<&'a [InlineLimit]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) charge: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) actual: Option<u64>,
}

/// A client for one Tollgate server; cheap to clone, connections are pooled and reused.
#[derive(Debug, Clone)]
pub struct TollgateClient {
    http: reqwest::Client,
    base: String,
}

impl TollgateClient {
    /// A client for the server at `base` (such as `http://127.0.0.1:8080`) with a timeout for
    /// each call. For TLS settings, see [`builder`](Self::builder).
    pub fn new(base: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::builder(base).timeout(timeout).build()
    }

    /// Settings for a client of the server at `base`: a timeout and, with the `rustls` feature,
    /// the CA that signed the server's certificate and a client certificate.
    pub fn builder(base: &str) -> TollgateClientBuilder {
        TollgateClientBuilder::new(base)
    }

    /// A client for the server at `base` that calls it through `http`, a client of the
    /// caller's own: its connection pool, proxy, TLS settings and timeouts are used as they are.
    pub fn with_http_client(base: &str, http: reqwest::Client) -> Result<Self, ClientError> {
        let (_, base) = base_url(base)?;
        Ok(Self { http, base })
    }

    pub(crate) async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Body<'_>,
    ) -> Result<Option<T>, ClientError> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(ClientError::Transport)?;
        let status = response.status();
        if status == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        let text = response.text().await.map_err(ClientError::Transport)?;
        if !status.is_success() {
            let detail = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|problem| problem["detail"].as_str().map(str::to_owned))
                .unwrap_or(text);
            return Err(ClientError::Status {
                status: status.as_u16(),
                detail,
            });
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| ClientError::Status {
                status: status.as_u16(),
                detail: format!("an answer that is not a check answer: {error}"),
            })
    }

    fn answer(found: Option<CheckAnswer>) -> Result<CheckAnswer, ClientError> {
        found.ok_or(ClientError::Status {
            status: 204,
            detail: "no answer to a check".to_owned(),
        })
    }

    /// Decides a request under `policy`.
    pub async fn check_policy(
        &self,
        policy: &str,
        attributes: &Attributes,
        cost: Option<u64>,
    ) -> Result<CheckAnswer, ClientError> {
        let body = Body {
            policy: Some(policy),
            attributes: Some(attributes),
            limits: None,
            cost,
            charge: None,
            actual: None,
        };
        Self::answer(self.post("/v1/check", &body).await?)
    }

    /// Decides a request under every policy its attributes match.
    pub async fn check_matching(
        &self,
        attributes: &Attributes,
        cost: Option<u64>,
    ) -> Result<CheckAnswer, ClientError> {
        let body = Body {
            policy: None,
            attributes: Some(attributes),
            limits: None,
            cost,
            charge: None,
            actual: None,
        };
        Self::answer(self.post("/v1/check", &body).await?)
    }

    /// Decides `limits` all-or-nothing.
    pub async fn check_limits(
        &self,
        limits: &[InlineLimit],
        cost: Option<u64>,
    ) -> Result<CheckAnswer, ClientError> {
        let body = Body {
            policy: None,
            attributes: None,
            limits: Some(limits),
            cost,
            charge: None,
            actual: None,
        };
        Self::answer(self.post("/v1/check", &body).await?)
    }

    /// Gives back what the check answered by `answer` took for `limits`, once: `limits` and
    /// `cost` must be those of the check.
    pub async fn refund_limits(
        &self,
        limits: &[InlineLimit],
        cost: Option<u64>,
        answer: &CheckAnswer,
    ) -> Result<(), ClientError> {
        self.afterwards("/v1/refund", Checked::Limits(limits), cost, answer, None)
            .await
    }

    /// Gives back what the policy check answered by `answer` took, once: `attributes` and
    /// `cost` must be those of the check.
    pub async fn refund_policy(
        &self,
        policy: &str,
        attributes: &Attributes,
        cost: Option<u64>,
        answer: &CheckAnswer,
    ) -> Result<(), ClientError> {
        let checked = Checked::Policy(policy, attributes);
        self.afterwards("/v1/refund", checked, cost, answer, None)
            .await
    }

    /// Releases the concurrency slots the policy check answered by `answer` holds, once, when
    /// the work it admitted ends (whether or not it is refunded): `attributes` and `cost` must
    /// be those of the check.
    pub async fn release_policy(
        &self,
        policy: &str,
        attributes: &Attributes,
        cost: Option<u64>,
        answer: &CheckAnswer,
    ) -> Result<(), ClientError> {
        let checked = Checked::Policy(policy, attributes);
        self.afterwards("/v1/release", checked, cost, answer, None)
            .await
    }

    /// Charges the check answered by `answer` for `limits` at its real cost `actual` (tokens
    /// generated, bytes sent), once: the difference from `cost` is refunded or charged.
    pub async fn settle_limits(
        &self,
        limits: &[InlineLimit],
        cost: Option<u64>,
        answer: &CheckAnswer,
        actual: u64,
    ) -> Result<(), ClientError> {
        self.afterwards(
            "/v1/settle",
            Checked::Limits(limits),
            cost,
            answer,
            Some(actual),
        )
        .await
    }

    /// Charges the policy check answered by `answer` at its real cost `actual`, once.
    pub async fn settle_policy(
        &self,
        policy: &str,
        attributes: &Attributes,
        cost: Option<u64>,
        answer: &CheckAnswer,
        actual: u64,
    ) -> Result<(), ClientError> {
        self.afterwards(
            "/v1/settle",
            Checked::Policy(policy, attributes),
            cost,
            answer,
            Some(actual),
        )
        .await
    }

    /// A refund, a release or (with `actual`) a settlement of a check, posted to `path`.
    async fn afterwards(
        &self,
        path: &str,
        checked: Checked<'_>,
        cost: Option<u64>,
        answer: &CheckAnswer,
        actual: Option<u64>,
    ) -> Result<(), ClientError> {
        let (policy, attributes, limits) = match checked {
            Checked::Limits(limits) => (None, None, Some(limits)),
            Checked::Policy(policy, attributes) => (Some(policy), Some(attributes), None),
        };
        let body = Body {
            policy,
            attributes,
            limits,
            cost,
            charge: Some(
                answer
                    .charge
                    .as_deref()
                    .ok_or(ClientError::NothingToRefund)?,
            ),
            actual,
        };
        self.post::<serde_json::Value>(path, &body).await.map(drop)
    }
}

/// What a refund or settlement is of: inline limits, or a policy and its attributes.
enum Checked<'a> {
    Limits(&'a [InlineLimit]),
    Policy(&'a str, &'a Attributes),
}

/// `base` as a URL, and as the prefix of every call's URL; only `http` and `https` are taken.
pub(crate) fn base_url(base: &str) -> Result<(reqwest::Url, String), ClientError> {
    let url = reqwest::Url::parse(base).map_err(|error| ClientError::Url {
        url: base.to_owned(),
        reason: error.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ClientError::Url {
            url: base.to_owned(),
            reason: "give an http:// or https:// URL".to_owned(),
        });
    }
    Ok((url, base.trim_end_matches('/').to_owned()))
}
