//! An override as an operator writes it: which policy, identity and limit it is for, what it
//! changes, until when; and as it is stored, with who wrote it, when, and its version.

use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use tollgate_core::check::MAX_KEY_BYTES;
use tollgate_core::quota::Quota;

/// The longest `reason` an override keeps.
pub const MAX_REASON_BYTES: usize = 1024;
/// The longest name of who wrote an override.
pub const MAX_ACTOR_BYTES: usize = 200;
/// The largest multiplier.
pub const MAX_MULTIPLIER: f64 = 1_000_000.0;

/// What an override is for: one identity's key under one policy, and one of the policy's limits
/// (by its name) or all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideTarget {
    /// The policy.
    pub policy: String,
    /// The key as the policy builds it (`tenant:acme`, `route:/login|ip:203.0.113.7`).
    pub key: String,
    /// The name of one of the policy's limits; `None` for every limit of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

impl OverrideTarget {
    /// The id the override is stored under: the three parts as a JSON array, which no two
    /// targets share.
    pub fn id(&self) -> String {
        serde_json::to_string(&(&self.policy, &self.key, &self.limit))
            .unwrap_or_else(|_| unreachable!("strings always serialize"))
    }

    /// The target an id names.
    pub fn from_id(id: &str) -> Option<Self> {
        let (policy, key, limit): (String, String, Option<String>) =
            serde_json::from_str(id).ok()?;
        Some(Self { policy, key, limit })
    }
}

/// What an override does to the limits it targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// Other parameters: what is given replaces the policy's, the rest stays.
    Set(SetLimit),
    /// The quota count, burst and lease multiplied (`5` for five times the quota, `0.5` for
    /// half).
    Multiply(f64),
    /// Not limited by the policy at all.
    Allow,
    /// Refused by the policy whatever its limits say.
    Deny,
}

/// The parameters a [`Change::Set`] replaces.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetLimit {
    /// The algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// The quota (`50000/month`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// The burst of a rate algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
}

/// An override: for one identity under one policy, a change to its limits, until it expires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// The policy.
    pub policy: String,
    /// The key as the policy builds it (`tenant:acme`, `route:/login|ip:203.0.113.7`).
    pub key: String,
    /// The name of one of the policy's limits; `None` for every limit of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// What it changes.
    pub change: Change,
    /// When it stops applying (RFC 3339, `2027-01-01T00:00:00Z`); never when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Why, for the next operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The fields a stored override has beyond the override itself.
const STORED_FIELDS: [&str; 3] = ["updated_by", "updated_at", "version"];

/// An override as stored: with who wrote it, when, and the version of the write. In JSON, the
/// override's fields and these three side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredOverride {
    /// The override.
    pub item: Override,
    /// Who wrote it, as the writer named itself.
    pub updated_by: String,
    /// When (RFC 3339).
    pub updated_at: String,
    /// The version of the write that made it: a later write names it to replace it.
    pub version: u64,
}

impl StoredOverride {
    /// The override's fields and `updated_by`, `updated_at`, `version`, in one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(&self.item)
            .unwrap_or_else(|_| unreachable!("an override always serializes"));
        if let Some(object) = value.as_object_mut() {
            object.insert("updated_by".into(), self.updated_by.clone().into());
            object.insert("updated_at".into(), self.updated_at.clone().into());
            object.insert("version".into(), self.version.into());
        }
        value
    }

    /// An override and its stored fields read from one JSON object (a line of an export, a
    /// stored body); the stored fields may be absent.
    pub fn from_json(mut value: serde_json::Value) -> Result<(Override, Option<u64>), String> {
        let mut version = None;
        if let Some(object) = value.as_object_mut() {
            version = object.get("version").and_then(serde_json::Value::as_u64);
            for field in STORED_FIELDS {
                object.remove(field);
            }
        }
        let item = serde_json::from_value(value).map_err(|error| error.to_string())?;
        Ok((item, version))
    }
}

impl Override {
    /// What it is for.
    pub fn target(&self) -> OverrideTarget {
        OverrideTarget {
            policy: self.policy.clone(),
            key: self.key.clone(),
            limit: self.limit.clone(),
        }
    }

