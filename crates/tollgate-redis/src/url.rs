//! Redis URLs, which may carry a password (`redis://user:password@host:port`), and the one
//! place where credentials are taken out of anything shown: start-up lines, logs, error
//! messages (the redis crate's own included), readiness answers and the admin API.
//!
//! [`RedisUrl`] holds a URL; its `Display` and `Debug` show `redis://user:***@host:port`, and
//! only [`RedisUrl::expose`] gives the URL itself, to connect with. [`redact_credentials`]
//! masks the password of every URL in a piece of text (a configuration file, an error).

use std::borrow::Cow;
use std::fmt;

/// What stands in for a password.
const MASK: &str = "***";

/// A Redis URL whose password is never shown: `Display` and `Debug` mask it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedisUrl(String);

impl RedisUrl {
    /// Holds `url` (`redis://[user:password@]host:port[/db]`); whether it parses is for the
    /// store to say when it connects.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its password, to connect with. Never print it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The password, if the URL has one (as written, percent-encoding and all).
    fn password(&self) -> Option<&str> {
        let start = self.0.find("://")? + 3;
        let (userinfo, _) = userinfo_at(&self.0[start..])?;
        let (_, password) = userinfo.split_once(':')?;
        (!password.is_empty()).then_some(password)
    }

    /// `text` (an error message, say) without this URL's password: every URL in it masked as
    /// [`redact_credentials`] does, and the password itself wherever else it appears, as
    /// written and percent-decoded.
    pub fn redact(&self, text: &str) -> String {
        let mut redacted = redact_credentials(text).into_owned();
        if let Some(password) = self.password() {
            let decoded = percent_decoded(password);
            for secret in [password, decoded.as_str()] {
                // A very short password would mask unrelated letters; masking the URLs covers
                // the way it is ever printed.
                if secret.len() >= 4 && secret != MASK {
                    redacted = redacted.replace(secret, MASK);
                }
            }
        }
        redacted
    }
}

impl From<String> for RedisUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for RedisUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl std::str::FromStr for RedisUrl {
    type Err = std::convert::Infallible;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Ok(Self::from(url))
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_credentials(&self.0))
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisUrl")
            .field(&redact_credentials(&self.0))
            .finish()
    }
}

/// The userinfo that starts `after_scheme` (the text after `://`) and the byte length up to
/// and including its `@`, if there is one: text up to the first `@` with no whitespace, quote,
/// angle bracket or further `://` in it. A password need not be percent-encoded to be found:
/// `/`, `,`, `?` and `#` in it do not end it.
fn userinfo_at(after_scheme: &str) -> Option<(&str, usize)> {
    let at = after_scheme.find('@')?;
    let userinfo = &after_scheme[..at];
    let plain = !userinfo.contains("://")
        && !userinfo
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'));
    plain.then_some((userinfo, at + 1))
}

/// `text` with the password of every `scheme://user:password@` in it replaced by `***`
/// (`redis://user:***@host:port`, `rediss://:***@host`). Text without one is returned as is.
pub fn redact_credentials(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme_end) = rest.find("://") {
        let start = scheme_end + 3;
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        if let Some((userinfo, length)) = userinfo_at(rest)
            && let Some((user, _)) = userinfo.split_once(':')
        {
            out.push_str(user);
            out.push(':');
            out.push_str(MASK);
            out.push('@');
            rest = &rest[length..];
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `%XX` sequences decoded (as a password in a URL may be written); anything else kept.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes
            .get(index + 1..index + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[index], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_its_user_but_never_its_password() {
        let url = RedisUrl::new("redis://app:hunter2%2Fx@10.0.0.7:6380/2");
        assert_eq!(url.to_string(), "redis://app:***@10.0.0.7:6380/2");
        assert_eq!(
            format!("{url:?}"),
            "RedisUrl(\"redis://app:***@10.0.0.7:6380/2\")"
        );
        assert_eq!(url.expose(), "redis://app:hunter2%2Fx@10.0.0.7:6380/2");
        assert_eq!(
            RedisUrl::new("rediss://:pw@h:1").to_string(),
            "rediss://:***@h:1"
        );
        assert_eq!(
            RedisUrl::new("redis://127.0.0.1:6379").to_string(),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(RedisUrl::new("redis://app@h").to_string(), "redis://app@h");
    }

    #[test]
    fn every_url_in_a_text_is_masked() {
        let text = "store: [redis://a:p1@h1:1, \"redis://b:p/2,x@h2:2\"] and http://h:80/x";
        assert_eq!(
            redact_credentials(text),
            "store: [redis://a:***@h1:1, \"redis://b:***@h2:2\"] and http://h:80/x"
        );
        assert_eq!(
            redact_credentials("redis://h1:1,redis://u:secret@h2:2"),
            "redis://h1:1,redis://u:***@h2:2"
        );
        assert!(matches!(redact_credentials("no urls"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_url_takes_its_password_out_of_any_message() {
        let url = RedisUrl::new("redis://app:s%40fe-pass@h:1");
        assert_eq!(
            url.redact("auth failed for s@fe-pass at redis://app:s%40fe-pass@h:1 (s%40fe-pass)"),
            "auth failed for *** at redis://app:***@h:1 (***)"
        );
    }
}
