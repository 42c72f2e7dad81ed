//! Limits given in a check request itself (`limits` of `/v1/check`, `/v1/usage` and the rest):
//! read, validated field by field, built once per spec and name.

use serde::{Deserialize, Serialize};
use tollgate::{
    Algorithm, CalendarError, CalendarSpec, Check, Limit, LimitSpec, MAX_COST, MAX_ITEMS, Quota,
    leaky_mode,
};

use super::problem::ApiError;

/// A limit given in the request itself.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InlineLimit {
    pub(super) key: String,
    pub(super) algorithm: Algorithm,
    pub(super) quota: Quota,
    pub(super) burst: Option<u64>,
    pub(super) mode: Option<String>,
    pub(super) delay_after: Option<u64>,
    /// Where the limit counts: `region` (the default) or `global`.
    pub(super) scope: Option<tollgate::Scope>,
    /// The most units a settlement may leave owing beyond the capacity.
    pub(super) max_debt: Option<u64>,
    /// A fixed window's calendar periods (left out of a charge token's bytes when absent, so
    /// that tokens of limits without one read as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) calendar: Option<InlineCalendar>,
    pub(super) name: Option<String>,
    pub(super) cost: Option<u64>,
}

/// An inline limit's `calendar`, as a policy file writes it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct InlineCalendar {
    tz: Option<String>,
    anchor_day: Option<u64>,
    first_day: Option<String>,
    anchor_date: Option<String>,
}

impl InlineCalendar {
    /// The calendar it states (in UTC unless `tz` says otherwise); the error names the field.
    fn spec(&self) -> Result<CalendarSpec, CalendarError> {
        let mut spec = CalendarSpec::new(self.tz.as_deref().unwrap_or("UTC"))?;
        if let Some(day) = self.anchor_day {
            spec = spec.anchor_day(day)?;
        }
        if let Some(first) = &self.first_day {
            spec = spec.first_day(first)?;
        }
        if let Some(date) = &self.anchor_date {
            spec = spec.anchor_date(date)?;
        }
        Ok(spec)
    }
}

impl InlineLimit {
    /// What the limit is, apart from its name, key and cost.
    fn spec(&self, index: usize) -> Result<LimitSpec, ApiError> {
        let mode = leaky_mode(self.mode.as_deref(), self.delay_after)
            .map_err(|error| ApiError::invalid(format!("limits[{index}].mode: {error}")))?;
        let calendar = self
            .calendar
            .as_ref()
            .map(InlineCalendar::spec)
            .transpose()
            .map_err(|error| ApiError::invalid(format!("limits[{index}].calendar.{error}")))?;
        Ok(LimitSpec {
            calendar,
            burst: self.burst,
            mode,
            scope: self.scope.unwrap_or_default(),
            max_debt: self.max_debt.map(|units| units.min(MAX_COST)),
            ..LimitSpec::new(self.algorithm, self.quota)
        })
    }

    fn build(&self, index: usize, spec: &LimitSpec) -> Result<Limit, ApiError> {
        // Unnamed limits are named by what they are, so the same limit keeps its state.
        let name = self.name.clone().unwrap_or_else(|| {
            format!(
                "inline:{}:{}:{}",
                self.algorithm,
                self.quota,
                self.burst.unwrap_or(0)
            )
        });
        spec.build(name)
            .map_err(|error| ApiError::invalid(format!("limits[{index}]: {error}")))
    }

    /// The limit, built once per spec and name (see [`super::compiled`]).
    fn compiled(&self, index: usize) -> Result<Limit, ApiError> {
        super::compiled::compiled(self.spec(index)?, self.name.as_ref(), |spec| {
            self.build(index, spec)
        })
    }
}

pub(super) fn inline_check<'a>(
    limits: &'a [Limit],
    specs: &'a [InlineLimit],
    cost: u64,
) -> Check<'a> {
    let mut check = Check::new(cost);
    for (limit, spec) in limits.iter().zip(specs) {
        check.push(spec.key.as_str(), limit, spec.cost.unwrap_or(cost));
    }
    check
}

pub(super) fn build_limits(specs: &[InlineLimit]) -> Result<Vec<Limit>, ApiError> {
    if specs.is_empty() || specs.len() > MAX_ITEMS {
        return Err(ApiError::invalid(format!(
            "limits: give 1 to {MAX_ITEMS} limits"
        )));
    }
    specs
        .iter()
        .enumerate()
        .map(|(index, spec)| spec.compiled(index))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::InlineLimit;

    fn inline(json: &str) -> InlineLimit {
        serde_json::from_str(json).expect("an inline limit")
    }

    #[test]
    fn compiled_limits_of_one_name_but_another_shape_are_not_confused() {
        let ten = inline(r#"{"key":"a","algorithm":"gcra","quota":"10/s","name":"shared"}"#);
        let twenty = inline(r#"{"key":"b","algorithm":"gcra","quota":"20/s","name":"shared"}"#);
        let queue = inline(
            r#"{"key":"c","algorithm":"leaky_bucket","quota":"10/s","burst":5,"mode":"queue","delay_after":2,"name":"shared"}"#,
        );
        let meter = inline(
            r#"{"key":"c","algorithm":"leaky_bucket","quota":"10/s","burst":5,"mode":"meter","name":"shared"}"#,
        );
        for _ in 0..2 {
            assert_eq!(ten.compiled(0).unwrap().count(), 10);
            assert_eq!(twenty.compiled(0).unwrap().count(), 20);
            assert_ne!(
                queue.compiled(0).unwrap().mode(),
                meter.compiled(0).unwrap().mode()
            );
        }
    }

    #[test]
    fn a_quota_is_read_from_its_text_escaped_or_not_and_only_from_text() {
        let escaped = inline(r#"{"key":"a","algorithm":"gcra","quota":"10\/s"}"#);
        assert_eq!(escaped.compiled(0).unwrap().count(), 10);
        let error =
            serde_json::from_str::<InlineLimit>(r#"{"key":"a","algorithm":"gcra","quota":10}"#)
                .unwrap_err()
                .to_string();
        assert!(
            error.starts_with(r#"invalid type: integer `10`, expected a quota such as "100/m""#),
            "{error}"
        );
    }

    #[test]
    fn a_limit_that_does_not_build_is_refused_every_time() {
        let zero_burst = inline(r#"{"key":"a","algorithm":"gcra","quota":"10/s","burst":0}"#);
        for _ in 0..2 {
            let error = zero_burst.compiled(3).unwrap_err();
            assert!(error.detail.starts_with("limits[3]"), "{}", error.detail);
        }
    }
}
