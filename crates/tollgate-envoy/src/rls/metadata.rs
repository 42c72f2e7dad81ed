//! Descriptor `metadata` and the response's dynamic metadata, as envoyproxy/ratelimit gives
//! them (with `--rls-response-dynamic-metadata`, its RESPONSE_DYNAMIC_METADATA): the request's
//! domain, descriptors and `hits_addend`, and the metadata of the descriptors that passed,
//! merged (the first value of a field wins; nested mappings merge).

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use tollgate::yaml::Node;

use super::proto::common::RateLimitDescriptor;
use super::proto::service::RateLimitRequest;

/// A YAML mapping as a protobuf `Struct`, or `None` (reported) if it is not a mapping.
pub(crate) fn from_yaml(node: Node<'_, '_>, what: &str) -> Option<Struct> {
    let map = node.map(what)?;
    Some(Struct {
        fields: map
            .entries()
            .map(|(name, _, value)| (name.to_owned(), value_of(value, what)))
            .collect(),
    })
}

fn value_of(node: Node<'_, '_>, what: &str) -> Value {
    let kind = if node.is_mapping() {
        Kind::StructValue(from_yaml(node, what).unwrap_or_default())
    } else if node.is_sequence() {
        Kind::ListValue(ListValue {
            values: node.list().into_iter().map(|n| value_of(n, what)).collect(),
        })
    } else if let Some(flag) = node.as_bool() {
        Kind::BoolValue(flag)
    } else if let Some(number) = node.as_number() {
        Kind::NumberValue(number)
    } else if node.is_null() {
        Kind::NullValue(0)
    } else {
        Kind::StringValue(node.text(what).map(|t| t.into_owned()).unwrap_or_default())
    };
    Value { kind: Some(kind) }
}

/// Adds `from`'s fields to `into`: a field already there stays, except that two mappings merge.
pub(crate) fn merge(into: &mut Struct, from: &Struct) {
    for (name, value) in &from.fields {
        match (into.fields.get_mut(name), &value.kind) {
            (None, _) => {
                into.fields.insert(name.clone(), value.clone());
            }
            (
                Some(Value {
                    kind: Some(Kind::StructValue(existing)),
                }),
                Some(Kind::StructValue(more)),
            ) => merge(existing, more),
            (Some(_), _) => {}
        }
    }
}

fn string(text: impl Into<String>) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.into())),
    }
}

fn number(n: u64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n as f64)),
    }
}

fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::BTreeMap::new();
    let entries = descriptor
        .entries
        .iter()
        .map(|entry| string(format!("{}={}", entry.key, entry.value)))
        .collect();
    fields.insert(
        "entries".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue { values: entries })),
        },
    );
    if let Some(limit) = &descriptor.limit {
        fields.insert(
            "limit".to_owned(),
            string(format!(
                "requests_per_unit:{} unit:{}",
                limit.requests_per_unit,
                super::proto::types::RateLimitUnit::try_from(limit.unit)
                    .map_or("UNKNOWN", |unit| unit.as_str_name())
            )),
        );
    }
    if let Some(addend) = descriptor.hits_addend.filter(|addend| *addend > 0) {
        fields.insert("hitsAddend".to_owned(), number(addend));
    }
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

/// The dynamic metadata of an answer to `request`, with `passed` the merged metadata of the
/// descriptors that were not over their limits.
pub(crate) fn dynamic(request: &RateLimitRequest, passed: Struct) -> Struct {
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("domain".to_owned(), string(&request.domain));
    fields.insert(
        "descriptors".to_owned(),
        Value {
            kind: Some(Kind::ListValue(ListValue {
                values: request.descriptors.iter().map(descriptor).collect(),
            })),
        },
    );
    if request.hits_addend > 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number(u64::from(request.hits_addend)),
        );
    }
    if !passed.fields.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            Value {
                kind: Some(Kind::StructValue(passed)),
            },
        );
    }
    Struct { fields }
}
