//! A check's answer written as JSON directly, byte for byte what its `Serialize` writes (a test
//! holds them equal): every check answers with one, and serde's generic path (a map for the
//! flattened policy view, every key escaped) cost more than the rest of a memory-store check.

use std::fmt::Write as _;

use super::brief::Brief;
use super::check::{CheckAnswer, DecisionView, PolicyView};

/// Writes JSON values into a byte buffer.
pub(super) struct Json(pub(super) Vec<u8>);

impl Json {
    /// Writes `text` as it is: keys and punctuation, which need no escaping.
    pub(super) fn raw(&mut self, text: &str) {
        self.0.extend_from_slice(text.as_bytes());
    }

    pub(super) fn string(&mut self, text: &str) {
        // serde_json escapes control characters, `"` and `\` only: text without them is
        // written as it is, anything else the way serde_json writes it.
        if needs_escape(text.as_bytes()) {
            let _ = serde_json::to_writer(&mut self.0, text);
        } else {
            self.0.push(b'"');
            self.raw(text);
            self.0.push(b'"');
        }
    }

    fn number(&mut self, value: u64) {
        self.raw(itoa::Buffer::new().format(value));
    }

    fn bool(&mut self, value: bool) {
        self.raw(if value { "true" } else { "false" });
    }

    pub(super) fn optional_string(&mut self, text: Option<&str>) {
        match text {
            Some(text) => self.string(text),
            None => self.raw("null"),
        }
    }

    pub(super) fn option(&mut self, value: Option<u64>) {
        match value {
            Some(value) => self.number(value),
            None => self.raw("null"),
        }
    }

    /// Opens an answer with what every form of it states first: the decision and its waits.
    fn outcome(
        &mut self,
        allowed: bool,
        verdict: &str,
        status: u16,
        retry_after_ms: Option<u64>,
        delay_ms: u64,
    ) {
        self.raw("{\"allowed\":");
        self.bool(allowed);
        self.raw(",\"verdict\":");
        self.string(verdict);
        self.raw(",\"status\":");
        self.number(u64::from(status));
        self.raw(",\"retry_after_ms\":");
        self.option(retry_after_ms);
        self.raw(",\"delay_ms\":");
        self.number(delay_ms);
    }

    /// An answer's charge token, when it has one.
    fn charge(&mut self, charge: Option<&str>) {
        if let Some(charge) = charge {
            self.raw(",\"charge\":");
            self.string(charge);
        }
    }

    fn strings(&mut self, items: &[std::sync::Arc<str>]) {
        self.0.push(b'[');
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                self.0.push(b',');
            }
            self.string(item);
        }
        self.0.push(b']');
    }
}

/// Whether any of `bytes` is [`escaped`]: eight bytes a step, since every string of every
/// answer is looked at (a byte at a time took more than writing them).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether any byte of `word` is below `n` (n <= 128): exact for "any", though not for which.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH != 0;
    let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH != 0;
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(eight);
        if below(word, 0x20)
            || zero(word ^ (ONES * u64::from(b'"')))
            || zero(word ^ (ONES * u64::from(b'\\')))
        {
            return true;
        }
    }
    words.remainder().iter().any(|&byte| escaped(byte))
}

/// Whether JSON escapes `byte`: a control character, `"` or `\`.
fn escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

impl CheckAnswer<'_> {
    /// The answer as JSON, as `serde_json::to_vec` writes it.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut json = Json(Vec::with_capacity(320 + 256 * self.decisions.len()));
        json.outcome(
            self.allowed,
            self.verdict,
            self.status,
            self.retry_after_ms,
            self.delay_ms,
        );
        json.raw(",\"at\":");
        json.number(self.at);
        json.charge(self.charge.as_deref());
        json.raw(",\"binding\":");
        json.option(self.binding.map(|b| b as u64));
        if let Some(policies) = &self.policies {
            policies.write(&mut json);
        }
        json.raw(",\"decisions\":[");
        for (index, decision) in self.decisions.iter().enumerate() {
            if index > 0 {
                json.raw(",");
            }
            decision.write(&mut json);
        }
        json.raw("]}");
        json.0
    }
}

impl Brief {
    /// The brief answer as JSON.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut json = Json(Vec::with_capacity(128));
        json.outcome(
            self.allowed,
            self.verdict,
            self.status,
            self.retry_after_ms,
            self.delay_ms,
        );
        if let Some((remaining, reset_after_ms)) = self.binding {
            json.raw(",\"remaining\":");
            json.number(remaining);
            json.raw(",\"reset_after_ms\":");
            json.number(reset_after_ms);
        }
        json.charge(self.charge.as_deref());
        json.raw("}");
        json.0
    }
}

