//! Bulk import and export, for migrations from another limiter and for backups: one override
//! per line, as JSON (JSON Lines). An export line carries `updated_by`, `updated_at` and
//! `version` beside the override; an import reads lines with or without them.

use std::collections::HashMap;

use super::MAX_OVERRIDES;
use super::model::{Override, StoredOverride};

/// The longest line an import reads.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// `stored` as JSON lines, in the order given.
pub fn export(stored: &[StoredOverride]) -> String {
    let mut text = String::new();
    for one in stored {
        text.push_str(&one.to_json().to_string());
        text.push('\n');
    }
    text
}

/// The overrides of an import, each checked, with its line number (from 1; blank lines are
/// skipped); the error names the line and what is wrong with it. Nothing is read past the first
/// error.
pub fn parse(text: &str) -> Result<Vec<(usize, Override)>, String> {
    let mut read = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.len() > MAX_LINE_BYTES {
            return Err(format!("line {number}: longer than {MAX_LINE_BYTES} bytes"));
        }
        if read.len() == MAX_OVERRIDES {
            return Err(format!(
                "line {number}: more than {MAX_OVERRIDES} overrides"
            ));
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|error| format!("line {number}: not JSON: {error}"))?;
        let (item, _) =
            StoredOverride::from_json(value).map_err(|error| format!("line {number}: {error}"))?;
        item.validate()
            .map_err(|error| format!("line {number}: {error}"))?;
        if let Some(first) = seen.insert(item.target().id(), number) {
            return Err(format!(
                "line {number}: the same policy, key and limit as line {first}"
            ));
        }
        read.push((number, item));
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_reads_back_and_a_bad_line_is_named() {
        let text = "{\"policy\":\"api\",\"key\":\"tenant:a\",\"change\":\"deny\",\"version\":3,\"updated_by\":\"x\",\"updated_at\":\"2026-01-01T00:00:00Z\"}\n\n{\"policy\":\"api\",\"key\":\"tenant:b\",\"change\":{\"multiply\":2}}\n";
        let read = parse(text).unwrap();
        assert_eq!(read.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3]);
        let stored: Vec<StoredOverride> = read
            .iter()
            .map(|(_, item)| StoredOverride {
                item: item.clone(),
                updated_by: "me".into(),
                updated_at: "now".into(),
                version: 1,
            })
            .collect();
        let again: Vec<Override> = parse(&export(&stored))
            .unwrap()
            .into_iter()
            .map(|(_, item)| item)
            .collect();
        assert_eq!(
            again,
            read.into_iter().map(|(_, item)| item).collect::<Vec<_>>()
        );
        let cases = [
            ("{\"policy\":\"api\"}", "line 1: missing field"),
            ("\n\nnope", "line 3: not JSON"),
            (
                "{\"policy\":\"api\",\"key\":\"k\",\"change\":{\"multiply\":-1}}",
                "line 1: change.multiply",
            ),
            (
                "{\"policy\":\"api\",\"key\":\"k\",\"change\":\"deny\"}\n{\"policy\":\"api\",\"key\":\"k\",\"change\":\"allow\"}",
                "line 2: the same policy, key and limit as line 1",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
        }
    }
}
