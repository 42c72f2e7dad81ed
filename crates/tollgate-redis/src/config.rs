//! How a Redis store is set up: the one settings type, read by the policy file, the server's
//! flags and the library alike, with the rule for key prefixes.

use std::time::Duration;

/// The longest key prefix.
pub const MAX_PREFIX_BYTES: usize = 64;

/// How a Redis store is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Prepended to every key, so that several applications can share one Redis. Default `tg:`.
    pub prefix: String,
    /// The longest a check may wait for Redis before it fails with a timeout. Default 100 ms.
    pub timeout: Duration,
    /// The longest a (re)connection attempt may take. Default 1 s.
    pub connect_timeout: Duration,
    /// The most checks coalesced into one script call; 1 sends every check alone. Default 16.
    pub max_batch: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            prefix: "tg:".to_owned(),
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            max_batch: 16,
        }
    }
}

/// Why a key prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "redis key prefix {0:?}: may not contain '{{' or '}}' (they would change which cluster slot keys land in) and must be at most 64 bytes"
)]
pub struct BadPrefix(pub String);

impl RedisConfig {
    /// Checks the prefix: a brace would change which cluster slot keys land in.
    pub fn validate_prefix(&self) -> Result<(), BadPrefix> {
        let prefix = &self.prefix;
        if prefix.contains(['{', '}']) || prefix.len() > MAX_PREFIX_BYTES {
            return Err(BadPrefix(prefix.clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_prefix(prefix: &str) -> RedisConfig {
        RedisConfig {
            prefix: prefix.to_owned(),
            ..RedisConfig::default()
        }
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(with_prefix("tg:").validate_prefix().is_ok());
        let error = with_prefix("tg{x}:")
            .validate_prefix()
            .unwrap_err()
            .to_string();
        assert!(error.contains("may not contain '{' or '}'"), "{error}");
    }

    #[test]
    fn prefixes_over_64_bytes_are_refused() {
        assert!(with_prefix(&"p".repeat(64)).validate_prefix().is_ok());
        assert!(with_prefix(&"p".repeat(65)).validate_prefix().is_err());
        assert!(with_prefix("a{b").validate_prefix().is_err());
        assert!(with_prefix("a}b").validate_prefix().is_err());
    }
}
