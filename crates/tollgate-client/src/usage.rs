//! Usage readings (`POST /v1/usage`): what a client has used of each limit, charging nothing.

use serde::Deserialize;

use crate::api::{Attributes, Body, ClientError, InlineLimit, TollgateClient};

/// One limit's usage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LimitUsage {
    /// Its policy (policy readings).
    #[serde(default)]
    pub policy: Option<String>,
    /// Its name.
    pub name: String,
    /// The key counted (inline limits).
    #[serde(default)]
    pub key: Option<String>,
    /// Its algorithm.
    pub algorithm: String,
    /// Its quota, as written (`10000/month`).
    pub quota: String,
    /// What the quota counts: `requests`, `bytes`, `tokens`, ...
    pub unit: String,
    /// How many it admits at once.
    pub limit: u64,
    /// How many are used.
    pub used: u64,
    /// How many are left.
    pub remaining: u64,
    /// When the window counted now began (ms since the Unix epoch); `None` for the rate
    /// algorithms, which have no window.
    pub window_start_ms: Option<u64>,
    /// When the limit is back to its full capacity (ms since the Unix epoch).
    pub reset_ms: u64,
    /// How long until then.
    pub reset_after_ms: u64,
}

/// Why requests are refused now whatever the limits say.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UsageRefused {
    /// `blocked` (a penalty box), `deny_listed`, ...
    pub reason: String,
    /// Said for people.
    pub detail: String,
    /// When it ends, if it does.
    pub retry_after_ms: Option<u64>,
}

/// A usage reading.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UsageAnswer {
    /// The store's time of the reading, in microseconds since the Unix epoch.
    pub at: u64,
    /// Every limit that applies.
    pub limits: Vec<LimitUsage>,
    /// Set while a penalty box or a deny list refuses the client.
    #[serde(default)]
    pub refused: Option<UsageRefused>,
}

impl TollgateClient {
    /// What the request's key has used of `policy`'s limits, charging nothing.
    pub async fn usage_policy(
        &self,
        policy: &str,
        attributes: &Attributes,
    ) -> Result<UsageAnswer, ClientError> {
        let body = Body {
            policy: Some(policy),
            attributes: Some(attributes),
            limits: None,
            cost: None,
            charge: None,
            actual: None,
        };
        Self::reading(self.post("/v1/usage", &body).await?)
    }

    /// What `limits`' keys have used of them, charging nothing.
    pub async fn usage_limits(&self, limits: &[InlineLimit]) -> Result<UsageAnswer, ClientError> {
        let body = Body {
            policy: None,
            attributes: None,
            limits: Some(limits),
            cost: None,
            charge: None,
            actual: None,
        };
        Self::reading(self.post("/v1/usage", &body).await?)
    }

    fn reading(found: Option<UsageAnswer>) -> Result<UsageAnswer, ClientError> {
        found.ok_or(ClientError::Status {
            status: 204,
            detail: "no answer to a usage reading".to_owned(),
        })
    }
}
