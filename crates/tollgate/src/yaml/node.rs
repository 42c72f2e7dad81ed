//! Reading YAML (the `yaml` feature): every node keeps its line and column, so that each
//! problem is reported where it was written.

use std::borrow::Cow;
use std::fmt::Display;
use std::str::FromStr;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use super::{ConfigError, ConfigErrors, MAX_CONFIG_BYTES, Origin, Reader, suggestion};

impl Reader {
    /// Parses `text` (named `source` in messages) into its YAML documents, or fails with the
    /// syntax error.
    pub fn parse<'y>(
        source: &str,
        text: &'y str,
    ) -> Result<(Self, Vec<MarkedYaml<'y>>), ConfigErrors> {
        if text.len() > MAX_CONFIG_BYTES {
            return Err(ConfigErrors::single(
                source,
                format!(
                    "the file is {} bytes, the maximum is {MAX_CONFIG_BYTES}",
                    text.len()
                ),
            ));
        }
        let documents = MarkedYaml::load_from_str(text).map_err(|error| {
            ConfigErrors(vec![ConfigError {
                source: source.into(),
                origin: Origin {
                    line: error.marker().line(),
                    column: error.marker().col() + 1,
                },
                message: format!("invalid YAML: {}", error.info()),
            }])
        })?;
        Ok((Self::detached(source), documents))
    }

    /// The wrapped root of a document.
    pub fn node<'r, 'y>(&'r self, yaml: &'y MarkedYaml<'y>) -> Node<'r, 'y> {
        Node { reader: self, yaml }
    }
}

/// One YAML node and the reader that reports on it.
#[derive(Debug, Clone, Copy)]
pub struct Node<'r, 'y> {
    reader: &'r Reader,
    yaml: &'y MarkedYaml<'y>,
}

fn describe<'y>(data: &YamlData<'y, MarkedYaml<'y>>) -> &'static str {
    match data {
        YamlData::Value(Scalar::Null) => "nothing",
        YamlData::Value(Scalar::Boolean(_)) => "a boolean",
        YamlData::Value(Scalar::Integer(_)) => "a number",
        YamlData::Value(Scalar::FloatingPoint(_)) => "a number",
        YamlData::Value(Scalar::String(_)) | YamlData::Representation(..) => "a string",
        YamlData::Sequence(_) => "a list",
        YamlData::Mapping(_) => "a mapping",
        _ => "something else",
    }
}

impl<'r, 'y> Node<'r, 'y> {
    /// Where the node starts.
    pub fn origin(&self) -> Origin {
        let start = self.yaml.span.start;
        Origin {
            line: start.line(),
            column: start.col() + 1,
        }
    }

    /// Records a problem at this node.
    pub fn error(&self, message: impl Display) {
        self.reader.error(self.origin(), message);
    }

    /// Whether the node is a mapping.
    pub fn is_mapping(&self) -> bool {
        matches!(self.yaml.data, YamlData::Mapping(_))
    }

    /// The node as a boolean, if it is one (reports nothing).
    pub fn as_bool(&self) -> Option<bool> {
        match self.yaml.data {
            YamlData::Value(Scalar::Boolean(flag)) => Some(flag),
            _ => None,
        }
    }

    /// Whether the node is a list.
    pub fn is_sequence(&self) -> bool {
        matches!(self.yaml.data, YamlData::Sequence(_))
    }

    /// The node as a number, if it is one (reports nothing).
    pub fn as_number(&self) -> Option<f64> {
        match self.yaml.data {
            YamlData::Value(Scalar::Integer(number)) => Some(number as f64),
            YamlData::Value(Scalar::FloatingPoint(number)) => Some(*number),
            _ => None,
        }
    }

    /// Whether the node is null (an empty value).
    pub fn is_null(&self) -> bool {
        matches!(self.yaml.data, YamlData::Value(Scalar::Null))
    }

    fn mismatch(&self, what: &str, expected: &str) {
        self.error(format!(
            "{what}: expected {expected}, found {}",
            describe(&self.yaml.data)
        ));
    }

    /// The node as a mapping.
    pub fn map(&self, what: &str) -> Option<Map<'r, 'y>> {
        let YamlData::Mapping(mapping) = &self.yaml.data else {
            self.mismatch(what, "a mapping");
            return None;
        };
        let mut entries = Vec::with_capacity(mapping.len());
        for (key, value) in mapping {
            let key_node = Node {
                reader: self.reader,
                yaml: key,
            };
            match key_node.scalar_text() {
                Some(text) => entries.push((
                    text.into_owned(),
                    key_node,
                    Node {
                        reader: self.reader,
                        yaml: value,
                    },
                )),
                None => key_node.mismatch(what, "a plain key"),
            }
        }
        Some(Map {
            node: *self,
            entries,
        })
    }

