//! The layer for the common case, without a policy file: one rate and burst per client (or per
//! key of the application's choosing), made into a policy and decided by the same layer.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use ipnet::IpNet;
use tollgate::policy::{KeyPart, LimitConfig, PolicyConfig};
use tollgate::{
    Algorithm, CalendarSpec, Config, ConfigErrors, LimitError, LimitSpec, Limiter, MemoryStore,
    Policies, Quota, QuotaError, Store,
};

use crate::RateLimitLayer;
use crate::hooks::{Hooks, KeyFn, RefusalFn, Refused};

/// The policy the builder makes, as refusals and metrics name it.
const POLICY: &str = "rate-limit";
/// Its one limit, as the rate-limit fields name it.
const LIMIT: &str = "rate";

/// Builds a [`RateLimitLayer`] from a rate, a burst and a key, starting from
/// [`RateLimitLayer::per_second`], [`per_minute`](RateLimitLayer::per_minute),
/// [`per_hour`](RateLimitLayer::per_hour) or [`rate`](RateLimitLayer::rate).
///
/// The rate is enforced as GCRA (an exact rate with a burst) on the in-process store unless
/// [`store`](Self::store) gives another; with a [`calendar`](Self::calendar), as a quota per
/// calendar period. Requests are counted by client address, through the
/// [`trusted_proxies`](Self::trusted_proxies)' forwarding header, unless [`key`](Self::key)
/// says otherwise.
#[must_use = "a builder does nothing until built"]
pub struct RateLimitBuilder<S = MemoryStore> {
    quota: Result<Quota, QuotaError>,
    burst: Option<u64>,
    calendar: Option<CalendarSpec>,
    trusted_proxies: Vec<IpNet>,
    hooks: Hooks,
    store: S,
}

impl<S> std::fmt::Debug for RateLimitBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("quota", &self.quota)
            .field("burst", &self.burst)
            .field("calendar", &self.calendar)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

/// Why [`RateLimitBuilder::build`] refused its settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The rate: a count of zero or too large, a period out of range.
    #[error("rate limit layer: the rate: {0}")]
    Rate(#[source] QuotaError),
    /// The limit the rate and burst make (a burst of zero, or too large).
    #[error("rate limit layer: {0}")]
    Limit(#[source] LimitError),
    /// The policy they make.
    #[error("rate limit layer: {0}")]
    Policy(#[source] ConfigErrors),
}

impl RateLimitLayer<MemoryStore> {
    /// A layer admitting `count` requests a second per client; see [`RateLimitBuilder`].
    ///
    /// ```
    /// use tollgate_tower::RateLimitLayer;
    ///
    /// # fn main() -> Result<(), tollgate_tower::BuildError> {
    /// let layer = RateLimitLayer::per_second(10).burst(20).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn per_second(count: u64) -> RateLimitBuilder {
        RateLimitBuilder::new(Quota::per_second(count))
    }

    /// A layer admitting `count` requests a minute per client.
    pub fn per_minute(count: u64) -> RateLimitBuilder {
        RateLimitBuilder::new(Quota::per_minute(count))
    }

    /// A layer admitting `count` requests an hour per client.
    pub fn per_hour(count: u64) -> RateLimitBuilder {
        RateLimitBuilder::new(Quota::per_hour(count))
    }

    /// A layer admitting `quota` per client, for any other period (`"100/30s".parse()?`).
    pub fn rate(quota: Quota) -> RateLimitBuilder {
        RateLimitBuilder::new(Ok(quota))
    }
}

impl RateLimitBuilder<MemoryStore> {
    fn new(quota: Result<Quota, QuotaError>) -> Self {
        Self {
            quota,
            burst: None,
            calendar: None,
            trusted_proxies: Vec::new(),
            hooks: Hooks::default(),
            store: MemoryStore::new(),
        }
    }
}

impl<S: Store> RateLimitBuilder<S> {
    /// The most requests admitted back to back after a quiet spell. Default: the rate's count.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Counts the quota per calendar period in a time zone instead of as a rate: a quota of a
    /// day, week, month or year (`"10000/month".parse()?`) renews at local midnight, on the
    /// calendar's anchor day for a month. A fixed window: it takes no burst.
    ///
    /// ```
    /// use tollgate::CalendarSpec;
    /// use tollgate_tower::RateLimitLayer;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let monthly = CalendarSpec::new("Europe/Berlin")?.anchor_day(15)?;
    /// let layer = RateLimitLayer::rate("10000/month".parse()?).calendar(monthly).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn calendar(mut self, calendar: CalendarSpec) -> Self {
        self.calendar = Some(calendar);
        self
    }

    /// Counts requests by the key `key` works out from a request's head (the user or API key
    /// your authentication put in the extensions, a tenant) instead of by client address. A
    /// request for which it answers `None` (or an empty key) is counted by its client address,
    /// never let through uncounted. Key by what was verified: a key read from a header anyone
    /// can set lets a client pick a fresh limit with every request.
    pub fn key<F>(mut self, key: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.hooks.key = Some(Arc::new(key) as KeyFn);
        self
    }

    /// The proxies in front of the service (networks, or single addresses): a request from one
    /// of them is counted by the client address its `X-Forwarded-For` names. Without any, the
    /// socket's peer is the client, whatever a request's headers say.
    pub fn trusted_proxies<I>(mut self, proxies: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<IpNet>,
    {
        self.trusted_proxies
            .extend(proxies.into_iter().map(Into::into));
        self
    }

    /// Answers refused requests with `hook`'s response instead of Tollgate's problem+json; see
    /// [`RateLimitLayer::on_refusal`].
    pub fn on_refusal<F, B>(mut self, hook: F) -> Self
    where
        F: Fn(&Refused<'_>) -> Response<B> + Send + Sync + 'static,
        B: Into<Bytes>,
    {
        self.hooks.on_refusal = Some(Hooks::refusal_fn(hook) as RefusalFn);
        self
    }

    /// Keeps the counts in `store` (a `RedisStore` shared by every node, say) instead of in
    /// process.
    pub fn store<T: Store>(self, store: T) -> RateLimitBuilder<T> {
        RateLimitBuilder {
            quota: self.quota,
            burst: self.burst,
            calendar: self.calendar,
            trusted_proxies: self.trusted_proxies,
            hooks: self.hooks,
            store,
        }
    }

    /// The layer. Fails when the rate or the burst is out of range (zero, or too large).
    pub fn build(self) -> Result<RateLimitLayer<S>, BuildError> {
        let algorithm = match self.calendar {
            Some(_) => Algorithm::FixedWindow,
            None => Algorithm::Gcra,
        };
        let mut spec = LimitSpec::new(algorithm, self.quota.map_err(BuildError::Rate)?);
        spec.burst = self.burst;
        spec.calendar = self.calendar;
        spec.build(LIMIT).map_err(BuildError::Limit)?;
        let mut policy = PolicyConfig::new(POLICY);
        if self.hooks.key.is_some() {
            policy.key = vec![KeyPart::Custom];
        }
        policy.limits = vec![LimitConfig {
            name: LIMIT.to_owned(),
            spec,
            origin: Default::default(),
        }];
        let config = Config {
            trusted_proxies: self.trusted_proxies,
            policies: vec![policy],
            policies_listed: true,
            ..Config::default()
        };
        let policies = Policies::compile(config, "RateLimitLayer").map_err(BuildError::Policy)?;
        let layer = RateLimitLayer::new(Limiter::with_policies(self.store, policies));
        Ok(layer.with_hooks(self.hooks))
    }
}
