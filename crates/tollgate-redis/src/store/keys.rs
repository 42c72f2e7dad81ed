//! Redis key names: `<prefix>{<key>}:<limit state name>` (the limit's name and shape, see
//! [`Limit::state_name`](tollgate_core::limit::Limit::state_name)).
//!
//! The user-supplied key is the hash tag, so every limit of one identity lives in one cluster
//! slot and a check on it stays one atomic script call. Key parts are escaped so that no input
//! can close the hash tag, open another, or collide with a different input: `{`, `}`, `%` and
//! `#` become `%7B`, `%7D`, `%25` and `%23` (an injective encoding). A part whose escaped form
//! is longer than [`MAX_PART_BYTES`] is replaced by `#` and the hex SHA-256 of the raw part, so
//! keys stay short whatever comes in; `#` never starts an escaped part, so the two forms cannot
//! meet.

use sha2::{Digest, Sha256};

/// The longest key part written as it is; longer ones are hashed.
pub const MAX_PART_BYTES: usize = 128;

/// The Redis key holding `key`'s state under the limit named `limit`.
pub(crate) fn state_key(prefix: &str, key: &str, limit: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + key.len() + limit.len() + 4);
    name.push_str(prefix);
    name.push('{');
    push_part(&mut name, key);
    name.push_str("}:");
    push_part(&mut name, limit);
    name
}

fn escaped_len(part: &str) -> usize {
    part.len()
        + 2 * part
            .bytes()
            .filter(|b| matches!(b, b'{' | b'}' | b'%' | b'#'))
            .count()
}

fn push_part(name: &mut String, part: &str) {
    let escaped = escaped_len(part);
    if escaped > MAX_PART_BYTES {
        name.push('#');
        tollgate_core::hex::push(name, &Sha256::digest(part.as_bytes()));
        return;
    }
    if escaped == part.len() {
        // Nothing to escape, as for nearly every key: copied whole rather than char by char.
        name.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '{' => name.push_str("%7B"),
            '}' => name.push_str("%7D"),
            '%' => name.push_str("%25"),
            '#' => name.push_str("%23"),
            c => name.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_identity_as_their_hash_tag() {
        assert_eq!(
            state_key("tg:", "user:42", "per-second"),
            "tg:{user:42}:per-second"
        );
    }

    #[test]
    fn no_input_can_move_the_hash_tag_or_collide() {
        let tricky = ["a}b", "{a}", "a%7Db", "a%b", "#abc", "}", "{", "%", "a}:x"];
        let mut seen = std::collections::HashSet::new();
        for key in tricky {
            let name = state_key("tg:", key, "l");
            let tag = &name[name.find('{').unwrap() + 1..name.find('}').unwrap()];
            assert!(!tag.contains(['{', '}']), "{key:?} -> {name}");
            assert!(
                name.ends_with("}:l"),
                "{key:?} -> {name}: the tag must close where we closed it"
            );
            assert!(seen.insert(name.clone()), "{key:?} collides: {name}");
        }
        assert_ne!(state_key("tg:", "a}:x", "l"), state_key("tg:", "a", "x}:l"));
    }

    #[test]
    fn long_parts_are_hashed_to_a_bounded_size() {
        let long = "k".repeat(1_000);
        let name = state_key("tg:", &long, "l");
        assert_eq!(name.len(), "tg:{#}:l".len() + 64);
        assert_ne!(name, state_key("tg:", &"k".repeat(999), "l"));
        // An escaped part that looks like a hash cannot equal one: it would start with %23.
        assert!(state_key("tg:", "#abc", "l").contains("{%23abc}"));
    }
}
