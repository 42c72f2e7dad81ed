//! RateLimitConfig resources into the rate limit service's configuration. Each resource
//! becomes the document a YAML file would hold (as envoyproxy/ratelimit turns them into its
//! YAML model), written as JSON, which YAML reads, so that one parser checks files and
//! resources alike: the same fields, limits, errors and MERGE_DOMAIN_CONFIG rules.

use prost::Message as _;
use prost_types::value::Kind;
use serde_json::{Map, Value, json};

use super::super::MAX_FILES;
use super::super::config::{MAX_DEPTH, RlsConfig};
use super::super::proto::rls_conf::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// The longest refusal said (in a NACK and the log): past it, the problems are counted.
const MAX_REFUSAL_BYTES: usize = 16 << 10;

/// The type of the resources subscribed to.
pub(crate) const TYPE_URL: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The configuration the resources of one response make, or why it is refused: every problem,
/// each naming its resource.
pub(crate) fn configuration(
    resources: &[prost_types::Any],
    merge_domains: bool,
) -> Result<RlsConfig, String> {
    if resources.len() > MAX_FILES {
        return Err(format!(
            "{} resources, the most taken is {MAX_FILES}",
            resources.len()
        ));
    }
    let mut documents = Vec::with_capacity(resources.len());
    let mut problems = Vec::new();
    for (index, any) in resources.iter().enumerate() {
        match document(any) {
            Ok((name, text)) => documents.push((source(&name, index), text)),
            Err((name, problem)) => {
                problems.push(format!("{}: {problem}", source(&name, index)));
            }
        }
    }
    if !problems.is_empty() {
        return Err(refusal(problems));
    }
    RlsConfig::from_sources(
        documents
            .iter()
            .map(|(name, text)| (name.as_str(), text.as_str())),
        merge_domains,
        "resource",
    )
    .map_err(|errors| {
        // Positions would point into the JSON made here, which nobody sees: the message
        // names the descriptor instead.
        refusal(
            errors
                .0
                .iter()
                .map(|error| format!("{}: {}", error.source, error.message))
                .collect(),
        )
    })
}

/// The problems, `; `-separated, as many as fit in [`MAX_REFUSAL_BYTES`], then how many more.
fn refusal(problems: Vec<String>) -> String {
    let mut said = String::new();
    for (index, problem) in problems.iter().enumerate() {
        let separator = if said.is_empty() { "" } else { "; " };
        if said.len() + separator.len() + problem.len() > MAX_REFUSAL_BYTES {
            let left = problems.len() - index;
            if said.is_empty() {
                let mut end = MAX_REFUSAL_BYTES;
                while !problem.is_char_boundary(end) {
                    end -= 1;
                }
                said.push_str(&problem[..end]);
                said.push_str("...");
                if left > 1 {
                    said.push_str(&format!("; and {} more problems", left - 1));
                }
            } else {
                said.push_str(&format!("; and {left} more problems"));
            }
            return said;
        }
        said.push_str(separator);
        said.push_str(problem);
    }
    said
}

/// How messages name a resource: by its name, else by its place in the response.
fn source(name: &str, index: usize) -> String {
    if name.is_empty() {
        format!("resource #{index}")
    } else {
        format!("resource {name:?}")
    }
}

/// A resource's name and its document, or its name (if it could be read) and what is wrong.
fn document(any: &prost_types::Any) -> Result<(String, String), (String, String)> {
    if any.type_url != TYPE_URL {
        return Err((
            String::new(),
            format!("type {:?} is not {TYPE_URL}", any.type_url),
        ));
    }
    let config = RateLimitConfig::decode(any.value.as_slice())
        .map_err(|error| (String::new(), format!("cannot be decoded: {error}")))?;
    let mut descriptors = Vec::with_capacity(config.descriptors.len());
    for descriptor in &config.descriptors {
        descriptors.push(descriptor_json(descriptor, "", 1).map_err(|p| (config.name.clone(), p))?);
    }
    let text = json!({ "domain": config.domain, "descriptors": descriptors }).to_string();
    Ok((config.name, text))
}

