//! What the rate limit service takes from its flags: the caps on a request, upstream's modes,
//! the names of the response's header fields, and what to answer when the store cannot decide.

use clap::builder::TypedValueParser as _;
use tollgate::policy::FailureMode;

/// What one request may hold. The defaults are above what Envoy builds from real traffic
/// (descriptors come from paths and headers, which can be long); they are there to bound memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct RlsLimits {
    /// The most descriptors one rate limit service request may hold.
    #[arg(long = "rls-max-descriptors", env = "TOLLGATE_RLS_MAX_DESCRIPTORS", default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from))]
    pub max_descriptors: usize,
    /// The most entries one descriptor may hold.
    #[arg(long = "rls-max-entries", env = "TOLLGATE_RLS_MAX_ENTRIES", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    pub max_entries: usize,
    /// The longest entry key or value, in bytes.
    #[arg(long = "rls-max-entry-bytes", env = "TOLLGATE_RLS_MAX_ENTRY_BYTES", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65_536).map(|n| n as usize))]
    pub max_entry_bytes: usize,
}

impl Default for RlsLimits {
    fn default() -> Self {
        Self {
            max_descriptors: 128,
            max_entries: 64,
            max_entry_bytes: 4096,
        }
    }
}

/// envoyproxy/ratelimit's server-wide switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::Args)]
pub struct RlsModes {
    /// Every request is answered OK overall, whatever its descriptors' statuses say (which
    /// stay as they are), as envoyproxy/ratelimit's SHADOW_MODE does: to watch limits before
    /// enforcing them.
    #[arg(long = "rls-shadow-mode", env = "TOLLGATE_RLS_SHADOW_MODE")]
    pub shadow: bool,
    /// Every descriptor is in quota mode, as envoyproxy/ratelimit's QUOTA_MODE makes it: a
    /// request is refused only if every one of its descriptors is over its limit.
    #[arg(long = "rls-quota-mode", env = "TOLLGATE_RLS_QUOTA_MODE")]
    pub quota: bool,
    /// Answers carry dynamic metadata (the domain, the descriptors, and the `metadata` of the
    /// descriptors that passed), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does.
    #[arg(
        long = "rls-response-dynamic-metadata",
        env = "TOLLGATE_RLS_RESPONSE_DYNAMIC_METADATA"
    )]
    pub dynamic_metadata: bool,
    /// A domain configured in several files has the descriptors of them all, as
    /// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does (without it, that is an error).
    #[arg(long = "rls-merge-domains", env = "TOLLGATE_RLS_MERGE_DOMAINS")]
    pub merge_domains: bool,
}

/// The names of the rate-limit fields answers carry with `--rls-response-headers`, as
/// envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER
/// name them.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct RlsHeaderNames {
    /// The field that carries the limit.
    #[arg(long = "rls-limit-header", env = "TOLLGATE_RLS_LIMIT_HEADER", default_value = "RateLimit-Limit", value_parser = header_name)]
    pub limit: String,
    /// The field that carries what is left.
    #[arg(long = "rls-remaining-header", env = "TOLLGATE_RLS_REMAINING_HEADER", default_value = "RateLimit-Remaining", value_parser = header_name)]
    pub remaining: String,
    /// The field that carries the seconds until the limit resets.
    #[arg(long = "rls-reset-header", env = "TOLLGATE_RLS_RESET_HEADER", default_value = "RateLimit-Reset", value_parser = header_name)]
    pub reset: String,
}

impl Default for RlsHeaderNames {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

/// A header field name flag: a valid HTTP field name.
fn header_name(text: &str) -> Result<String, String> {
    http::HeaderName::from_bytes(text.as_bytes())
        .map(|_| text.to_owned())
        .map_err(|_| format!("{text:?} is not an HTTP header field name"))
}

/// What the service answers when the store cannot decide (it is down, or resting behind the
/// circuit breaker): an error, for Envoy's own setting to decide, or a decision by the failure
/// modes policies have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RlsFailureMode {
    /// `UNAVAILABLE`, so that Envoy applies its own `failure_mode_deny` (`error`), as
    /// envoyproxy/ratelimit answers.
    #[default]
    Error,
    /// Decided as a policy's `on_store_error` decides: `allow` answers `OK` to every
    /// descriptor, `deny` `OVER_LIMIT`, and `local` decides the rules' limits on an in-process
    /// limiter, each divided among the nodes that decide alone.
    Decide(FailureMode),
}

impl std::str::FromStr for RlsFailureMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "error" {
            return Ok(RlsFailureMode::Error);
        }
        text.parse().map(RlsFailureMode::Decide).map_err(|_| {
            format!("unknown mode {text:?} (expected one of: error, allow, deny, local)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failure_modes_are_the_policies_words_and_error() {
        let read = |text: &str| text.parse::<RlsFailureMode>();
        assert_eq!(read("error"), Ok(RlsFailureMode::Error));
        assert_eq!(
            read("allow"),
            Ok(RlsFailureMode::Decide(FailureMode::Allow))
        );
        assert_eq!(read("deny"), Ok(RlsFailureMode::Decide(FailureMode::Deny)));
        assert_eq!(
            read("local"),
            Ok(RlsFailureMode::Decide(FailureMode::Local))
        );
        assert_eq!(
            read("open"),
            Err(r#"unknown mode "open" (expected one of: error, allow, deny, local)"#.to_owned())
        );
    }
}