    /// Checks what does not depend on the policies in force: sizes, the multiplier, the
    /// expiry, that allow and deny apply to a whole policy. The error says which field.
    pub fn validate(&self) -> Result<(), String> {
        let Self {
            policy, key, limit, ..
        } = self;
        if policy.is_empty() {
            return Err("policy: must name a policy".into());
        }
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "key: must be 1 to {MAX_KEY_BYTES} bytes, got {}",
                key.len()
            ));
        }
        if limit.as_ref().is_some_and(String::is_empty) {
            return Err("limit: must name one of the policy's limits, or be left out".into());
        }
        if self
            .reason
            .as_ref()
            .is_some_and(|r| r.len() > MAX_REASON_BYTES)
        {
            return Err(format!("reason: longer than {MAX_REASON_BYTES} bytes"));
        }
        match &self.change {
            Change::Multiply(factor) if !(*factor > 0.0 && *factor <= MAX_MULTIPLIER) => {
                return Err(format!(
                    "change.multiply: must be above 0 and at most {MAX_MULTIPLIER}, got {factor}"
                ));
            }
            Change::Set(set) if *set == SetLimit::default() => {
                return Err("change.set: give at least one of algorithm, quota, burst".into());
            }
            Change::Allow | Change::Deny if limit.is_some() => {
                return Err(
                    "limit: allow and deny apply to every limit of the policy; leave limit out"
                        .into(),
                );
            }
            _ => {}
        }
        self.expiry().map(|_| ())
    }

    /// When it stops applying, in microseconds since the Unix epoch.
    pub fn expiry(&self) -> Result<Option<u64>, String> {
        let Some(text) = &self.expires_at else {
            return Ok(None);
        };
        let at: jiff::Timestamp = text
            .parse()
            .map_err(|error| format!("expires_at: {text:?} is not an RFC 3339 time: {error}"))?;
        let micros = u64::try_from(at.as_microsecond())
            .map_err(|_| format!("expires_at: {text:?} is before 1970"))?;
        Ok(Some(micros))
    }
}

/// Reads a stored body back, at the version its record has.
pub(crate) fn stored_of(body: &str, version: u64) -> Result<StoredOverride, String> {
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|error| format!("unreadable override: {error}"))?;
    let text = |field: &str| {
        value
            .get(field)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (updated_by, updated_at) = (text("updated_by"), text("updated_at"));
    let (item, _) = StoredOverride::from_json(value)?;
    Ok(StoredOverride {
        item,
        updated_by,
        updated_at,
        version,
    })
}

/// The time `micros` since the Unix epoch, in RFC 3339.
pub(crate) fn rfc3339(micros: u64) -> String {
    i64::try_from(micros)
        .ok()
        .and_then(|micros| jiff::Timestamp::from_microsecond(micros).ok())
        .map_or_else(|| micros.to_string(), |at| at.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Override {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn overrides_read_as_operators_write_them() {
        let set = read(
            r#"{"policy":"api","key":"tenant:acme","limit":"monthly",
                "change":{"set":{"quota":"50000/month"}},"expires_at":"2027-01-01T00:00:00Z"}"#,
        );
        assert_eq!(set.limit.as_deref(), Some("monthly"));
        assert_eq!(set.expiry().unwrap(), Some(1_798_761_600_000_000));
        assert!(set.validate().is_ok());
        let allow = read(r#"{"policy":"api","key":"tenant:acme","change":"allow"}"#);
        assert_eq!(allow.change, Change::Allow);
        assert_eq!(
            OverrideTarget::from_id(&allow.target().id()),
            Some(allow.target())
        );
        let times = read(r#"{"policy":"api","key":"k","change":{"multiply":5}}"#);
        assert_eq!(times.change, Change::Multiply(5.0));
    }

    #[test]
    fn bad_overrides_say_which_field() {
        let cases = [
            (
                r#"{"policy":"api","key":"k","change":{"multiply":0}}"#,
                "change.multiply",
            ),
            (
                r#"{"policy":"api","key":"k","change":{"multiply":1e9}}"#,
                "change.multiply",
            ),
            (r#"{"policy":"api","key":"","change":"deny"}"#, "key:"),
            (r#"{"policy":"","key":"k","change":"deny"}"#, "policy:"),
            (
                r#"{"policy":"api","key":"k","limit":"x","change":"deny"}"#,
                "limit:",
            ),
            (
                r#"{"policy":"api","key":"k","change":{"set":{}}}"#,
                "change.set",
            ),
            (
                r#"{"policy":"api","key":"k","change":"allow","expires_at":"soon"}"#,
                "expires_at",
            ),
        ];
        for (json, field) in cases {
            let error = read(json).validate().unwrap_err();
            assert!(error.starts_with(field), "{json}: {error}");
        }
        let long = format!(
            r#"{{"policy":"api","key":"{}","change":"deny"}}"#,
            "k".repeat(MAX_KEY_BYTES + 1)
        );
        assert!(read(&long).validate().unwrap_err().starts_with("key:"));
        assert!(
            serde_json::from_str::<Override>(
                r#"{"policy":"api","key":"k","change":"deny","extra":1}"#
            )
            .is_err()
        );
    }
}
