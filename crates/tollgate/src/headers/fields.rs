//! A response's header fields as the renderers write them: every value in one text, so that
//! a frontend turns them into header values with one allocation rather than one a field.

use std::fmt;
use std::ops::Range;

/// Named header field values, in order, their text held together. Two are equal when they
/// hold the same fields in the same order, whatever text a removed field left behind.
#[derive(Clone, Default)]
pub struct Fields {
    text: String,
    entries: Vec<(&'static str, Range<usize>)>,
}

impl Fields {
    /// Room for `fields` fields of `bytes` bytes of values in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> Self {
        Self {
            text: String::with_capacity(bytes),
            entries: Vec::with_capacity(fields),
        }
    }

    /// Adds the field `name: value`.
    pub fn push(&mut self, name: &'static str, value: &str) {
        self.push_with(name, |text| text.push_str(value));
    }

    /// Adds the field `name` with a number as its value.
    pub fn push_number(&mut self, name: &'static str, value: u64) {
        self.push(name, itoa::Buffer::new().format(value));
    }

    /// Adds the field `name` with the value `write` appends to the text.
    pub fn push_with(&mut self, name: &'static str, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        self.entries.push((name, start..self.text.len()));
    }

    /// The fields in order, name and value.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        self.entries
            .iter()
            .map(|(name, range)| (*name, &self.text[range.clone()]))
    }

    /// The value of the first field named `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps only the fields `keep` says yes to (their text stays, unread).
    pub fn retain(&mut self, mut keep: impl FnMut(&'static str, &str) -> bool) {
        let text = &self.text;
        self.entries
            .retain(|(name, range)| keep(name, &text[range.clone()]));
    }

    /// The fields as owned pairs.
    pub fn to_vec(&self) -> Vec<(&'static str, String)> {
        self.iter()
            .map(|(name, value)| (name, value.to_owned()))
            .collect()
    }

    /// The text every value is a range of, and the names with their ranges.
    pub fn into_parts(self) -> (String, Vec<(&'static str, Range<usize>)>) {
        (self.text, self.entries)
    }
}

impl PartialEq for Fields {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Fields {}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_order_and_their_own_values() {
        let mut fields = Fields::with_capacity(1, 4);
        fields.push("ratelimit", r#""a";r=1"#);
        fields.push_number("x-ratelimit-limit", 100);
        fields.push_with("retry-after", |text| text.push('7'));
        fields.push("cache-control", "");
        assert_eq!(
            fields.to_vec(),
            [
                ("ratelimit", r#""a";r=1"#.to_owned()),
                ("x-ratelimit-limit", "100".to_owned()),
                ("retry-after", "7".to_owned()),
                ("cache-control", String::new()),
            ]
        );
        assert_eq!(fields.get("Retry-After"), Some("7"));
        fields.retain(|name, value| name != "x-ratelimit-limit" && !value.is_empty());
        assert_eq!(fields.len(), 2);
        let mut kept = Fields::default();
        kept.push("ratelimit", r#""a";r=1"#);
        kept.push("retry-after", "7");
        assert_eq!(fields, kept, "the same fields, though one text holds more");
        kept.push("retry-after", "7");
        assert_ne!(fields, kept);
        assert_eq!(
            format!("{fields:?}"),
            r#"[("ratelimit", "\"a\";r=1"), ("retry-after", "7")]"#
        );
        let (text, entries) = fields.into_parts();
        assert_eq!(&text[entries[1].1.clone()], "7");
    }
}
