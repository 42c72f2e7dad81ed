//! Calendar windows: days, weeks, months and years as a time zone counts them, for quotas sold
//! as "10 000 requests a month, reset on the 15th in the customer's time zone".
//!
//! A period starts at local midnight of its first day (the first instant of that day, where a
//! daylight-saving change skips or repeats midnight), so a day lasts 23, 24 or 25 hours and a
//! month 28 to 31 days. Time zones come from the tz database bundled with the `jiff` crate:
//! every node reads the same rules whatever its system has, and new rules arrive with a crate
//! update.

use std::fmt;
use std::sync::Arc;

use jiff::ToSpan;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;

use crate::clock::Micros;
use crate::quota::Quota;

const DAY_MICROS: Micros = 86_400 * 1_000_000;

/// A calendar as configuration states it: the time zone and where periods start. Which period
/// (day, week, month, year) follows from the quota it is given with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CalendarSpec {
    zone: Arc<str>,
    anchor_day: Option<i8>,
    first_day: Option<Weekday>,
    anchor_date: Option<(i8, i8)>,
}

/// Why a calendar was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// A time zone the bundled tz database does not know.
    #[error(
        "tz: unknown time zone {0:?} (expected a tz database name such as Europe/Berlin or UTC)"
    )]
    UnknownZone(String),
    /// A billing day that no month has.
    #[error("anchor_day: expected a day of the month from 1 to 31, got {0}")]
    AnchorDay(u64),
    /// A weekday name that is not one.
    #[error(
        "first_day: unknown weekday {0:?} (expected one of: monday, tuesday, wednesday, thursday, friday, saturday, sunday)"
    )]
    FirstDay(String),
    /// An anchor date that is not a month and a day.
    #[error("anchor_date: expected a month and a day as MM-DD, such as 04-01, got {0:?}")]
    AnchorDate(String),
    /// A quota whose period is not one day, week, month or year.
    #[error(
        "calendar: the quota's period must be one day, week, month or year (such as 10000/month), not {0}"
    )]
    Period(String),
    /// An anchor that the period does not have.
    #[error(
        "calendar: {field} does not apply to a {period} (anchor_day is for months, first_day for weeks, anchor_date for years)"
    )]
    AnchorNotApplicable {
        /// The field given.
        field: &'static str,
        /// The quota's calendar period.
        period: &'static str,
    },
}

impl CalendarSpec {
    /// A calendar in the time zone named `zone` (a tz database name), with periods starting at
    /// the defaults: the 1st of the month, Monday (ISO weeks), January 1st.
    pub fn new(zone: &str) -> Result<Self, CalendarError> {
        TimeZone::get(zone).map_err(|_| CalendarError::UnknownZone(zone.to_owned()))?;
        Ok(Self {
            zone: zone.into(),
            anchor_day: None,
            first_day: None,
            anchor_date: None,
        })
    }

    /// Months start on this day (1-31), or on the month's last day where it has fewer.
    pub fn anchor_day(mut self, day: u64) -> Result<Self, CalendarError> {
        if !(1..=31).contains(&day) {
            return Err(CalendarError::AnchorDay(day));
        }
        self.anchor_day = Some(day as i8);
        Ok(self)
    }

