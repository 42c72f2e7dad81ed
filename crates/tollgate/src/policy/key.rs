//! Building the key a policy counts by, such as `ip:203.0.113.7` or
//! `route:/login|ip:203.0.113.7`.
//!
//! Values are escaped (`%` and `|` become `%25` and `%7C`) so that no value can pass for a
//! separator and two different requests never build the same composite key; a value longer
//! than [`MAX_VALUE_BYTES`] is replaced by `#` and its SHA-256, so keys stay bounded whatever a
//! header holds.

use sha2::{Digest, Sha256};

/// The longest key value used as it is.
pub(crate) const MAX_VALUE_BYTES: usize = 200;

/// The bytes of a partition key (`pk`) reported for `key`: the first 12 bytes of its SHA-256, so
/// that clients see which partition counts them without learning what the key is made of.
pub(crate) fn partition_of(key: &str) -> std::sync::Arc<[u8]> {
    Sha256::digest(key.as_bytes())[..12].into()
}

/// Appends `part:value` (escaped) to `key`, separated by `|`. A `#` is escaped where it follows
/// a `:`, so that no value passes for the mark of a hashed one. The value is copied in runs
/// between the bytes to escape (all ASCII), not a character at a time.
pub(crate) fn push(key: &mut String, part: &str, value: &str) {
    if !key.is_empty() {
        key.push('|');
    }
    key.push_str(part);
    key.push(':');
    if value.len() > MAX_VALUE_BYTES {
        key.push('#');
        crate::hex::push(key, &Sha256::digest(value.as_bytes()));
        return;
    }
    key.reserve(value.len());
    let bytes = value.as_bytes();
    let mut run = 0;
    for (at, byte) in bytes.iter().enumerate() {
        let escaped = match byte {
            b'%' => "%25",
            b'|' => "%7C",
            b'#' if at == 0 || bytes[at - 1] == b':' => "%23",
            _ => continue,
        };
        key.push_str(&value[run..at]);
        key.push_str(escaped);
        run = at + 1;
    }
    key.push_str(&value[run..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[(&str, &str)]) -> String {
        let mut key = String::new();
        for (part, value) in parts {
            push(&mut key, part, value);
        }
        key
    }

    #[test]
    fn composite_keys_never_collide() {
        let a = key(&[("user", "a|header:x:b"), ("header:x", "c")]);
        let b = key(&[("user", "a"), ("header:x", "b|header:x:c")]);
        assert_ne!(a, b);
        assert_eq!(
            key(&[("route", "/login"), ("ip", "203.0.113.7")]),
            "route:/login|ip:203.0.113.7"
        );
    }

    /// The escaping as first defined, a character at a time: keys stored under it (in Redis,
    /// across a rolling upgrade) must be the keys built now.
    fn escaped_char_by_char(key: &mut String, value: &str) {
        for c in value.chars() {
            match c {
                '%' => key.push_str("%25"),
                '|' => key.push_str("%7C"),
                '#' if key.ends_with(':') => key.push_str("%23"),
                c => key.push(c),
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn keys_are_built_as_they_always_were(
            part in "[a-z:]{1,12}",
            value in "[#%|:a/é✓]{0,24}",
        ) {
            let mut expected = String::from("ip:1|");
            expected.push_str(&part);
            expected.push(':');
            escaped_char_by_char(&mut expected, &value);
            let mut built = String::from("ip:1");
            push(&mut built, &part, &value);
            proptest::prop_assert_eq!(built, expected);
        }
    }

    #[test]
    fn a_hash_after_a_colon_is_escaped() {
        assert_eq!(key(&[("h", "#a")]), "h:%23a");
        assert_eq!(key(&[("h", "a:#b#")]), "h:a:%23b#");
        assert_eq!(key(&[("h", "%|#")]), "h:%25%7C#");
    }

    #[test]
    fn long_values_are_hashed() {
        let long = "v".repeat(5_000);
        let built = key(&[("header:x", &long)]);
        assert_eq!(built.len(), "header:x:#".len() + 64);
        assert_ne!(key(&[("header:x", "#abc")]), key(&[("header:x", "%23abc")]));
    }
}