/// One descriptor, as a YAML file writes it; `parent` names the descriptors above it as the
/// parser's messages do (`key_value.key`).
fn descriptor_json(
    descriptor: &RateLimitDescriptor,
    parent: &str,
    depth: usize,
) -> Result<Value, String> {
    let this = if descriptor.value.is_empty() {
        descriptor.key.clone()
    } else {
        format!("{}_{}", descriptor.key, descriptor.value)
    };
    let here = if parent.is_empty() {
        this
    } else {
        format!("{parent}.{this}")
    };
    if depth > MAX_DEPTH {
        return Err(format!(
            "descriptor {here:?}: descriptors nested deeper than {MAX_DEPTH} levels"
        ));
    }
    let mut fields = Map::new();
    fields.insert("key".into(), Value::from(descriptor.key.as_str()));
    if !descriptor.value.is_empty() {
        fields.insert("value".into(), Value::from(descriptor.value.as_str()));
    }
    if let Some(policy) = &descriptor.rate_limit {
        fields.insert("rate_limit".into(), policy_json(policy, &here)?);
    }
    for (name, set) in [
        ("shadow_mode", descriptor.shadow_mode),
        ("detailed_metric", descriptor.detailed_metric),
        ("quota_mode", descriptor.quota_mode),
    ] {
        if set {
            fields.insert(name.into(), Value::Bool(true));
        }
    }
    if let Some(metadata) = &descriptor.metadata {
        let what = format!("descriptor {here:?}: metadata");
        fields.insert("metadata".into(), struct_json(metadata, &what)?);
    }
    if !descriptor.descriptors.is_empty() {
        let children = descriptor
            .descriptors
            .iter()
            .map(|child| descriptor_json(child, &here, depth + 1))
            .collect::<Result<Vec<_>, _>>()?;
        fields.insert("descriptors".into(), Value::Array(children));
    }
    Ok(Value::Object(fields))
}

/// A `rate_limit`: its unit by name as upstream writes it (`UNKNOWN` is no unit, which only an
/// unlimited limit may have).
fn policy_json(policy: &RateLimitPolicy, here: &str) -> Result<Value, String> {
    let unit = RateLimitUnit::try_from(policy.unit).map_err(|_| {
        format!(
            "descriptor {here:?}: rate_limit.unit: {} is not a RateLimitUnit",
            policy.unit
        )
    })?;
    let mut fields = Map::new();
    match unit {
        RateLimitUnit::Unknown if !policy.unlimited => {
            return Err(format!(
                "descriptor {here:?}: rate_limit.unit: UNKNOWN, which only an unlimited limit \
                 may have (expected one of: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR)"
            ));
        }
        RateLimitUnit::Unknown => {}
        unit => {
            fields.insert("unit".into(), Value::from(unit.as_str_name()));
        }
    }
    fields.insert(
        "requests_per_unit".into(),
        Value::from(policy.requests_per_unit),
    );
    if policy.unlimited {
        fields.insert("unlimited".into(), Value::Bool(true));
    }
    if !policy.name.is_empty() {
        fields.insert("name".into(), Value::from(policy.name.as_str()));
    }
    if !policy.replaces.is_empty() {
        let replaces = policy
            .replaces
            .iter()
            .map(|replace| json!({ "name": replace.name }))
            .collect();
        fields.insert("replaces".into(), Value::Array(replaces));
    }
    Ok(Value::Object(fields))
}

/// A protobuf `Struct` as a JSON object; numbers must be finite, as JSON's are.
fn struct_json(value: &prost_types::Struct, what: &str) -> Result<Value, String> {
    value
        .fields
        .iter()
        .map(|(name, field)| Ok((name.clone(), value_json(field, what)?)))
        .collect::<Result<Map<_, _>, String>>()
        .map(Value::Object)
}

