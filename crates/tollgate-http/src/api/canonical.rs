//! The bytes a charge token binds: a check's body as serde writes `Canonical`, so that the
//! same check always reads the same whatever its spacing or key order. Every admitted check of
//! inline limits issues a token, so that form is written directly, byte for byte what serde
//! writes (a test holds them equal); checks by policy, and limits with a calendar, go through
//! serde.

use serde::Serialize;

use super::answer::Json;
use super::check::{Attributes, CheckRequest};
use super::inline::InlineLimit;

/// What a check asks, and nothing else.
#[derive(Serialize)]
struct Canonical<'a> {
    policy: &'a Option<String>,
    attributes: &'a Option<Box<Attributes>>,
    limits: &'a Option<Vec<InlineLimit>>,
    cost: &'a Option<u64>,
}

impl CheckRequest {
    /// The body as a charge token binds it.
    pub(super) fn canonical(&self) -> Vec<u8> {
        let mut json = Json(Vec::with_capacity(256));
        match (&self.policy, &self.attributes, &self.limits) {
            (None, None, Some(limits)) if limits.iter().all(|limit| limit.calendar.is_none()) => {
                write_inline(&mut json, limits, self.cost);
            }
            _ => {
                if serde_json::to_writer(&mut json.0, &self.serde_form()).is_err() {
                    json.0.clear();
                }
            }
        }
        json.0
    }

    fn serde_form(&self) -> Canonical<'_> {
        Canonical {
            policy: &self.policy,
            attributes: &self.attributes,
            limits: &self.limits,
            cost: &self.cost,
        }
    }
}

/// Writes a check of inline limits, none of them with a calendar.
fn write_inline(json: &mut Json, limits: &[InlineLimit], cost: Option<u64>) {
    json.raw("{\"policy\":null,\"attributes\":null,\"limits\":[");
    for (index, limit) in limits.iter().enumerate() {
        if index > 0 {
            json.raw(",");
        }
        write_limit(json, limit);
    }
    json.raw("],\"cost\":");
    json.option(cost);
    json.raw("}");
}

/// One limit without a calendar, its fields in the order `InlineLimit` declares them.
fn write_limit(json: &mut Json, limit: &InlineLimit) {
    json.raw("{\"key\":");
    json.string(&limit.key);
    json.raw(",\"algorithm\":");
    let _ = serde_json::to_writer(&mut json.0, &limit.algorithm);
    json.raw(",\"quota\":");
    json.string(&limit.quota.to_string());
    json.raw(",\"burst\":");
    json.option(limit.burst);
    json.raw(",\"mode\":");
    json.optional_string(limit.mode.as_deref());
    json.raw(",\"delay_after\":");
    json.option(limit.delay_after);
    json.raw(",\"scope\":");
    match &limit.scope {
        Some(scope) => {
            let _ = serde_json::to_writer(&mut json.0, scope);
        }
        None => json.raw("null"),
    }
    json.raw(",\"max_debt\":");
    json.option(limit.max_debt);
    json.raw(",\"name\":");
    json.optional_string(limit.name.as_deref());
    json.raw(",\"cost\":");
    json.option(limit.cost);
    json.raw("}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::problem::parse_json;

    fn both(body: &str) -> (String, String) {
        let request: CheckRequest = parse_json(body.as_bytes()).unwrap();
        let serde = serde_json::to_string(&request.serde_form()).unwrap();
        (String::from_utf8(request.canonical()).unwrap(), serde)
    }

    #[test]
    fn inline_checks_read_as_serde_writes_them() {
        for body in [
            r#"{"limits":[{"key":"user:1","algorithm":"gcra","quota":"100/s"}]}"#,
            r#"{"cost":3,"limits":[{"key":"a","algorithm":"token_bucket","quota":"10/90s","burst":20,"cost":2,"name":"n"},
                {"key":"b\"\\\u0001é","algorithm":"leaky_bucket","quota":"5/m","mode":"delay","delay_after":2,"scope":"global","max_debt":7}]}"#,
            r#"{"limits":[{"key":"k","algorithm":"fixed_window","quota":"1/h","scope":"region","name":"tab\there"}]}"#,
            r#"{"limits":[{"key":"k","algorithm":"sliding_log","quota":"7/250ms"},{"key":"k2","algorithm":"sliding_window","quota":"3/2d"}]}"#,
        ] {
            let (direct, serde) = both(body);
            assert_eq!(direct, serde, "{body}");
        }
    }

    #[test]
    fn checks_that_only_serde_writes_read_the_same() {
        for body in [
            r#"{"limits":[{"key":"k","algorithm":"fixed_window","quota":"10/d","calendar":{"tz":"UTC"}}]}"#,
            r#"{"limits":[{"key":"a","algorithm":"gcra","quota":"1/s"},{"key":"k","algorithm":"fixed_window","quota":"10/d","calendar":{"anchor_day":3}}],"cost":2}"#,
            r#"{"policy":"p","attributes":{"user":"u","headers":{"x-a":"1"}}}"#,
            r#"{"attributes":{"ip":"203.0.113.7"},"cost":4}"#,
        ] {
            let (canonical, serde) = both(body);
            assert_eq!(canonical, serde, "{body}");
        }
    }

    #[test]
    fn spacing_and_key_order_do_not_change_the_bytes() {
        let (one, _) = both(
            r#"{"limits":[{"key":"k","algorithm":"gcra","quota":"100/s","burst":5}],"cost":1}"#,
        );
        let (two, _) = both(
            r#"{ "cost" : 1, "limits" : [ { "burst" : 5, "quota" : "100/s", "algorithm" : "gcra", "key" : "k" } ] }"#,
        );
        assert_eq!(one, two);
    }
}
