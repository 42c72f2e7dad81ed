//! Bytes written as lower-case hex, as keys, tokens and digests carry them: two digits a byte
//! pushed straight into the text, not through the formatting machinery.

/// Appends `bytes` to `text` in lower-case hex, two digits a byte. Inlined, so that a call with
/// bytes of a known length (a tag, a timestamp) unrolls as the loop it was before it was shared.
#[inline]
pub fn push(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    text.reserve(2 * bytes.len());
    for &byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn hex_is_what_the_formatter_writes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut text = String::from("prefix:");
            super::push(&mut text, &bytes);
            let mut expected = String::from("prefix:");
            for byte in &bytes {
                let _ = write!(expected, "{byte:02x}");
            }
            prop_assert_eq!(text, expected);
        }
    }
}