fn value_json(value: &prost_types::Value, what: &str) -> Result<Value, String> {
    Ok(match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(flag)) => Value::Bool(*flag),
        Some(Kind::StringValue(text)) => Value::from(text.as_str()),
        Some(Kind::NumberValue(number)) => serde_json::Number::from_f64(*number)
            .map(Value::Number)
            .ok_or_else(|| format!("{what}: {number} is not a finite number"))?,
        Some(Kind::StructValue(inner)) => struct_json(inner, what)?,
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .iter()
                .map(|item| value_json(item, what))
                .collect::<Result<_, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use prost_types::{ListValue, Struct};

    use super::super::super::proto::rls_conf::RateLimitReplace;
    use super::*;

    fn any(config: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: TYPE_URL.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    fn limited(key: &str, value: &str, unit: RateLimitUnit, requests: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.to_owned(),
            value: value.to_owned(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }
    }

    fn domain(name: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.to_owned(),
            domain: name.to_owned(),
            descriptors,
        }
    }

    #[test]
    fn every_field_reaches_the_tree_as_a_file_would_write_it() {
        let mut nested = limited("path", "/login", RateLimitUnit::Minute, 5);
        nested.shadow_mode = true;
        nested.quota_mode = true;
        nested.detailed_metric = true;
        if let Some(policy) = nested.rate_limit.as_mut() {
            policy.name = "login".to_owned();
            policy.replaces = vec![RateLimitReplace {
                name: "per-client".to_owned(),
            }];
        }
        let text = |s: &str| prost_types::Value {
            kind: Some(Kind::StringValue(s.to_owned())),
        };
        nested.metadata = Some(Struct {
            fields: [
                ("quoted".to_owned(), text("123")),
                ("flag".to_owned(), text("true")),
                (
                    "list".to_owned(),
                    prost_types::Value {
                        kind: Some(Kind::ListValue(ListValue {
                            values: vec![prost_types::Value {
                                kind: Some(Kind::NumberValue(2.5)),
                            }],
                        })),
                    },
                ),
            ]
            .into_iter()
            .collect(),
        });
        let mut client = limited("client", "", RateLimitUnit::Second, 100);
        client.descriptors = vec![nested];
        let unlimited = RateLimitDescriptor {
            key: "internal".to_owned(),
            rate_limit: Some(RateLimitPolicy {
                unlimited: true,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        };
        let config =
            configuration(&[any(&domain("edge", vec![client, unlimited]))], false).expect("taken");
        assert_eq!(
            config.describe_limits(),
            [
                "edge.client.path_/login: unit=MINUTE requests_per_unit=5, shadow_mode: true, quota_mode: true",
                "edge.client: unit=SECOND requests_per_unit=100, shadow_mode: false, quota_mode: false",
                "edge.internal: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false",
            ]
        );
        let mut rules = Vec::new();
        crate::rls::tree::visit_rules(&config.domains["edge"], &mut |rule| {
            if rule.name.as_deref() == Some("login") {
                rules.push((
                    rule.replaces.clone(),
                    rule.detailed_metric,
                    rule.metadata.clone(),
                ));
            }
        });
        let [(replaces, detailed, metadata)] = rules.as_slice() else {
            panic!("one rule named login: {rules:?}");
        };
        assert_eq!(replaces, &["per-client"]);
        assert!(detailed);
        let metadata = metadata.as_ref().expect("metadata");
        assert_eq!(
            metadata.fields["quoted"],
            text("123"),
            "strings stay strings"
        );
        assert_eq!(metadata.fields["flag"], text("true"));
        assert!(matches!(
            &metadata.fields["list"].kind,
            Some(Kind::ListValue(list)) if list.values[0].kind == Some(Kind::NumberValue(2.5))
        ));
    }

    #[test]
    fn keys_and_values_of_any_text_survive_the_trip() {
        for value in [
            "quote\"d",
            "back\\slash",
            "new\nline",
            "ünïcode ✓",
            "tab\t",
            "*wild*",
            "#x: y",
            "- z",
            "\u{0}",
        ] {
            let config = configuration(
                &[any(&domain(
                    "d",
                    vec![limited("k", value, RateLimitUnit::Hour, 1)],
                ))],
                false,
            )
            .unwrap_or_else(|error| panic!("{value:?}: {error}"));
            let root = &config.domains["d"];
            let found = root
                .exact
                .get("k")
                .is_some_and(|values| values.contains_key(value))
                || root.wildcards.iter().any(|w| w.pattern == value);
            assert!(found, "{value:?} became {root:?}");
        }
    }

    #[test]
    fn an_unknown_unit_is_refused_unless_unlimited_naming_the_resource_and_descriptor() {
        let mut inner = limited("b", "2", RateLimitUnit::Unknown, 10);
        let mut outer = limited("a", "1", RateLimitUnit::Second, 1);
        outer.descriptors = vec![inner.clone()];
        let error = configuration(&[any(&domain("edge", vec![outer.clone()]))], false)
            .expect_err("refused");
        assert!(
            error
                .starts_with("resource \"edge\": descriptor \"a_1.b_2\": rate_limit.unit: UNKNOWN"),
            "{error}"
        );
        if let Some(policy) = inner.rate_limit.as_mut() {
            policy.unlimited = true;
        }
        outer.descriptors = vec![inner];
        assert!(configuration(&[any(&domain("edge", vec![outer]))], false).is_ok());
        let mut bad = limited("a", "", RateLimitUnit::Second, 1);
        if let Some(policy) = bad.rate_limit.as_mut() {
            policy.unit = 42;
        }
        let error = configuration(&[any(&domain("edge", vec![bad]))], false).expect_err("refused");
        assert!(error.contains("42 is not a RateLimitUnit"), "{error}");
    }

    #[test]
    fn the_parsers_own_checks_apply_with_the_resource_named() {
        let mut unlimited_with_unit = limited("a", "", RateLimitUnit::Second, 1);
        if let Some(policy) = unlimited_with_unit.rate_limit.as_mut() {
            policy.unlimited = true;
        }
        let error = configuration(&[any(&domain("edge", vec![unlimited_with_unit]))], false)
            .expect_err("refused");
        assert!(error.starts_with("resource \"edge\": "), "{error}");
        assert!(error.contains("unlimited limit takes no unit"), "{error}");
        assert!(
            !error.contains(":1:"),
            "no position in text nobody sees: {error}"
        );
        let nameless = RateLimitConfig {
            name: String::new(),
            domain: String::new(),
            descriptors: Vec::new(),
        };
        let error = configuration(&[any(&nameless)], false).expect_err("refused");
        assert!(error.starts_with("resource #0: "), "{error}");
        assert!(error.contains("domain"), "{error}");
    }

    #[test]
    fn a_domain_in_two_resources_merges_only_when_asked() {
        let first = any(&domain(
            "edge",
            vec![limited("a", "", RateLimitUnit::Second, 1)],
        ));
        let mut second = domain("edge", vec![limited("b", "", RateLimitUnit::Second, 1)]);
        second.name = "edge-more".to_owned();
        let both = [first, any(&second)];
        let error = configuration(&both, false).expect_err("refused");
        assert!(
            error.contains(
                "resource \"edge-more\": domain \"edge\" is already configured by another resource"
            ),
            "{error}"
        );
        let merged = configuration(&both, true).expect("merged");
        assert_eq!(merged.describe_limits().len(), 2);
    }

    #[test]
    fn foreign_undecodable_deep_and_too_many_resources_are_refused() {
        let foreign = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            value: Vec::new(),
        };
        let error = configuration(&[foreign], false).expect_err("refused");
        assert!(
            error.contains("is not type.googleapis.com/ratelimit"),
            "{error}"
        );
        let garbage = prost_types::Any {
            type_url: TYPE_URL.to_owned(),
            value: vec![0xff; 8],
        };
        let error = configuration(&[garbage], false).expect_err("refused");
        assert!(error.contains("cannot be decoded"), "{error}");
        let mut deep = limited("k", "", RateLimitUnit::Second, 1);
        for _ in 0..MAX_DEPTH {
            let mut parent = limited("k", "", RateLimitUnit::Second, 1);
            parent.descriptors = vec![deep];
            deep = parent;
        }
        let error = configuration(&[any(&domain("d", vec![deep]))], false).expect_err("refused");
        assert!(error.contains("nested deeper than 16 levels"), "{error}");
        let one = any(&domain("d", Vec::new()));
        let error = configuration(&vec![one; MAX_FILES + 1], false).expect_err("refused");
        assert!(error.contains("1001 resources"), "{error}");
    }

    #[test]
    fn a_number_json_cannot_hold_is_refused() {
        let mut descriptor = limited("k", "", RateLimitUnit::Second, 1);
        descriptor.metadata = Some(Struct {
            fields: [(
                "n".to_owned(),
                prost_types::Value {
                    kind: Some(Kind::NumberValue(f64::NAN)),
                },
            )]
            .into_iter()
            .collect(),
        });
        let error =
            configuration(&[any(&domain("d", vec![descriptor]))], false).expect_err("refused");
        assert!(
            error.contains("metadata: NaN is not a finite number"),
            "{error}"
        );
    }

    #[test]
    fn deep_metadata_is_taken_or_refused_never_a_crash() {
        let nested = |levels: usize| {
            let mut value = prost_types::Value {
                kind: Some(Kind::BoolValue(true)),
            };
            for _ in 0..levels {
                value = prost_types::Value {
                    kind: Some(Kind::StructValue(Struct {
                        fields: [("x".to_owned(), value)].into_iter().collect(),
                    })),
                };
            }
            let mut descriptor = limited("k", "", RateLimitUnit::Second, 1);
            if let Some(Kind::StructValue(metadata)) = value.kind {
                descriptor.metadata = Some(metadata);
            }
            configuration(&[any(&domain("d", vec![descriptor]))], false)
        };
        assert!(nested(30).is_ok());
        let error = nested(200).expect_err("refused");
        assert!(error.contains("cannot be decoded"), "{error}");
    }

    #[test]
    fn a_long_refusal_is_cut_and_counts_what_it_leaves_out() {
        let problems: Vec<String> = (0..5_000).map(|n| format!("problem {n}")).collect();
        let said = refusal(problems);
        assert!(said.len() < MAX_REFUSAL_BYTES + 64, "{}", said.len());
        assert!(said.starts_with("problem 0; problem 1; "), "{said}");
        assert!(said.ends_with(" more problems"), "{said}");
        let one = refusal(vec!["é".repeat(MAX_REFUSAL_BYTES)]);
        assert!(one.len() <= MAX_REFUSAL_BYTES + 3 && one.ends_with("..."));
        assert_eq!(refusal(vec!["a".into(), "b".into()]), "a; b");
    }

    #[test]
    fn no_resource_is_no_domain() {
        let config = configuration(&[], false).expect("taken");
        assert_eq!(config.domains().count(), 0);
    }
}
