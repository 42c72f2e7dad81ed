//! Policies: from an HTTP request to a check, and from a verdict to an answer.
//!
//! A [`Config`] (YAML with the `yaml` feature, or code) lists policies; each matches some requests, counts them by a key
//! (client address, user, API key, tenant, route, header, constant, or a composite), and applies
//! limits, possibly chosen by plan tier. [`Policies`] is a checked, compiled configuration;
//! [`Limiter::evaluate`](crate::Limiter::evaluate) decides a [`Request`] against it and returns
//! an [`Evaluation`].

mod client_ip;
mod compile;
mod evaluation;
mod key;
mod lists;
mod matcher;
mod model;
mod network_text;
#[cfg(feature = "yaml")]
mod parse;
mod path;
mod plan;
mod request;

pub use crate::headers::QuotaUnit;
pub use client_ip::{ForwardedHeader, TrustedProxies, client_ip, group, group_key};
pub use compile::{Policies, PolicyLimit};
pub use evaluation::{
    Action, Applied, ChargeSet, DecidedBy, Evaluation, Idempotent, Reason, Receipt, Refusal,
};
pub use model::{
    ConcurrencyConfig, Config, CostConfig, FailureMode, GLOBAL_STORE_TIMEOUT, GlobalConfig,
    HeaderFamily, IdempotencyConfig, IdentityHeaders, KeyPart, LimitConfig, ListEntry, MatchConfig,
    PenaltyConfig, PolicyConfig, RedisOptions, SoftLimit, StatusRange, StoreConfig, TierSource,
    UsageConfig, UsageSource,
};
#[cfg(feature = "yaml")]
pub use parse::{MAX_LIMITS_PER_POLICY, MAX_LIST_ENTRIES, MAX_POLICIES};
pub use path::{AmbiguousPath, normalize as normalize_path};
pub use plan::{Gate, Plan, Planned, Role, Selection};
pub use request::{HeaderSource, Identity, NoHeaders, Request};

pub(crate) use compile::Penalty;
pub(crate) use evaluation::Charge;
pub(crate) use key::partition_of;