impl PolicyView<'_> {
    fn write(&self, json: &mut Json) {
        json.raw(",\"detail\":");
        json.optional_string(self.detail);
        json.raw(",\"decided_by\":");
        json.string(self.decided_by);
        json.raw(",\"matched_policies\":");
        json.strings(self.matched_policies);
        json.raw(",\"violated_policies\":");
        json.strings(self.violated_policies);
        json.raw(",\"shadow_denied\":");
        json.strings(self.shadow_denied);
        json.raw(",\"near_limit\":");
        json.bool(self.near_limit);
        json.raw(",\"replay\":");
        json.bool(self.replay);
    }
}

impl DecisionView<'_> {
    fn write(&self, json: &mut Json) {
        if let Some(policy) = self.policy {
            json.raw("{\"policy\":");
            json.string(policy);
            json.raw(",\"limit\":");
        } else {
            json.raw("{\"limit\":");
        }
        json.string(self.limit);
        if let Some(key) = self.key {
            json.raw(",\"key\":");
            json.string(key);
        }
        if let Some(unit) = self.unit {
            json.raw(",\"unit\":");
            json.string(unit);
        }
        json.raw(",\"algorithm\":");
        json.string(self.algorithm);
        json.raw(",\"quota\":");
        let mut quota = String::with_capacity(16);
        let _ = write!(quota, "{}", self.quota);
        json.string(&quota);
        json.raw(",\"capacity\":");
        json.number(self.capacity);
        json.raw(",\"allowed\":");
        json.bool(self.allowed);
        json.raw(",\"remaining\":");
        json.number(self.remaining);
        json.raw(",\"reset_after_ms\":");
        json.number(self.reset_after_ms);
        json.raw(",\"retry_after_ms\":");
        json.option(self.retry_after_ms);
        json.raw(",\"delay_ms\":");
        json.number(self.delay_ms);
        json.raw("}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tollgate::{Algorithm, Limit, Quota};

    use super::*;

    fn decision<'a>(limit: &'a Limit, text: &'a str) -> DecisionView<'a> {
        DecisionView {
            policy: Some(text),
            limit: text,
            key: Some(text),
            unit: Some("bytes"),
            algorithm: limit.algorithm().as_str(),
            quota: limit.quota(),
            capacity: limit.capacity(),
            allowed: false,
            remaining: u64::MAX,
            reset_after_ms: 0,
            retry_after_ms: None,
            delay_ms: 12_345,
        }
    }

    proptest::proptest! {
        /// Eight bytes a step finds one byte to escape wherever it is among bytes that need
        /// none, and finds none where there is none.
        #[test]
        fn escapes_are_found_as_one_byte_at_a_time_finds_them(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            mark in proptest::sample::select(vec![0x00u8, 0x1f, 0x20, b'"', b'\\', b'!', 0x7f, 0x80, 0xff]),
            at in 0usize..40,
        ) {
            let mut bytes: Vec<u8> = bytes.into_iter().map(|b| if escaped(b) { b'a' } else { b }).collect();
            proptest::prop_assert!(!needs_escape(&bytes));
            bytes.insert(at.min(bytes.len()), mark);
            proptest::prop_assert_eq!(needs_escape(&bytes), escaped(mark));
        }
    }

    #[test]
    fn answers_are_written_as_serde_writes_them() {
        let limit =
            Limit::new("per-user", Algorithm::Gcra, Quota::per_second(100).unwrap()).unwrap();
        let texts = [
            "user:42",
            "",
            "quote \" backslash \\ slash / tab \t nul \u{0} del \u{7f}",
            "naïve ✓ \u{1F600} \u{2028}",
        ];
        let names: Vec<Arc<str>> = texts.iter().map(|t| Arc::from(*t)).collect();
        for text in texts {
            for (policies, charge, binding, retry) in [
                (false, None, None, None),
                (true, Some(text.to_owned()), Some(3), Some(0)),
                (true, None, Some(0), Some(u64::MAX)),
                (false, Some("c1.00ff".to_owned()), Some(1), None),
            ] {
                let mut bare = decision(&limit, text);
                bare.policy = None;
                bare.key = None;
                bare.unit = None;
                bare.allowed = true;
                bare.retry_after_ms = Some(7);
                let answer = CheckAnswer {
                    allowed: charge.is_some(),
                    verdict: "allow",
                    status: 429,
                    retry_after_ms: retry,
                    delay_ms: 0,
                    at: 1_795_219_376_321_428,
                    charge,
                    binding,
                    policies: policies.then(|| PolicyView {
                        detail: binding.filter(|b| *b > 0).map(|_| text),
                        decided_by: "store",
                        matched_policies: &names,
                        violated_policies: &names[..1],
                        shadow_denied: &[],
                        near_limit: retry.is_some(),
                        replay: binding.is_none(),
                    }),
                    decisions: vec![decision(&limit, text), bare],
                };
                let expected = serde_json::to_string(&answer).unwrap();
                assert_eq!(String::from_utf8(answer.to_json()).unwrap(), expected);
                let empty = CheckAnswer {
                    decisions: Vec::new(),
                    ..answer
                };
                let expected = serde_json::to_string(&empty).unwrap();
                assert_eq!(String::from_utf8(empty.to_json()).unwrap(), expected);
            }
        }
    }
}
