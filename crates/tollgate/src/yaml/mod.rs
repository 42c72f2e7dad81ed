//! Configuration errors that say where, and (with the `yaml` feature) the reader of YAML files
//! that finds them all.
//!
//! A configuration is read in one pass that keeps going after a problem, so a file with five
//! mistakes reports five errors, each as `file:line:column: what was wrong (what was expected)`.
//! Unknown fields are errors, never silently ignored. Configuration built in code is checked
//! with the same errors, without a line and column.

#[cfg(feature = "yaml")]
mod calendar;
#[cfg(feature = "yaml")]
mod node;
mod reader;

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "yaml")]
pub use calendar::read_calendar;
#[cfg(feature = "yaml")]
pub use node::{Map, Node};
pub use reader::Reader;

/// The largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Where in a file something was written: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Origin {
    /// 1-based line; 0 when the value was built in code.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// One problem in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or `<config>` for configuration built in code or passed as text).
    pub source: Arc<str>,
    /// Where in it.
    pub origin: Origin,
    /// What was wrong, and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.origin.line == 0 {
            write!(f, "{}: {}", self.source, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.source, self.origin.line, self.origin.column, self.message
            )
        }
    }
}

/// Every problem found in a configuration, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// One error without a location.
    pub fn single(source: &str, message: impl Into<String>) -> Self {
        Self(vec![ConfigError {
            source: source.into(),
            origin: Origin::default(),
            message: message.into(),
        }])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The closest of `candidates` to `word`, if it is close enough to be a likely typo.
#[cfg(feature = "yaml")]
pub(crate) fn suggestion<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    candidates
        .iter()
        .map(|candidate| (edit_distance(word, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 4))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(feature = "yaml")]
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
#[cfg(feature = "yaml")]
mod tests {
    use super::*;

    #[test]
    fn suggests_only_close_words() {
        let fields = ["limits", "match", "key", "name"];
        assert_eq!(suggestion("limts", &fields), Some("limits"));
        assert_eq!(suggestion("nmae", &fields), Some("name"));
        assert_eq!(suggestion("quota", &fields), None);
    }
}
