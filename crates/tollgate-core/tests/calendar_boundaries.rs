//! Calendar boundaries against a second time zone library: chrono with chrono-tz computes the
//! same period starts from its own copy of the tz database, over random instants of twelve
//! years, in zones with 1-hour, 30-minute and no daylight saving and a 45-minute offset.

use chrono::{Datelike, Duration, LocalResult, NaiveDate, TimeZone as _, Utc};
use chrono_tz::Tz;
use tollgate_core::{CalendarSpec, Micros, Quota};

const ZONES: [&str; 5] = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "UTC",
];

/// What a calendar starts its periods on, as chrono computes it.
#[derive(Debug, Clone, Copy)]
enum Period {
    Day,
    Week(u32),
    Month(u32),
    Year(u32, u32),
}

/// The first instant of `date` in `zone`: midnight, or the first minute after a gap over it.
fn first_instant(zone: Tz, date: NaiveDate) -> Micros {
    let mut time = date.and_hms_opt(0, 0, 0).expect("midnight");
    loop {
        match zone.from_local_datetime(&time) {
            LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                return at.timestamp_micros() as Micros;
            }
            LocalResult::None => time += Duration::minutes(1),
        }
    }
}

/// `day` of the month, or its last day where it has fewer.
fn clamped(year: i32, month: u32, day: u32) -> NaiveDate {
    (1..=day)
        .rev()
        .find_map(|d| NaiveDate::from_ymd_opt(year, month, d))
        .expect("a day of the month")
}

fn shifted(period: Period, start: NaiveDate, n: i32) -> NaiveDate {
    match period {
        Period::Day => start + Duration::days(n.into()),
        Period::Week(_) => start + Duration::days(7 * i64::from(n)),
        Period::Month(day) => {
            let months = start.year() * 12 + start.month0() as i32 + n;
            clamped(months.div_euclid(12), months.rem_euclid(12) as u32 + 1, day)
        }
        Period::Year(month, day) => clamped(start.year() + n, month, day),
    }
}

fn expected(zone: Tz, period: Period, now: Micros) -> [Micros; 5] {
    let date = Utc
        .timestamp_micros(now as i64)
        .single()
        .expect("an instant")
        .with_timezone(&zone)
        .date_naive();
    let start = match period {
        Period::Day => date,
        Period::Week(first) => {
            let back = (date.weekday().number_from_monday() + 7 - first) % 7;
            date - Duration::days(back.into())
        }
        Period::Month(_) | Period::Year(..) => {
            let this = shifted(period, date, 0);
            if this <= date {
                this
            } else {
                shifted(period, date, -1)
            }
        }
    };
    [-1, 0, 1, 2, 3].map(|n| first_instant(zone, shifted(period, start, n)))
}

fn calendar(zone: &str, period: Period) -> (tollgate_core::Calendar, Tz) {
    let spec = CalendarSpec::new(zone).expect("a known zone");
    let weekdays = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let (spec, quota) = match period {
        Period::Day => (spec, "1/day"),
        Period::Week(first) => (
            spec.first_day(weekdays[first as usize - 1])
                .expect("a weekday"),
            "1/week",
        ),
        Period::Month(day) => (spec.anchor_day(day.into()).expect("a day"), "1/month"),
        Period::Year(month, day) => (
            spec.anchor_date(&format!("{month:02}-{day:02}"))
                .expect("a date"),
            "1/year",
        ),
    };
    let quota: Quota = quota.parse().expect("a quota");
    (
        spec.build(quota).expect("a calendar"),
        zone.parse().expect("a zone chrono-tz knows"),
    )
}

fn check(zone: &str, period: Period, now: Micros) {
    let (calendar, tz) = calendar(zone, period);
    assert_eq!(
        calendar.boundaries(now),
        expected(tz, period, now),
        "{zone} {period:?} at {now}us"
    );
}

fn micros(text: &str) -> Micros {
    chrono::DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 instant")
        .timestamp_micros() as Micros
}

#[test]
fn random_instants_over_twelve_years_agree_with_chrono_tz() {
    let mut rng = fastrand::Rng::with_seed(20_261_125);
    let (from, to) = (
        micros("2020-01-01T00:00:00Z"),
        micros("2032-01-01T00:00:00Z"),
    );
    for _ in 0..4_000 {
        let zone = ZONES[rng.usize(..ZONES.len())];
        let period = match rng.u8(..4) {
            0 => Period::Day,
            1 => Period::Week(rng.u32(1..=7)),
            2 => Period::Month(rng.u32(1..=31)),
            _ => Period::Year(rng.u32(1..=12), rng.u32(1..=28)),
        };
        check(zone, period, rng.u64(from..to));
    }
}

#[test]
fn clock_change_days_leap_days_and_late_anchors_agree_with_chrono_tz() {
    let instants = [
        // Europe/Berlin springs forward and falls back.
        "2026-03-29T00:30:00Z",
        "2026-03-28T23:00:00Z",
        "2026-10-25T00:59:59Z",
        "2026-10-25T01:00:00Z",
        // America/New_York.
        "2026-03-08T06:59:59Z",
        "2026-03-08T07:00:00Z",
        "2026-11-01T05:30:00Z",
        // Australia/Lord_Howe moves by half an hour.
        "2026-04-04T14:30:00Z",
        "2026-10-03T13:30:00Z",
        // February 29th, and the turn of a year.
        "2028-02-29T12:00:00Z",
        "2028-02-28T23:30:00Z",
        "2028-03-01T00:00:00Z",
        "2027-12-31T23:59:59Z",
    ];
    let periods = [
        Period::Day,
        Period::Week(1),
        Period::Week(7),
        Period::Month(1),
        Period::Month(29),
        Period::Month(31),
        Period::Year(2, 29),
        Period::Year(1, 1),
    ];
    for zone in ZONES {
        for instant in instants {
            for period in periods {
                check(zone, period, micros(instant));
            }
        }
    }
}
