//! The `/json` form of `ShouldRateLimit`: a `RateLimitRequest` in proto3 JSON in, a
//! `RateLimitResponse` in proto3 JSON out (lowerCamelCase names, enums by name, durations as
//! `"58s"`, zero values left out), with status 429 when over the limit.

use serde_json::{Map, Value, json};

use super::proto::common::RateLimitDescriptor;
use super::proto::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use super::proto::service::rate_limit_response::rate_limit::Unit;
use super::proto::service::rate_limit_response::{Code, DescriptorStatus};
use super::proto::service::{RateLimitRequest, RateLimitResponse};
use super::proto::types::RateLimitUnit;

/// The largest `/json` request body read, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A field written in either style (`hitsAddend` or `hits_addend`), but not both.
fn field<'v>(
    object: &'v Map<String, Value>,
    names: [&str; 2],
    what: &str,
) -> Result<Option<&'v Value>, String> {
    let [camel, snake] = names;
    match (object.get(camel), object.get(snake)) {
        (Some(_), Some(_)) => Err(format!("{what}: give {camel} or {snake}, not both")),
        (camel, snake) => Ok(camel.or(snake)),
    }
}

fn object<'v>(
    value: &'v Value,
    what: &str,
    known: &[&str],
) -> Result<&'v Map<String, Value>, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("{what}: expected an object"))?;
    if let Some(unknown) = object.keys().find(|key| !known.contains(&key.as_str())) {
        return Err(format!("{what}: unknown field {unknown:?}"));
    }
    Ok(object)
}

/// A JSON number as a whole number: `5` and `5.0` alike (up to 2^53, where doubles are exact).
fn whole(number: &serde_json::Number) -> Option<u64> {
    number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(f))
            .map(|f| f as u64)
    })
}

fn unsigned(value: Option<&Value>, what: &str, max: u64) -> Result<u64, String> {
    let parsed = match value {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::Number(number)) => whole(number),
        // Digits only: proto3 JSON writes integers as numbers or decimal strings.
        Some(Value::String(text))
            if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) =>
        {
            text.parse().ok()
        }
        Some(_) => None,
    };
    parsed
        .filter(|n| *n <= max)
        .ok_or_else(|| format!("{what}: expected a whole number from 0 to {max}"))
}

fn string(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(format!("{what}: expected a string")),
    }
}

fn override_unit(value: Option<&Value>, what: &str) -> Result<i32, String> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(name)) => RateLimitUnit::from_str_name(name)
            .map(|unit| unit as i32)
            .ok_or_else(|| format!("{what}: unknown unit {name:?}")),
        Some(Value::Number(number)) => whole(number)
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| format!("{what}: unknown unit {number}")),
        Some(_) => Err(format!("{what}: expected a unit name")),
    }
}

/// Reads a `RateLimitRequest` from proto3 JSON (either field-name style); unknown fields are
/// errors.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value =
        tollgate::json::from_slice(body).map_err(|error| format!("invalid JSON: {error}"))?;
    let request = object(
        &value,
        "the request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut descriptors = Vec::new();
    if let Some(list) = request.get("descriptors") {
        let list = list.as_array().ok_or("descriptors: expected a list")?;
        for (index, item) in list.iter().enumerate() {
            let what = format!("descriptors[{index}]");
            let descriptor = object(
                item,
                &what,
                &["entries", "limit", "hitsAddend", "hits_addend"],
            )?;
            let mut entries = Vec::new();
            if let Some(list) = descriptor.get("entries") {
                let list = list
                    .as_array()
                    .ok_or_else(|| format!("{what}.entries: expected a list"))?;
                for (position, entry) in list.iter().enumerate() {
                    let what = format!("{what}.entries[{position}]");
                    let entry = object(entry, &what, &["key", "value"])?;
                    entries.push(Entry {
                        key: string(entry.get("key"), &format!("{what}.key"))?,
                        value: string(entry.get("value"), &format!("{what}.value"))?,
                    });
                }
            }
            let limit = match descriptor.get("limit") {
                None | Some(Value::Null) => None,
                Some(limit) => {
                    let what = format!("{what}.limit");
                    let limit = object(
                        limit,
                        &what,
                        &["requestsPerUnit", "requests_per_unit", "unit"],
                    )?;
                    Some(RateLimitOverride {
                        requests_per_unit: unsigned(
                            field(limit, ["requestsPerUnit", "requests_per_unit"], &what)?,
                            &format!("{what}.requestsPerUnit"),
                            u64::from(u32::MAX),
                        )? as u32,
                        unit: override_unit(limit.get("unit"), &format!("{what}.unit"))?,
                    })
                }
            };
            let hits_addend = match field(descriptor, ["hitsAddend", "hits_addend"], &what)? {
                None | Some(Value::Null) => None,
                Some(value) => Some(unsigned(
                    Some(value),
                    &format!("{what}.hitsAddend"),
                    u64::MAX,
                )?),
            };
            descriptors.push(RateLimitDescriptor {
                entries,
                limit,
                hits_addend,
            });
        }
    }
    Ok(RateLimitRequest {
        domain: string(request.get("domain"), "domain")?,
        descriptors,
        hits_addend: unsigned(
            field(request, ["hitsAddend", "hits_addend"], "the request")?,
            "hitsAddend",
            u64::from(u32::MAX),
        )? as u32,
    })
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).unwrap_or(Code::Unknown).as_str_name()
}

