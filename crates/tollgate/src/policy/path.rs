//! The path a request is matched by, normalised as RFC 3986 §6.2.2 normalises it (and as
//! upstream servers route): percent-encoded unreserved characters decoded, other escapes in
//! upper case, dot segments removed, repeated slashes made one. A policy on `/v1/chat/completions`
//! then also limits `/v1/chat/%63ompletions`, `/v1//chat/./completions` and
//! `/v1/x/../chat/completions`, which an upstream routes to the same handler.
//!
//! Paths that mean different things to different servers are refused instead: an encoded `/`
//! (one server splits a segment there, another does not), an encoded or raw `\` (a separator to
//! some), and an encoded NUL.

use std::borrow::Cow;

/// A path that servers read in different ways, refused rather than guessed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request path holds {0}, which servers read in different ways; send it unencoded")]
pub struct AmbiguousPath(pub &'static str);

/// `raw` normalised; borrowed when it already is.
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, AmbiguousPath> {
    // One pass: a path with no escape and no `/` followed by `/` or `.` is already normal
    // (`/.well-known` is not plain here, and comes out of the long way unchanged).
    let mut plain = true;
    let mut previous = 0;
    for &byte in raw.as_bytes() {
        match byte {
            b'\\' => return Err(AmbiguousPath("a backslash")),
            b'%' => plain = false,
            b'/' | b'.' if previous == b'/' => plain = false,
            _ => {}
        }
        previous = byte;
    }
    if plain {
        return Ok(Cow::Borrowed(raw));
    }
    let decoded = decode_unreserved(raw)?;
    Ok(Cow::Owned(remove_dot_segments(&merge_slashes(&decoded))))
}

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// Decodes escapes of unreserved characters and writes the others in upper case; refuses
/// escapes of `/`, `\` and NUL.
fn decode_unreserved(raw: &str) -> Result<String, AmbiguousPath> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let escaped = (byte == b'%')
            .then(|| Some(hex(*bytes.get(index + 1)?)? << 4 | hex(*bytes.get(index + 2)?)?))
            .flatten();
        match escaped {
            Some(b'/') => return Err(AmbiguousPath("an encoded '/' (%2F)")),
            Some(b'\\') => return Err(AmbiguousPath("an encoded '\\' (%5C)")),
            Some(0) => return Err(AmbiguousPath("an encoded NUL (%00)")),
            Some(value) if unreserved(value) => {
                out.push(char::from(value));
                index += 3;
            }
            Some(_) => {
                out.push('%');
                out.push_str(&raw[index + 1..index + 3].to_ascii_uppercase());
                index += 3;
            }
            None => {
                // Not an escape (a lone '%'), or any other character: kept as it is.
                let length = raw[index..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&raw[index..index + length]);
                index += length;
            }
        }
    }
    Ok(out)
}

fn merge_slashes(path: &str) -> Cow<'_, str> {
    if !path.contains("//") {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c == '/' && out.ends_with('/') {
            continue;
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// RFC 3986 §5.2.4, on an absolute path: `.` segments go, `..` takes the segment before it
/// (never above the root).
fn remove_dot_segments(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    let relative = !path.starts_with('/');
    let parts: Vec<&str> = path.split('/').collect();
    let last = parts.len().saturating_sub(1);
    let mut trailing_slash = path.ends_with('/');
    for (index, segment) in parts.iter().enumerate() {
        match *segment {
            "." => trailing_slash |= index == last,
            ".." => {
                if segments.len() > usize::from(!relative) {
                    segments.pop();
                }
                trailing_slash |= index == last;
            }
            other => segments.push(other),
        }
    }
    let mut out = segments.join("/");
    if !relative && !out.starts_with('/') {
        out.insert(0, '/');
    }
    if trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_an_upstream_routes_alike_are_matched_alike() {
        for (raw, normal) in [
            ("/v1/chat/completions", "/v1/chat/completions"),
            ("/v1/chat/%63ompletions", "/v1/chat/completions"),
            ("/v1/chat/%63%6F%6d%70letions", "/v1/chat/completions"),
            ("/v1//chat///completions", "/v1/chat/completions"),
            ("/v1/./chat/completions", "/v1/chat/completions"),
            ("/v1/x/../chat/completions", "/v1/chat/completions"),
            ("/v1/%2e%2e/v1/chat/completions", "/v1/chat/completions"),
            ("/../../login", "/login"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/", "/"),
            ("/files/a%20b", "/files/a%20b"),
            ("/files/a%c3%a9", "/files/a%C3%A9"),
            ("/100%", "/100%"),
            ("/é", "/é"),
            ("/.well-known/acme", "/.well-known/acme"),
            ("/a/.b/..c/", "/a/.b/..c/"),
        ] {
            assert_eq!(normalize(raw).unwrap(), normal, "{raw}");
        }
        assert!(matches!(
            normalize("/v1/chat/completions"),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn paths_servers_read_differently_are_refused() {
        for raw in [
            "/v1/chat%2fcompletions",
            "/v1/chat%2Fcompletions",
            "/v1\\chat",
            "/v1%5cchat",
            "/login%00",
        ] {
            let error = normalize(raw).unwrap_err().to_string();
            assert!(
                error.contains("servers read in different ways"),
                "{raw}: {error}"
            );
        }
    }
}