    /// Weeks start on this day (`monday` ... `sunday`).
    pub fn first_day(mut self, name: &str) -> Result<Self, CalendarError> {
        let weekday = WEEKDAYS
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|(_, weekday)| *weekday)
            .ok_or_else(|| CalendarError::FirstDay(name.to_owned()))?;
        self.first_day = Some(weekday);
        Ok(self)
    }

    /// Years start on this date, written `MM-DD` (February 29th is February 28th in other
    /// years).
    pub fn anchor_date(mut self, text: &str) -> Result<Self, CalendarError> {
        let invalid = || CalendarError::AnchorDate(text.to_owned());
        let (month, day) = text.split_once('-').ok_or_else(invalid)?;
        let month: i8 = month.parse().map_err(|_| invalid())?;
        let day: i8 = day.parse().map_err(|_| invalid())?;
        // 2000 is a leap year: every month-day that any year has.
        Date::new(2000, month, day).map_err(|_| invalid())?;
        self.anchor_date = Some((month, day));
        Ok(self)
    }

    /// The calendar for `quota`, whose period must be one day, one week, one month (30 days,
    /// as `month` reads) or one year (365 days).
    pub fn build(&self, quota: Quota) -> Result<Calendar, CalendarError> {
        let period = quota.period_micros();
        let unit = match period / DAY_MICROS {
            _ if !period.is_multiple_of(DAY_MICROS) => None,
            1 => Some(Unit::Day),
            7 => Some(Unit::Week),
            30 => Some(Unit::Month),
            365 => Some(Unit::Year),
            _ => None,
        }
        .ok_or_else(|| CalendarError::Period(quota.to_string()))?;
        let refuse = |field| {
            Err(CalendarError::AnchorNotApplicable {
                field,
                period: unit.name(),
            })
        };
        let start = match unit {
            _ if self.anchor_day.is_some() && unit != Unit::Month => return refuse("anchor_day"),
            _ if self.first_day.is_some() && unit != Unit::Week => return refuse("first_day"),
            _ if self.anchor_date.is_some() && unit != Unit::Year => return refuse("anchor_date"),
            Unit::Day => Start::Day,
            Unit::Week => Start::Week(self.first_day.unwrap_or(Weekday::Monday)),
            Unit::Month => Start::Month(self.anchor_day.unwrap_or(1)),
            Unit::Year => {
                let (month, day) = self.anchor_date.unwrap_or((1, 1));
                Start::Year(month, day)
            }
        };
        let zone = TimeZone::get(&self.zone)
            .map_err(|_| CalendarError::UnknownZone(self.zone.to_string()))?;
        Ok(Calendar {
            spec: self.clone(),
            start,
            zone,
        })
    }
}

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("monday", Weekday::Monday),
    ("tuesday", Weekday::Tuesday),
    ("wednesday", Weekday::Wednesday),
    ("thursday", Weekday::Thursday),
    ("friday", Weekday::Friday),
    ("saturday", Weekday::Saturday),
    ("sunday", Weekday::Sunday),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}

/// Where periods start: each day; each week on a weekday; each month on a day (clamped to the
/// month's last); each year on a month and day (clamped likewise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Start {
    Day,
    Week(Weekday),
    Month(i8),
    Year(i8, i8),
}

/// Calendar periods in a time zone, as a limit counts by them.
#[derive(Clone)]
pub struct Calendar {
    spec: CalendarSpec,
    start: Start,
    zone: TimeZone,
}

/// Consecutive period starts around an instant `now`: `[0]` the previous period's, `[1]` the
/// start of the period holding `now`, then the next three. Five, so that a store whose clock
/// is up to a period off the caller's still finds its own period and the two after it (the
/// farthest a calendar window's debt reaches, see [`crate::LimitBuilder::calendar`]).
pub type Boundaries = [Micros; 5];

impl Calendar {
    /// The period starts around `now` (see [`Boundaries`]).
    pub fn boundaries(&self, now: Micros) -> Boundaries {
        let local = jiff::Timestamp::from_microsecond(i64::try_from(now).unwrap_or(i64::MAX))
            .unwrap_or(jiff::Timestamp::MAX)
            .to_zoned(self.zone.clone())
            .date();
        let current = self.period_start(local);
        [-1, 0, 1, 2, 3].map(|n| self.instant(self.shifted(current, n)))
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &CalendarSpec {
        &self.spec
    }

    /// The first day of the period that holds the local date `date`.
    fn period_start(&self, date: Date) -> Date {
        match self.start {
            Start::Day => date,
            Start::Week(first) => {
                let back = (date.weekday().to_monday_zero_offset() - first.to_monday_zero_offset())
                    .rem_euclid(7);
                date.checked_sub(i64::from(back).days()).unwrap_or(date)
            }
            Start::Month(_) | Start::Year(..) => {
                let this = self.shifted(date, 0);
                if this <= date {
                    this
                } else {
                    self.shifted(date, -1)
                }
            }
        }
    }

    /// The first day of the period `n` periods after the one starting on `start` (for months
    /// and years: after the one whose anchor falls in `start`'s month or year).
    fn shifted(&self, start: Date, n: i32) -> Date {
        let shifted = match self.start {
            Start::Day => start.checked_add(i64::from(n).days()).ok(),
            Start::Week(_) => start.checked_add((7 * i64::from(n)).days()).ok(),
            Start::Month(day) => {
                let months = i32::from(start.year()) * 12 + i32::from(start.month()) - 1 + n;
                let (year, month) = (months.div_euclid(12), months.rem_euclid(12) + 1);
                clamped(year, month as i8, day)
            }
            Start::Year(month, day) => clamped(i32::from(start.year()) + n, month, day),
        };
        shifted.unwrap_or(start)
    }

    /// The first instant of the local date `date`, in microseconds since the epoch (0 before
    /// it).
    fn instant(&self, date: Date) -> Micros {
        date.to_zoned(self.zone.clone())
            .ok()
            .and_then(|zoned| u64::try_from(zoned.timestamp().as_microsecond()).ok())
            .unwrap_or(0)
    }
}

/// `day` of `month` in `year`, or the month's last day where it has fewer.
fn clamped(year: i32, month: i8, day: i8) -> Option<Date> {
    let year = i16::try_from(year).ok()?;
    let first = Date::new(year, month, 1).ok()?;
    Date::new(year, month, day.min(first.days_in_month())).ok()
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec && self.start == other.start
    }
}

