//! JSON read from bytes, checked as UTF-8 once and whole. Read from bytes, serde_json checks
//! every string on its own, and for a short body (a check's is about 70 bytes with seven
//! strings) those checks cost more than the rest of the reading.

/// What `serde_json::from_slice` reads from `bytes`, with the same error where it fails (a
/// body that is not UTF-8 is read as bytes, so that the error says where).
pub fn from_slice<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    #[test]
    fn reads_and_refuses_as_serde_json_reads_bytes() {
        for body in [
            &br#"{"limits":[{"key":"user:42","quota":"100/s"}],"cost":2}"#[..],
            br#"{"key":"na\u00efve \ud83d\ude00 \u2028"}"#,
            "{\"text\":\"naïve ✓ \u{1F600}\"}".as_bytes(),
            br#"{"key":"unterminated"#,
            br#"{"key":"lone \ud800 surrogate"}"#,
            b"{\"key\":\"not utf-8 \xff here\"}",
            b"{\"key\":\"overlong \xc0\xaf\"}",
            b"\xef\xbb\xbf{}",
            b"",
        ] {
            let ours = super::from_slice::<Value>(body).map_err(|error| error.to_string());
            let theirs = serde_json::from_slice::<Value>(body).map_err(|error| error.to_string());
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(body));
        }
    }
}
