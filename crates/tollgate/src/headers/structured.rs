//! The IETF fields' structured-field items (RFC 9651), written straight into one buffer: a
//! string, integer and byte-sequence parameters are all these fields hold, and every answer
//! carries two of them, so they skip a general serializer's validation and formatting.
//! `headers/tests.rs` reads every shape back with a structured-field parser.

use base64::Engine as _;

/// The largest integer a structured field holds; larger values are written as this.
const MAX_INTEGER: u64 = 999_999_999_999_999;

/// Appends `text` as a structured-field string. `text` must be printable ASCII (`sf_string`
/// makes it so); `"` and `\` are escaped.
pub(super) fn push_string(field: &mut String, text: &str) {
    field.push('"');
    let mut rest = text;
    // Both escaped characters are ASCII, so every split is a character boundary.
    while let Some(at) = memchr::memchr2(b'"', b'\\', rest.as_bytes()) {
        field.push_str(&rest[..at]);
        field.push('\\');
        field.push_str(&rest[at..=at]);
        rest = &rest[at + 1..];
    }
    field.push_str(rest);
    field.push('"');
}

/// Appends `;key=value`, an integer parameter.
pub(super) fn push_integer_parameter(field: &mut String, key: &str, value: u64) {
    field.push(';');
    field.push_str(key);
    field.push('=');
    field.push_str(itoa::Buffer::new().format(value.min(MAX_INTEGER)));
}

/// Appends `;key="value"`, a string parameter (printable ASCII).
pub(super) fn push_string_parameter(field: &mut String, key: &str, value: &str) {
    field.push(';');
    field.push_str(key);
    field.push('=');
    push_string(field, value);
}

/// Appends `;key=:base64:`, a byte-sequence parameter.
pub(super) fn push_bytes_parameter(field: &mut String, key: &str, value: &[u8]) {
    field.push(';');
    field.push_str(key);
    field.push_str("=:");
    base64::engine::general_purpose::STANDARD.encode_string(value, field);
    field.push(':');
}
