//! A limit's `calendar`: the time zone and anchor of a fixed window counted by calendar periods,
//! as the policy file and the rate limit service's rules write it.

use super::Node;
use tollgate_core::calendar::{CalendarError, CalendarSpec};

/// The fields a `calendar` may have.
const CALENDAR_FIELDS: &[&str] = &["tz", "anchor_day", "first_day", "anchor_date"];

/// Reads `calendar: { tz, anchor_day, first_day, anchor_date }` (`tz` defaults to UTC); each
/// wrong field is reported where it is written.
pub fn read_calendar(node: Node<'_, '_>, what: &str) -> Option<CalendarSpec> {
    let what = format!("{what}: calendar");
    let map = node.map(&what)?;
    map.deny_unknown(&what, CALENDAR_FIELDS);
    let at = |field: Node<'_, '_>, error: CalendarError| {
        field.error(format!("{what}.{error}"));
    };
    let zone = map.get("tz");
    let zone_name = match zone {
        Some(zone) => zone.text(&format!("{what}.tz"))?.into_owned(),
        None => "UTC".to_owned(),
    };
    let mut spec = CalendarSpec::new(&zone_name)
        .map_err(|error| at(zone.unwrap_or(node), error))
        .ok()?;
    if let Some(day) = map.get("anchor_day") {
        let number = day.number(&format!("{what}.anchor_day"), 0..=u64::from(u32::MAX))?;
        spec = spec
            .anchor_day(number)
            .map_err(|error| at(day, error))
            .ok()?;
    }
    if let Some(first) = map.get("first_day") {
        let name = first.text(&format!("{what}.first_day"))?;
        spec = spec
            .first_day(&name)
            .map_err(|error| at(first, error))
            .ok()?;
    }
    if let Some(date) = map.get("anchor_date") {
        let text = date.text(&format!("{what}.anchor_date"))?;
        spec = spec
            .anchor_date(&text)
            .map_err(|error| at(date, error))
            .ok()?;
    }
    Some(spec)
}
