//! Policies with calendar quotas: a month from a billing day in a time zone, refused until the
//! real boundary; and every bad calendar refused with its place and reason.

use std::sync::Arc;
use std::time::Duration;

use tollgate::policy::Action;
use tollgate::{Limiter, ManualClock, MemoryStore, Policies, Request};

const MONTHLY: &str = r#"
policies:
  - name: plan
    key: [ip]
    limits:
      - name: monthly
        algorithm: fixed_window
        quota: 3/month
        calendar: { tz: Europe/Berlin, anchor_day: 31 }
"#;

fn request() -> Request<'static> {
    let mut request = Request::new("GET", "/");
    request.peer = Some("203.0.113.7".parse().expect("an address"));
    request
}

#[tokio::test]
async fn a_monthly_quota_from_the_31st_renews_at_berlin_midnight_on_february_29th() {
    // 2028-02-28T22:59:59Z is 23:59:59 in Berlin: the month that began on January 31st ends
    // one second later, on the last day of February.
    let clock = ManualClock::new(1_835_391_599_000_000);
    let store = MemoryStore::builder()
        .clock(Arc::new(clock.clone()))
        .build();
    let policies = Policies::from_yaml("plans.yaml", MONTHLY).expect("valid config");
    let limiter = Limiter::with_policies(store, policies);
    for _ in 0..3 {
        assert!(limiter.evaluate(&request()).await.unwrap().is_admitted());
    }
    let refused = limiter.evaluate(&request()).await.unwrap();
    match &refused.action {
        Action::Refuse(refusal) => assert_eq!(refusal.retry_after, Some(Duration::from_secs(1))),
        other => panic!("expected a refusal, got {other:?}"),
    }
    clock.advance(Duration::from_secs(1));
    assert!(limiter.evaluate(&request()).await.unwrap().is_admitted());
}

fn errors(text: &str) -> Vec<String> {
    match Policies::from_yaml("bad.yaml", text) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn every_bad_calendar_is_refused_with_its_place_and_reason() {
    let limit = |fields: &str| {
        format!(
            "policies:\n  - name: x\n    key: [ip]\n    limits:\n      - {{ name: l, {fields} }}\n"
        )
    };
    let cases = [
        (
            limit("algorithm: fixed_window, quota: 10/month, calendar: { tz: Europe/Atlantis }"),
            "bad.yaml:5:78: policy \"x\", limit \"l\": calendar.tz: unknown time zone \"Europe/Atlantis\"",
        ),
        (
            limit("algorithm: fixed_window, quota: 10/month, calendar: { anchor_day: 0 }"),
            "bad.yaml:5:86: policy \"x\", limit \"l\": calendar.anchor_day: expected a day of the month from 1 to 31, got 0",
        ),
        (
            limit("algorithm: fixed_window, quota: 10/month, calendar: { anchor_day: 32 }"),
            "bad.yaml:5:86: policy \"x\", limit \"l\": calendar.anchor_day: expected a day of the month from 1 to 31, got 32",
        ),
        (
            limit("algorithm: gcra, quota: 10/month, calendar: { tz: UTC }"),
            "calendar applies only to fixed_window (a quota per calendar period), not gcra",
        ),
        (
            limit("algorithm: fixed_window, quota: 10/week, calendar: { anchor_day: 15 }"),
            "calendar: anchor_day does not apply to a week",
        ),
        (
            limit("algorithm: fixed_window, quota: 10/h, calendar: { tz: UTC }"),
            "calendar: the quota's period must be one day, week, month or year (such as 10000/month), not 10/h",
        ),
        (
            limit("algorithm: fixed_window, quota: 10/month, calendar: { timezone: UTC }"),
            "bad.yaml:5:",
        ),
    ];
    for (text, expected) in cases {
        let found = errors(&text);
        assert!(
            found.iter().any(|error| error.contains(expected)),
            "for:\n{text}\nexpected an error with:\n  {expected}\nfound:\n  {}",
            found.join("\n  ")
        );
    }
}
