//! Finds chosen top-level members of a JSON object fed in pieces, without holding the
//! document: a response body of any size costs a few bytes of state and, per wanted member, at
//! most [`MAX_MEMBER_BYTES`] of its value.

/// The largest member value kept; a larger one is skipped (a usage object is far smaller).
pub(crate) const MAX_MEMBER_BYTES: usize = 4096;

/// The longest member name compared; longer names cannot be one that is wanted.
const MAX_NAME_BYTES: usize = 128;

/// The scanner of one document (reset between documents).
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// Names of the members to capture.
    wanted: Vec<String>,
    /// How deep in arrays and objects the scanner is.
    depth: u32,
    /// Whether the document's first value has started, and whether it is an object.
    started: bool,
    object: bool,
    in_string: bool,
    escaped: bool,
    /// At the top level of the object, where the next string is a member name.
    expect_name: bool,
    /// The top-level member name being read, or just read and awaiting its colon.
    name: Option<Vec<u8>>,
    /// The value of a wanted member being captured: which one, and its bytes so far (`None`
    /// once it grew past the cap).
    capture: Option<(usize, Option<Vec<u8>>)>,
}

impl Members {
    pub(crate) fn new(wanted: Vec<String>) -> Self {
        Self {
            wanted,
            ..Self::default()
        }
    }

    /// Starts over, for the next document.
    pub(crate) fn reset(&mut self) {
        let wanted = std::mem::take(&mut self.wanted);
        *self = Self::new(wanted);
    }

    /// Reads `bytes`, calling `found` with each wanted member's index and whole value text.
    pub(crate) fn feed(&mut self, bytes: &[u8], found: &mut impl FnMut(usize, &[u8])) {
        for &byte in bytes {
            self.byte(byte, found);
        }
    }

    fn byte(&mut self, byte: u8, found: &mut impl FnMut(usize, &[u8])) {
        let ends_member = !self.in_string && self.depth == 1 && matches!(byte, b',' | b'}');
        if ends_member {
            if let Some((index, Some(value))) = self.capture.take() {
                found(index, &value);
            }
        } else if let Some((_, kept)) = &mut self.capture {
            if kept.as_ref().is_some_and(|v| v.len() >= MAX_MEMBER_BYTES) {
                *kept = None;
            }
            if let Some(kept) = kept {
                kept.push(byte);
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                return;
            }
            if self.depth == 1
                && let Some(name) = &mut self.name
                && name.len() <= MAX_NAME_BYTES
            {
                name.push(byte);
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.object && self.expect_name {
                    self.expect_name = false;
                    self.name = Some(Vec::new());
                }
            }
            b'{' | b'[' => {
                if !self.started {
                    self.started = true;
                    self.object = byte == b'{';
                    self.expect_name = self.object;
                }
                self.depth += 1;
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => self.expect_name = self.object,
            b':' if self.depth == 1 => {
                let name = self.name.take();
                self.capture = name
                    .and_then(|name| self.wanted.iter().position(|w| w.as_bytes() == name))
                    .map(|index| (index, Some(Vec::new())));
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => self.started = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(wanted: &[&str], pieces: &[&[u8]]) -> Vec<(usize, String)> {
        let mut members = Members::new(wanted.iter().map(|w| (*w).to_owned()).collect());
        let mut found = Vec::new();
        for piece in pieces {
            members.feed(piece, &mut |index, value: &[u8]| {
                found.push((index, String::from_utf8_lossy(value).trim().to_owned()));
            });
        }
        found
    }

    #[test]
    fn top_level_members_are_found_whatever_the_pieces() {
        let body = br#"{"id":"x","choices":[{"usage":{"total_tokens":1}}],"usage":{"prompt_tokens":9,"completion_tokens":12},"model":"m"}"#;
        let whole = scan(&["usage", "model"], &[body]);
        assert_eq!(
            whole,
            vec![
                (
                    0,
                    r#"{"prompt_tokens":9,"completion_tokens":12}"#.to_owned()
                ),
                (1, r#""m""#.to_owned())
            ]
        );
        for split in 1..body.len() {
            let (head, tail) = body.split_at(split);
            assert_eq!(
                scan(&["usage", "model"], &[head, tail]),
                whole,
                "split at {split}"
            );
        }
    }

    #[test]
    fn names_inside_strings_and_nested_objects_are_not_members() {
        let body = br#"{"text":"\"usage\":{\"x\":1}, \\","nested":{"usage":5},"usage" : 7 }"#;
        assert_eq!(scan(&["usage"], &[body]), vec![(0, "7".to_owned())]);
    }

    #[test]
    fn values_past_the_cap_and_non_objects_are_skipped() {
        let big = format!(
            r#"{{"usage":"{}","after":1}}"#,
            "a".repeat(MAX_MEMBER_BYTES)
        );
        assert_eq!(
            scan(&["usage", "after"], &[big.as_bytes()]),
            vec![(1, "1".to_owned())]
        );
        assert!(scan(&["usage"], &[br#"["usage",{"usage":1}]"#]).is_empty());
        assert!(scan(&["usage"], &[b"[DONE]"]).is_empty());
    }
}
