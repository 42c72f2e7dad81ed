//! The keys a descriptor is counted and reported under: its counter key, within the store's
//! cap, and its statistics key, as envoyproxy/ratelimit makes them.

use sha2::{Digest, Sha256};
use tollgate::MAX_KEY_BYTES;

use super::proto::common::RateLimitDescriptor;
use super::stats::StatKey;
use super::tree::MetricValue;

/// Writes `text` into a counter key with the characters that separate its parts escaped.
/// Plain runs between them are copied whole.
pub(crate) fn escape(key: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(['%', '|', '=']) {
        key.push_str(&rest[..at]);
        key.push_str(match rest.as_bytes()[at] {
            b'%' => "%25",
            b'|' => "%7C",
            _ => "%3D",
        });
        rest = &rest[at + 1..];
    }
    key.push_str(rest);
}

/// A counter key the store takes: the key itself, or, past the store's cap on key size, its
/// first part and the SHA-256 of the whole, so that long descriptor values (paths, headers) are
/// counted as upstream counts them, each under its own key.
pub(super) fn bounded_key(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = 256;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut bounded = String::with_capacity(end + 1 + 64);
    bounded.push_str(&key[..end]);
    bounded.push('#');
    tollgate::hex::push(&mut bounded, &digest);
    bounded
}

/// A part of a statistics key: `key`, or `key_` and the value or pattern.
pub(super) fn stat_part(key: &str, metric: MetricValue<'_>, value: &str) -> String {
    match metric {
        MetricValue::Value if !value.is_empty() => format!("{key}_{value}"),
        MetricValue::Pattern(pattern) => format!("{key}_{pattern}"),
        _ => key.to_owned(),
    }
}

/// The statistics key of a `detailed_metric` rule, as upstream makes it: `key_value` for
/// every entry (the pattern for entries a `share_threshold` wildcard matched); without such
/// entries, `key_` even for an empty value.
pub(super) fn detailed_key(
    domain: &str,
    descriptor: &RateLimitDescriptor,
    shared: &[Option<&str>],
) -> StatKey {
    let any_shared = shared.iter().any(Option::is_some);
    let path = descriptor
        .entries
        .iter()
        .zip(shared)
        .map(|(entry, shared)| match shared {
            Some(pattern) => stat_part(&entry.key, MetricValue::Pattern(pattern), ""),
            None if any_shared => stat_part(&entry.key, MetricValue::Value, &entry.value),
            None => format!("{}_{}", entry.key, entry.value),
        })
        .collect();
    StatKey {
        domain: domain.to_owned(),
        path,
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn the_separators_are_escaped_and_the_rest_copied() {
        for (text, escaped) in [
            ("", ""),
            ("plain/path", "plain/path"),
            ("a%b|c=d", "a%25b%7Cc%3Dd"),
            ("==", "%3D%3D"),
            ("é|ü", "é%7Cü"),
        ] {
            let mut key = "domain|".to_owned();
            escape(&mut key, text);
            assert_eq!(key, format!("domain|{escaped}"), "{text:?}");
        }
    }
}
