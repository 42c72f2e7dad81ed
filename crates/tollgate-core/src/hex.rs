//! Bytes written as lower-case hex, as keys, tokens and digests carry them: two digits a byte,
//! written a block at a time rather than through the formatting machinery a digit at a time.

/// Appends `bytes` to `text` in lower-case hex, two digits a byte.
pub fn push(text: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut block = [0u8; 64];
    text.reserve(2 * bytes.len());
    for chunk in bytes.chunks(block.len() / 2) {
        let digits = &mut block[..2 * chunk.len()];
        for (pair, byte) in digits.chunks_exact_mut(2).zip(chunk) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0x0f)];
        }
        // Hex digits are ASCII, so this never falls back to the empty default.
        text.push_str(std::str::from_utf8(digits).unwrap_or_default());
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
