//! Rendering rate-limit fields and problem bodies from any limit names, quotas and decisions:
//! every field is a valid header value that parses as what it claims, and every problem body is
//! JSON.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::headers::{HeaderFamily, LimitView, QuotaUnit, rate_limit_fields};
use tollgate::policy::{Reason, Refusal};
use tollgate::problem::problem_json;
use tollgate::{Algorithm, Decision, Limit, Quota};

#[derive(Debug, Arbitrary)]
struct Input {
    label: String,
    count: u64,
    period_seconds: u32,
    algorithm: u8,
    allowed: bool,
    remaining: u64,
    reset_after: u64,
    retry_after: Option<u64>,
    delay: u64,
    now: u64,
    families: u8,
    detail: String,
    violated: Vec<String>,
}

fuzz_target!(|input: Input| {
    let Ok(quota) = Quota::new(
        input.count,
        Duration::from_secs(u64::from(input.period_seconds)),
    ) else {
        return;
    };
    let algorithm = Algorithm::ALL[usize::from(input.algorithm) % Algorithm::ALL.len()];
    let Ok(limit) = Limit::new(input.label.clone(), algorithm, quota) else {
        return;
    };
    let decision = Decision::new(
        input.allowed,
        limit.capacity(),
        input.remaining,
        input.reset_after,
        input.retry_after,
        input.delay,
    );
    let families: Vec<HeaderFamily> = [
        HeaderFamily::Ietf,
        HeaderFamily::Draft,
        HeaderFamily::Legacy,
    ]
    .into_iter()
    .enumerate()
    .filter(|(index, _)| input.families & (1 << index) != 0)
    .map(|(_, family)| family)
    .collect();
    let views = [LimitView {
        label: &input.label,
        limit: &limit,
        unit: QuotaUnit::Requests,
        decision,
        partition: None,
    }];
    for (name, value) in rate_limit_fields(&families, &views, Some(0), input.now).iter() {
        assert!(
            axum::http::HeaderValue::from_str(value).is_ok(),
            "{name}: {value:?} is not a valid field value"
        );
        if name == "ratelimit" || name == "ratelimit-policy" {
            sfv::Parser::new(value)
                .parse::<sfv::List>()
                .unwrap_or_else(|error| {
                    panic!("{name}: {value:?} is not a structured field: {error}")
                });
        }
    }
    let violated: Vec<&str> = input.violated.iter().map(String::as_str).collect();
    let refusal = Refusal {
        reason: Reason::OverLimit,
        retry_after: None,
        detail: input.detail.clone(),
    };
    let body = problem_json(&refusal, &violated);
    serde_json::from_str::<serde_json::Value>(&body).expect("a problem body is JSON");
});