    /// The node as a list; a single value counts as a list of one.
    pub fn list(&self) -> Vec<Node<'r, 'y>> {
        match &self.yaml.data {
            YamlData::Sequence(items) => items
                .iter()
                .map(|yaml| Node {
                    reader: self.reader,
                    yaml,
                })
                .collect(),
            YamlData::Value(Scalar::Null) => Vec::new(),
            _ => vec![*self],
        }
    }

    /// The node as a list, which it must be.
    pub fn strict_list(&self, what: &str) -> Option<Vec<Node<'r, 'y>>> {
        if matches!(self.yaml.data, YamlData::Sequence(_)) {
            Some(self.list())
        } else {
            self.mismatch(what, "a list");
            None
        }
    }

    fn scalar_text(&self) -> Option<Cow<'y, str>> {
        match &self.yaml.data {
            YamlData::Value(Scalar::String(text)) => Some(text.clone()),
            YamlData::Value(Scalar::Integer(number)) => Some(number.to_string().into()),
            YamlData::Value(Scalar::FloatingPoint(number)) => Some(number.to_string().into()),
            YamlData::Value(Scalar::Boolean(flag)) => Some(flag.to_string().into()),
            YamlData::Representation(text, ..) => Some(text.clone()),
            _ => None,
        }
    }

    /// The node as text (a string, or a number or boolean written as text).
    pub fn text(&self, what: &str) -> Option<Cow<'y, str>> {
        let text = self.scalar_text();
        if text.is_none() {
            self.mismatch(what, "a value");
        }
        text
    }

    /// The node as a boolean.
    pub fn boolean(&self, what: &str) -> Option<bool> {
        match &self.yaml.data {
            YamlData::Value(Scalar::Boolean(flag)) => Some(*flag),
            _ => {
                self.mismatch(what, "true or false");
                None
            }
        }
    }

    /// The node parsed with `FromStr`; the parse error becomes the message.
    pub fn parse<T: FromStr>(&self, what: &str) -> Option<T>
    where
        T::Err: Display,
    {
        let text = self.text(what)?;
        match text.trim().parse::<T>() {
            Ok(value) => Some(value),
            Err(error) => {
                self.error(format!("{what}: {error}"));
                None
            }
        }
    }

    /// The node as a whole number within `range`.
    pub fn number(&self, what: &str, range: std::ops::RangeInclusive<u64>) -> Option<u64> {
        let value = match &self.yaml.data {
            YamlData::Value(Scalar::Integer(number)) => u64::try_from(*number).ok(),
            _ => None,
        };
        match value {
            Some(value) if range.contains(&value) => Some(value),
            _ => {
                self.error(format!(
                    "{what}: expected a whole number from {} to {}",
                    range.start(),
                    range.end()
                ));
                None
            }
        }
    }
}

/// A mapping being read.
#[derive(Debug)]
pub struct Map<'r, 'y> {
    node: Node<'r, 'y>,
    entries: Vec<(String, Node<'r, 'y>, Node<'r, 'y>)>,
}

impl<'r, 'y> Map<'r, 'y> {
    /// Where the mapping starts.
    pub fn origin(&self) -> Origin {
        self.node.origin()
    }

    /// Records a problem at the mapping.
    pub fn error(&self, message: impl Display) {
        self.node.error(message);
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Node<'r, 'y>> {
        self.entries
            .iter()
            .find(|(name, _, _)| name == key)
            .map(|(_, _, value)| *value)
    }

    /// The value of `key`, which must be present.
    pub fn required(&self, key: &str, what: &str) -> Option<Node<'r, 'y>> {
        let value = self.get(key);
        if value.is_none() {
            self.node
                .error(format!("{what}: missing required field \"{key}\""));
        }
        value
    }

    /// Every entry as (key text, key node, value node), for mappings whose keys are names.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Node<'r, 'y>, Node<'r, 'y>)> + '_ {
        self.entries
            .iter()
            .map(|(name, key, value)| (name.as_str(), *key, *value))
    }

    /// Reports every field `what` does not accept, with the fields it does.
    pub fn deny_unknown(&self, what: &str, known: &[&str]) {
        for (name, key, _) in &self.entries {
            if known.contains(&name.as_str()) {
                continue;
            }
            let hint = suggestion(name, known)
                .map_or_else(String::new, |close| format!("; did you mean \"{close}\"?"));
            key.error(format!(
                "{what}: unknown field \"{name}\" (expected one of: {}){hint}",
                known.join(", ")
            ));
        }
    }
}