fn status_json(status: &DescriptorStatus) -> Value {
    let mut object = Map::new();
    object.insert("code".into(), json!(code_name(status.code)));
    if let Some(limit) = &status.current_limit {
        let mut current = Map::new();
        if !limit.name.is_empty() {
            current.insert("name".into(), json!(limit.name));
        }
        if limit.requests_per_unit != 0 {
            current.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
        }
        let unit = Unit::try_from(limit.unit).unwrap_or(Unit::Unknown);
        if unit != Unit::Unknown {
            current.insert("unit".into(), json!(unit.as_str_name()));
        }
        object.insert("currentLimit".into(), Value::Object(current));
    }
    if status.limit_remaining != 0 {
        object.insert("limitRemaining".into(), json!(status.limit_remaining));
    }
    if let Some(duration) = &status.duration_until_reset {
        object.insert(
            "durationUntilReset".into(),
            json!(format!("{}s", duration.seconds)),
        );
    }
    Value::Object(object)
}

/// Writes a `RateLimitResponse` as proto3 JSON.
pub fn render_response(response: &RateLimitResponse) -> Value {
    let mut object = Map::new();
    object.insert(
        "overallCode".into(),
        json!(code_name(response.overall_code)),
    );
    object.insert(
        "statuses".into(),
        Value::Array(response.statuses.iter().map(status_json).collect()),
    );
    if !response.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = response
            .response_headers_to_add
            .iter()
            .map(|header| json!({"key": header.key, "value": header.value}))
            .collect();
        object.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        object.insert("dynamicMetadata".into(), struct_json(metadata));
    }
    Value::Object(object)
}

/// A protobuf `Struct` as the JSON object it stands for.
fn struct_json(value: &prost_types::Struct) -> Value {
    Value::Object(
        value
            .fields
            .iter()
            .map(|(name, value)| (name.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        Some(Kind::StructValue(inner)) => struct_json(inner),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(value_json).collect()),
        Some(Kind::BoolValue(flag)) => json!(flag),
        Some(Kind::NumberValue(number)) => json!(number),
        Some(Kind::StringValue(text)) => json!(text),
        Some(Kind::NullValue(_)) | None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_in_both_field_styles_and_strictly() {
        let request = parse_request(
            br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"},"hitsAddend":"0"}]}"#,
        )
        .unwrap();
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 2);
        assert_eq!(request.descriptors[0].hits_addend, Some(0));
        assert_eq!(
            request.descriptors[0].limit.as_ref().unwrap().unit,
            RateLimitUnit::Minute as i32
        );
        // Whole numbers written as doubles, as some proto3 JSON writers do.
        let request = parse_request(
            br#"{"domain":"d","hitsAddend":2.0,"descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":5.0,"unit":2.0}}]}"#,
        )
        .unwrap();
        assert_eq!(request.hits_addend, 2);
        assert_eq!(
            request.descriptors[0]
                .limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            5
        );
        for refused in [
            r#"{"domain":"d","hitsAddend":2.5}"#,
            r#"{"domain":"d","hitsAddend":"+2"}"#,
            r#"{"domain":"d","hitsAddend":" 2"}"#,
            r#"{"domain":"d","hitsAddend":1,"hits_addend":1}"#,
        ] {
            assert!(parse_request(refused.as_bytes()).is_err(), "{refused}");
        }
        let error = parse_request(br#"{"domain":"d","descriptor":[]}"#).unwrap_err();
        assert_eq!(error, "the request: unknown field \"descriptor\"");
        assert!(
            parse_request(b"{nope")
                .unwrap_err()
                .starts_with("invalid JSON")
        );
    }
}