impl Eq for Calendar {}

impl std::hash::Hash for Calendar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.spec.hash(state);
        self.start.hash(state);
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({self})")
    }
}

/// Short, as part of a limit's state name: `d@UTC`, `w1@UTC` (weeks from Monday, ISO's
/// weekday number), `m15@Europe/Berlin`, `y04-01@Asia/Kathmandu`.
impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.start {
            Start::Day => write!(f, "d")?,
            Start::Week(first) => write!(f, "w{}", first.to_monday_one_offset())?,
            Start::Month(day) => write!(f, "m{day}")?,
            Start::Year(month, day) => write!(f, "y{month:02}-{day:02}")?,
        }
        write!(f, "@{}", self.spec.zone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(text: &str) -> Quota {
        text.parse().expect("a quota")
    }

    fn at(text: &str) -> Micros {
        let timestamp: jiff::Timestamp = text.parse().expect("a timestamp");
        timestamp.as_microsecond() as Micros
    }

    #[test]
    fn a_billing_day_past_the_months_end_falls_on_its_last_day() {
        let calendar = CalendarSpec::new("UTC")
            .and_then(|spec| spec.anchor_day(31))
            .and_then(|spec| spec.build(quota("1/month")))
            .unwrap();
        assert_eq!(
            calendar.boundaries(at("2028-02-15T12:00:00Z")),
            [
                at("2027-12-31T00:00:00Z"),
                at("2028-01-31T00:00:00Z"),
                at("2028-02-29T00:00:00Z"),
                at("2028-03-31T00:00:00Z"),
                at("2028-04-30T00:00:00Z"),
            ]
        );
    }

    #[test]
    fn a_day_in_berlin_lasts_23_or_25_hours_when_the_clocks_change() {
        let calendar = CalendarSpec::new("Europe/Berlin")
            .and_then(|spec| spec.build(quota("1/d")))
            .unwrap();
        let spring = calendar.boundaries(at("2026-03-29T12:00:00Z"));
        assert_eq!(spring[1], at("2026-03-28T23:00:00Z"));
        assert_eq!(spring[2] - spring[1], 23 * 3_600_000_000);
        let autumn = calendar.boundaries(at("2026-10-25T12:00:00Z"));
        assert_eq!(autumn[2] - autumn[1], 25 * 3_600_000_000);
    }

    #[test]
    fn refuses_what_no_calendar_has() {
        let unknown = CalendarSpec::new("Europe/Atlantis").unwrap_err();
        assert!(
            unknown.to_string().contains("\"Europe/Atlantis\""),
            "{unknown}"
        );
        let utc = CalendarSpec::new("UTC").unwrap();
        assert_eq!(utc.clone().anchor_day(0), Err(CalendarError::AnchorDay(0)));
        assert_eq!(
            utc.clone().anchor_day(32),
            Err(CalendarError::AnchorDay(32))
        );
        assert!(utc.clone().first_day("mon").is_err());
        assert!(utc.clone().anchor_date("02-30").is_err());
        assert!(utc.clone().anchor_date("13-01").is_err());
        let hourly = utc.build(quota("10/h")).unwrap_err().to_string();
        assert!(hourly.contains("not 10/h"), "{hourly}");
        let weekly_anchor = utc.anchor_day(15).unwrap().build(quota("1/w"));
        assert_eq!(
            weekly_anchor.unwrap_err(),
            CalendarError::AnchorNotApplicable {
                field: "anchor_day",
                period: "week"
            }
        );
    }

    #[test]
    fn writes_itself_short_for_the_state_name() {
        let spec = CalendarSpec::new("Europe/Berlin").unwrap();
        let month = spec
            .clone()
            .anchor_day(15)
            .unwrap()
            .build(quota("1/month"))
            .unwrap();
        assert_eq!(month.to_string(), "m15@Europe/Berlin");
        let week = spec.clone().first_day("Sunday").unwrap();
        assert_eq!(
            week.build(quota("1/w")).unwrap().to_string(),
            "w7@Europe/Berlin"
        );
        let year = spec.anchor_date("04-01").unwrap().build(quota("1/year"));
        assert_eq!(year.unwrap().to_string(), "y04-01@Europe/Berlin");
    }
}
