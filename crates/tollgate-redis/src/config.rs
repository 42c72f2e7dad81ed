//! How a Redis store is set up: the one settings type, read by the policy file, the server's
//! flags and the library alike, with the rule for key prefixes.

use std::path::PathBuf;
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
    /// Certificates for `rediss://` URLs (TLS): whom to trust, and a client certificate.
    pub tls: RedisTls,
    /// A user name and password given apart from the URL (from an environment variable or a
    /// file, so they stay out of process listings and configuration files); they take the
    /// place of any in the URL.
    pub auth: Option<RedisAuth>,
}

/// Certificates for TLS to Redis (`rediss://` URLs), each a PEM file. Without a CA file the
/// server's certificate is verified against the system's roots; the server name is checked
/// either way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// The certificate authorities to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (chain), for servers that require mutual TLS.
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key.
    pub client_key: Option<PathBuf>,
}

impl RedisTls {
    /// Whether any certificate is configured.
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some()
    }
}

/// Credentials for Redis: an ACL user name (none: the default user) and its password. The
/// password is never printed: `Debug` masks it.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisAuth {
    /// The ACL user; `None` authenticates as the default user, with the password only.
    pub username: Option<String>,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for RedisAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAuth")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            prefix: "tg:".to_owned(),
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            max_batch: 16,
            tls: RedisTls::default(),
            auth: None,
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
    fn a_password_is_never_printed() {
        let config = RedisConfig {
            auth: Some(RedisAuth {
                username: Some("limiter".to_owned()),
                password: "hunter2".to_owned(),
            }),
            ..RedisConfig::default()
        };
        let shown = format!("{config:?}");
        assert!(
            shown.contains("limiter") && !shown.contains("hunter2"),
            "{shown}"
        );
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
