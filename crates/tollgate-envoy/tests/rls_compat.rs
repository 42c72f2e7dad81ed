//! envoyproxy/ratelimit compatibility: configurations, request descriptors and the statuses,
//! remaining counts and reset durations envoyproxy/ratelimit answers with.

use std::sync::Arc;

use tollgate::{AnyStore, Limiter, ManualClock, MemoryStore};
use tollgate_envoy::rls::proto::common::RateLimitDescriptor;
use tollgate_envoy::rls::proto::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate_envoy::rls::proto::service::RateLimitRequest;
use tollgate_envoy::rls::proto::service::rate_limit_response::Code;
use tollgate_envoy::rls::proto::types::RateLimitUnit;
use tollgate_envoy::rls::{Rls, RlsConfig, RlsError, RlsHeaderNames, RlsModes, RlsStatsFlags};

/// 2023-11-14 22:13:20 UTC: 20 s into a minute, 800 s into an hour, 20 s into a 30 s window.
const NOW_SECONDS: u64 = 1_700_000_000;

fn rls(yaml: &str) -> (Rls, ManualClock) {
    let clock = ManualClock::new(NOW_SECONDS * 1_000_000);
    let store = AnyStore::Memory(
        MemoryStore::builder()
            .clock(Arc::new(clock.clone()))
            .build(),
    );
    let config = RlsConfig::from_documents(&[("test.yaml", yaml)]).expect("a valid configuration");
    (Rls::new(Limiter::new(store), config, false), clock)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// (code, remaining, limit as (requests per unit, unit name, limit name), reset seconds)
type Expected = (
    Code,
    u32,
    Option<(u32, &'static str, &'static str)>,
    Option<i64>,
);

async fn statuses(rls: &Rls, request: &RateLimitRequest) -> (Code, Vec<Expected>) {
    let response = rls.should_rate_limit(request).await.expect("an answer");
    let statuses = response
        .statuses
        .iter()
        .map(|status| {
            (
                Code::try_from(status.code).expect("a known status code"),
                status.limit_remaining,
                status.current_limit.as_ref().map(|limit| {
                    let unit = tollgate_envoy::rls::proto::service::rate_limit_response::rate_limit::Unit::try_from(limit.unit)
                        .expect("a known unit")
                        .as_str_name();
                    (limit.requests_per_unit, unit, &*limit.name.clone().leak())
                }),
                status.duration_until_reset.as_ref().map(|d| d.seconds),
            )
        })
        .collect();
    (
        Code::try_from(response.overall_code).expect("a known overall code"),
        statuses,
    )
}

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

#[tokio::test]
async fn exact_values_and_key_defaults() {
    let (rls, _) = rls(
        "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: { unit: second, requests_per_unit: 500 }\n  - key: database\n    rate_limit: { unit: Second, requests_per_unit: 50 }\n",
    );
    let users = request("mongo_cps", vec![descriptor(&[("database", "users")])]);
    assert_eq!(
        statuses(&rls, &users).await,
        (OK, vec![(OK, 499, Some((500, "SECOND", "")), Some(1))])
    );
    let other = request("mongo_cps", vec![descriptor(&[("database", "products")])]);
    assert_eq!(
        statuses(&rls, &other).await,
        (OK, vec![(OK, 49, Some((50, "SECOND", "")), Some(1))])
    );
    let empty = request("mongo_cps", vec![descriptor(&[("database", "")])]);
    assert_eq!(
        statuses(&rls, &empty).await.1[0].1,
        49,
        "an empty value falls to the default"
    );
}

#[tokio::test]
async fn nested_descriptors_apply_only_at_the_last_entry() {
    let (rls, _) = rls(r#"
domain: edge
descriptors:
  - key: remote_address
    descriptors:
      - key: path
        value: "/api/*"
        rate_limit: { unit: minute, requests_per_unit: 10, name: api_per_ip }
  - key: key2
    value: value3
  - key: key2
    rate_limit: { unit: hour, requests_per_unit: 5 }
"#);
    let nested = request(
        "edge",
        vec![descriptor(&[
            ("remote_address", "10.0.0.1"),
            ("path", "/api/users"),
        ])],
    );
    assert_eq!(
        statuses(&rls, &nested).await,
        (
            OK,
            vec![(OK, 9, Some((10, "MINUTE", "api_per_ip")), Some(40))]
        )
    );
    for entries in [
        vec![("remote_address", "10.0.0.1")],
        vec![("remote_address", "10.0.0.1"), ("path", "/web")],
        vec![
            ("remote_address", "10.0.0.1"),
            ("path", "/api/x"),
            ("extra", "1"),
        ],
        vec![("key2", "value3")],
    ] {
        let unmatched = request("edge", vec![descriptor(&entries)]);
        assert_eq!(
            statuses(&rls, &unmatched).await,
            (OK, vec![(OK, 0, None, None)]),
            "{entries:?}"
        );
    }
    let default = request("edge", vec![descriptor(&[("key2", "value4")])]);
    assert_eq!(
        statuses(&rls, &default).await.1,
        [(OK, 4, Some((5, "HOUR", "")), Some(2_800))]
    );
}

#[tokio::test]
async fn wildcards_match_in_file_order_and_anywhere_in_the_value() {
    let (rls, _) = rls(r#"
domain: w
descriptors:
  - key: name
    value: "bar*b"
    rate_limit: { unit: minute, requests_per_unit: 1, name: first }
  - key: name
    value: "ba*"
    rate_limit: { unit: minute, requests_per_unit: 2, name: second }
"#);
    let first = request("w", vec![descriptor(&[("name", "barab")])]);
    assert_eq!(
        statuses(&rls, &first).await.1[0].2,
        Some((1, "MINUTE", "first"))
    );
    let second = request("w", vec![descriptor(&[("name", "barc")])]);
    assert_eq!(
        statuses(&rls, &second).await.1[0].2,
        Some((2, "MINUTE", "second"))
    );
}

#[tokio::test]
async fn over_the_limit_counts_keep_counting_and_look_only_hits_see_it() {
    let (rls, _) = rls(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
    );
    let one = request("d", vec![descriptor(&[("k", "v")])]);
    assert_eq!(statuses(&rls, &one).await.1[0].1, 1);
    assert_eq!(statuses(&rls, &one).await.1[0].1, 0);
    assert_eq!(
        statuses(&rls, &one).await,
        (OVER, vec![(OVER, 0, Some((2, "MINUTE", "")), Some(40))])
    );
    let mut look = descriptor(&[("k", "v")]);
    look.hits_addend = Some(0);
    let peek = request("d", vec![look]);
    assert_eq!(
        statuses(&rls, &peek).await.0,
        OVER,
        "the over-limit hit was counted"
    );
}

#[tokio::test]
async fn hits_addend_at_request_and_descriptor_level() {
    let (rls, _) = rls(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n",
    );
    let mut three = request("d", vec![descriptor(&[("k", "a")])]);
    three.hits_addend = 3;
    assert_eq!(statuses(&rls, &three).await.1[0].1, 7);
    let mut look = descriptor(&[("k", "a")]);
    look.hits_addend = Some(0);
    assert_eq!(
        statuses(&rls, &request("d", vec![look])).await.1[0].1,
        7,
        "0 looks without counting"
    );
    let mut five = descriptor(&[("k", "a")]);
    five.hits_addend = Some(5);
    let mut both = request("d", vec![five]);
    both.hits_addend = 100;
    assert_eq!(
        statuses(&rls, &both).await.1[0].1,
        2,
        "the descriptor's addend wins"
    );
}

#[tokio::test]
async fn unlimited_replaces_shadow_and_zero() {
    let (rls, _) = rls(r#"
domain: d
descriptors:
  - key: free
    rate_limit: { unlimited: true }
  - key: specific
    rate_limit: { unit: minute, requests_per_unit: 100, name: specific, replaces: [{ name: generic }] }
  - key: generic
    rate_limit: { unit: minute, requests_per_unit: 1, name: generic }
  - key: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: blocked
    rate_limit: { unit: minute, requests_per_unit: 0 }
"#);
    let free = request("d", vec![descriptor(&[("free", "x")])]);
    assert_eq!(statuses(&rls, &free).await.1, [(OK, u32::MAX, None, None)]);
    let both = request(
        "d",
        vec![
            descriptor(&[("specific", "x")]),
            descriptor(&[("generic", "x")]),
        ],
    );
    for _ in 0..3 {
        let (overall, found) = statuses(&rls, &both).await;
        assert_eq!(overall, OK);
        assert_eq!(
            found[1],
            (OK, 0, None, None),
            "generic is replaced by specific"
        );
    }
    let trial = request("d", vec![descriptor(&[("trial", "x")])]);
    assert_eq!(statuses(&rls, &trial).await.1[0].1, 0);
    assert_eq!(
        statuses(&rls, &trial).await,
        (OK, vec![(OK, 0, Some((1, "MINUTE", "")), Some(40))]),
        "shadow mode answers OK with nothing remaining"
    );
    // A rule of zero requests says when its window ends, as upstream does: Envoy's reset field
    // was 0 without it.
    let blocked = request("d", vec![descriptor(&[("blocked", "x")])]);
    assert_eq!(
        statuses(&rls, &blocked).await,
        (OVER, vec![(OVER, 0, Some((0, "MINUTE", "")), Some(40))])
    );
}

#[tokio::test]
async fn per_request_overrides_and_unknown_domains() {
    let (rls, _) = rls(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1000 }\n",
    );
    let mut overridden = descriptor(&[("k", "v")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: RateLimitUnit::Minute as i32,
    });
    let request_with = request("d", vec![overridden]);
    assert_eq!(
        statuses(&rls, &request_with).await.1,
        [(OK, 1, Some((2, "MINUTE", "")), Some(40))]
    );
    let unknown = request(
        "nowhere",
        vec![descriptor(&[("k", "v")]), descriptor(&[("k", "w")])],
    );
    assert_eq!(
        statuses(&rls, &unknown).await,
        (OK, vec![(OK, 0, None, None), (OK, 0, None, None)])
    );
    // A descriptor without entries matches nothing and is answered OK, with no limit, as
    // upstream answers it; beside one over its limit, the request is still over.
    let empty = request("d", vec![descriptor(&[])]);
    assert_eq!(
        statuses(&rls, &empty).await,
        (OK, vec![(OK, 0, None, None)])
    );
    let mut over = descriptor(&[("k", "v")]);
    over.limit = Some(RateLimitOverride {
        requests_per_unit: 0,
        unit: RateLimitUnit::Minute as i32,
    });
    let mixed = request("d", vec![descriptor(&[]), over]);
    let (code, answered) = statuses(&rls, &mixed).await;
    assert_eq!((code, answered[0]), (OVER, (OK, 0, None, None)));
}

#[tokio::test]
async fn descriptors_count_independently() {
    let (rls, _) = rls(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
    );
    let both = request(
        "d",
        vec![descriptor(&[("a", "x")]), descriptor(&[("b", "x")])],
    );
    statuses(&rls, &both).await;
    let (overall, found) = statuses(&rls, &both).await;
    assert_eq!(overall, OVER);
    assert_eq!(
        (found[0].0, found[1].1),
        (OVER, 3),
        "b counted although a was over"
    );
}

#[tokio::test]
async fn algorithms_and_periods_beyond_envoy() {
    let (rls, clock) = rls(r#"
domain: d
descriptors:
  - key: smooth
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: gcra, burst: 2 }
  - key: half
    rate_limit: { period: 30s, requests_per_unit: 3 }
"#);
    let smooth = request("d", vec![descriptor(&[("smooth", "x")])]);
    assert_eq!(statuses(&rls, &smooth).await.1[0].1, 1);
    assert_eq!(statuses(&rls, &smooth).await.1[0].1, 0);
    assert_eq!(statuses(&rls, &smooth).await.0, OVER);
    clock.advance(std::time::Duration::from_millis(100));
    assert_eq!(
        statuses(&rls, &smooth).await.0,
        OK,
        "one more after one interval, as GCRA allows"
    );
    let half = request("d", vec![descriptor(&[("half", "x")])]);
    assert_eq!(
        statuses(&rls, &half).await.1,
        [(OK, 2, Some((3, "UNKNOWN", "")), Some(10))],
        "a 30 s window: 10 s left at :20, no envoy unit for it"
    );
}

#[tokio::test]
async fn calendar_windows_reset_at_the_calendars_boundary() {
    // 23:13:20 in Berlin on the 14th: the billing month ends at local midnight, 2 800 s away.
    let (rls, clock) = rls(r#"
domain: d
descriptors:
  - key: tenant
    rate_limit:
      unit: month
      requests_per_unit: 2
      calendar: { tz: Europe/Berlin, anchor_day: 15 }
"#);
    let call = request("d", vec![descriptor(&[("tenant", "acme")])]);
    let limit = Some((2, "MONTH", ""));
    assert_eq!(statuses(&rls, &call).await.1, [(OK, 1, limit, Some(2_800))]);
    assert_eq!(statuses(&rls, &call).await.1, [(OK, 0, limit, Some(2_800))]);
    assert_eq!(
        statuses(&rls, &call).await.1,
        [(OVER, 0, limit, Some(2_800))]
    );
    clock.advance(std::time::Duration::from_secs(2_800));
    assert_eq!(
        statuses(&rls, &call).await.1,
        [(OK, 1, limit, Some(30 * 86_400))],
        "a new month, to local midnight on December 15th"
    );
}

/// A descriptor of `hits`, as Envoy sends a usage report at the end of a stream.
fn report(entries: &[(&str, &str)], hits: u64) -> RateLimitRequest {
    let mut reported = descriptor(entries);
    reported.hits_addend = Some(hits);
    request("d", vec![reported])
}

#[tokio::test]
async fn count_refused_charges_a_usage_report_that_does_not_fit() {
    let (rls, clock) = rls(r#"
domain: d
descriptors:
  - key: tokens
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: token_bucket, count_refused: true }
  - key: plain
    rate_limit: { unit: hour, requests_per_unit: 100, algorithm: token_bucket }
"#);
    for key in ["tokens", "plain"] {
        assert_eq!(statuses(&rls, &report(&[(key, "k")], 60)).await.1[0].1, 40);
        assert_eq!(statuses(&rls, &report(&[(key, "k")], 60)).await.0, OVER);
    }
    // Without the flag the refused report is free: 40 are still there.
    assert_eq!(
        statuses(&rls, &report(&[("plain", "k")], 40)).await,
        (OK, vec![(OK, 0, Some((100, "HOUR", "")), Some(3600))])
    );
    // With it the 60 were charged: 20 in debt, so the limit is full again only after 120
    // tokens refill (36 s each), and a look is over until the debt is paid (12 minutes).
    let tokens = |hits| report(&[("tokens", "k")], hits);
    let limit = Some((100, "HOUR", ""));
    assert_eq!(
        statuses(&rls, &tokens(0)).await.1,
        [(OVER, 0, limit, Some(4320))]
    );
    clock.advance(std::time::Duration::from_secs(12 * 60 - 1));
    assert_eq!(statuses(&rls, &tokens(0)).await.0, OVER);
    clock.advance(std::time::Duration::from_secs(1));
    assert_eq!(
        statuses(&rls, &tokens(0)).await.1,
        [(OK, 0, limit, Some(3600))]
    );
    clock.advance(std::time::Duration::from_secs(36));
    assert_eq!(
        statuses(&rls, &tokens(1)).await.1,
        [(OK, 0, limit, Some(3600))]
    );
}

#[tokio::test]
async fn response_headers_when_enabled() {
    let clock = ManualClock::new(NOW_SECONDS * 1_000_000);
    let store = AnyStore::Memory(MemoryStore::builder().clock(Arc::new(clock)).build());
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 3 }\n";
    let rls = Rls::new(
        Limiter::new(store),
        RlsConfig::from_documents(&[("t.yaml", yaml)]).unwrap(),
        true,
    );
    let response = rls
        .should_rate_limit(&request(
            "d",
            vec![descriptor(&[("a", "x")]), descriptor(&[("b", "x")])],
        ))
        .await
        .unwrap();
    let headers: Vec<(String, String)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let expected = [
        ("RateLimit-Limit", "3"),
        ("RateLimit-Remaining", "2"),
        ("RateLimit-Reset", "40"),
    ];
    assert_eq!(headers, expected.map(|(k, v)| (k.to_owned(), v.to_owned())));

    // Named as a deployment names them.
    let renamed = rls.with_header_names(RlsHeaderNames {
        limit: "X-RateLimit-Limit".to_owned(),
        remaining: "X-RateLimit-Remaining".to_owned(),
        reset: "X-RateLimit-Reset".to_owned(),
    });
    let response = renamed
        .should_rate_limit(&request("d", vec![descriptor(&[("b", "x")])]))
        .await
        .unwrap();
    let names: Vec<&str> = response
        .response_headers_to_add
        .iter()
        .map(|h| h.key.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset"
        ]
    );
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments() {
    let (rls, _) = rls(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    );
    let mut bad_override = descriptor(&[("k", "v")]);
    bad_override.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Unknown as i32,
    });
    let cases = [
        (
            request("", vec![descriptor(&[("k", "v")])]),
            "rate limit domain must not be empty",
        ),
        (
            request("d", vec![]),
            "rate limit descriptor list must not be empty",
        ),
        (
            request("d", vec![descriptor(&[("k", "v"), ("", "v")])]),
            "descriptor 0, entry 1: the key is empty",
        ),
        (
            request("d", vec![bad_override.clone()]),
            "descriptors[0].limit.unit: a limit override needs a known unit (SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)",
        ),
        (
            // Refused whether or not the domain is configured.
            request("unconfigured", vec![bad_override]),
            "descriptors[0].limit.unit: a limit override needs a known unit (SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)",
        ),
    ];
    for (request, message) in cases {
        assert_eq!(
            rls.should_rate_limit(&request).await,
            Err(RlsError::InvalidArgument(message.to_owned()))
        );
    }
}

/// Configurations that must be refused, with the error each must produce.
const REFUSED: &[(&str, &str)] = &[
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5, calendar: { tz: Europe/Berlin } }\n",
        "bad.yaml:4:17: descriptor \"k\": rate_limit: calendar: the quota's period must be one day, week, month or year",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: month, requests_per_unit: 5, calendar: { tz: Mars/Olympus } }\n",
        "bad.yaml:4:70: descriptor \"k\": rate_limit: calendar.tz: unknown time zone \"Mars/Olympus\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 5, count_refused: always }\n",
        "bad.yaml:4:68: descriptor \"k\": rate_limit.count_refused: expected true or false, found a string",
    ),
    (
        "descriptors: []\n",
        "bad.yaml:1:1: the configuration needs a non-empty \"domain\"",
    ),
    ("", "bad.yaml: the file is empty: it needs a \"domain\""),
    (
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit: { unit: second, requests_per_unit: 1 }\n",
        "bad.yaml:4:5: descriptor \"k\": unknown field \"ratelimit\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
        "bad.yaml:4:25: descriptor \"k\": rate_limit.unit: unknown unit \"fortnight\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true, unit: second }\n",
        "bad.yaml:4:17: descriptor \"k\": rate_limit: an unlimited limit takes no unit or period",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [{}] }\n",
        "bad.yaml:4:66: descriptor \"k\": rate_limit.replaces: every entry needs a non-empty \"name\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, name: a, replaces: [{ name: a }] }\n",
        "bad.yaml:4:17: descriptor \"k\": rate_limit: replaces may not name the limit itself",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
        "bad.yaml:3:5: descriptor \"k_v\": share_threshold can only be used with a wildcard value",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
        "bad.yaml:5:5: descriptor \"k_v\": the same key and value appear twice under one parent",
    ),
    (
        "domain: d\ndescriptors:\n  - value: v\n",
        "bad.yaml:3:5: a descriptor needs a non-empty \"key\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: -1 }\n",
        "bad.yaml:4:52: descriptor \"k\": rate_limit.requests_per_unit: expected a whole number from 0 to 4294967295",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5, algorithm: tokenbucket }\n",
        "bad.yaml:4:66: descriptor \"k\": rate_limit.algorithm: unknown algorithm \"tokenbucket\"",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5, burst: 9 }\n",
        "bad.yaml:4:17: descriptor \"k\": rate_limit: burst applies only to token_bucket, leaky_bucket and gcra",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, period: 30s, requests_per_unit: 5 }\n",
        "bad.yaml:4:41: descriptor \"k\": rate_limit: give a unit or a period, not both",
    ),
    (
        "domain: d\n---\ndomain: e\n",
        "bad.yaml:3:1: expected one YAML document (one domain) per file",
    ),
    ("domain: [d\n", "bad.yaml:2:1: invalid YAML"),
];

#[test]
fn bad_configurations_are_refused_with_the_file_and_the_problem() {
    for (yaml, expected) in REFUSED {
        let errors = match RlsConfig::from_documents(&[("bad.yaml", yaml)]) {
            Ok(_) => panic!("accepted:\n{yaml}"),
            Err(errors) => errors.to_string(),
        };
        assert!(
            errors.lines().any(|line| line.starts_with(expected)),
            "for:\n{yaml}\nexpected {expected}\nfound:\n{errors}"
        );
    }
}

#[test]
fn a_directory_is_read_recursively_and_a_domain_may_appear_once() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::create_dir(directory.path().join("more")).unwrap();
    std::fs::write(directory.path().join("a.yaml"), "domain: a\n").unwrap();
    std::fs::write(directory.path().join("more/b.yml"), "domain: b\n").unwrap();
    std::fs::write(directory.path().join("notes.txt"), "not configuration").unwrap();
    let config = RlsConfig::load_dir(directory.path()).unwrap();
    let mut domains: Vec<&str> = config.domains().collect();
    domains.sort();
    assert_eq!(domains, ["a", "b"]);
    std::fs::write(directory.path().join("more/c.yaml"), "domain: a\n").unwrap();
    let error = RlsConfig::load_dir(directory.path())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("more/c.yaml: domain \"a\" is already configured by another file"),
        "{error}"
    );
}

#[tokio::test]
async fn merged_domains_take_every_files_descriptors() {
    let directory = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| std::fs::write(directory.path().join(name), text).unwrap();
    file(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    );
    file(
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n",
    );
    let config = RlsConfig::load_dir_merging(directory.path(), true).expect("merged");
    let (service, _) = rls("domain: unused\n");
    service.set_config(config);
    let both = request(
        "d",
        vec![descriptor(&[("a", "1")]), descriptor(&[("b", "1")])],
    );
    let (_, answered) = statuses(&service, &both).await;
    assert!(
        answered.iter().all(|status| status.2.is_some()),
        "both files' limits apply: {answered:?}"
    );
    // The same key at the top of two files is still an error.
    file(
        "c.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: hour, requests_per_unit: 9 }\n",
    );
    let error = RlsConfig::load_dir_merging(directory.path(), true)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "c.yaml: domain \"d\": descriptor \"a\" is already configured by another file"
        ),
        "{error}"
    );
}

/// The overall code of each request in turn, and each one's statuses' codes.
async fn codes(rls: &Rls, requests: &[RateLimitRequest]) -> Vec<(Code, Vec<Code>)> {
    let mut answers = Vec::new();
    for request in requests {
        let (overall, statuses) = statuses(rls, request).await;
        answers.push((overall, statuses.iter().map(|s| s.0).collect()));
    }
    answers
}

const QUOTA_CONFIG: &str = "domain: d
descriptors:
  - key: a
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: b
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: c
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: free
    rate_limit: { unlimited: true }
";

#[tokio::test]
async fn quota_mode_refuses_only_when_every_quota_descriptor_is_over() {
    let (rls, _) = rls(QUOTA_CONFIG);
    let a = || descriptor(&[("a", "1")]);
    let b = || descriptor(&[("b", "1")]);
    let c = || descriptor(&[("c", "1")]);
    let free = || descriptor(&[("free", "1")]);
    assert_eq!(
        codes(
            &rls,
            &[
                request("d", vec![a()]),
                // a is over, b is not: the statuses say so, the request passes.
                request("d", vec![a(), b()]),
                // Every quota descriptor over: refused; an unlimited one does not count.
                request("d", vec![a(), b(), free()]),
                // A normal descriptor over refuses whatever the quota ones say.
                request("d", vec![c()]),
                request("d", vec![c(), descriptor(&[("a", "2")])]),
            ]
        )
        .await,
        [
            (OK, vec![OK]),
            (OK, vec![OVER, OK]),
            (OVER, vec![OVER, OVER, OK]),
            (OK, vec![OK]),
            (OVER, vec![OVER, OK]),
        ]
    );
}

#[tokio::test]
async fn global_quota_and_shadow_modes() {
    let quota_everywhere = rls(QUOTA_CONFIG).0.with_modes(RlsModes {
        quota: true,
        ..RlsModes::default()
    });
    let c = || descriptor(&[("c", "1")]);
    let unmatched = || descriptor(&[("nothing", "1")]);
    assert_eq!(
        codes(
            &quota_everywhere,
            &[
                request("d", vec![c()]),
                // Every descriptor in quota mode: c alone over is refused...
                request("d", vec![c()]),
                // ...but beside one that matched nothing (a quota descriptor that passed), not.
                request("d", vec![c(), unmatched()]),
            ]
        )
        .await,
        [(OK, vec![OK]), (OVER, vec![OVER]), (OK, vec![OVER, OK])]
    );
    let shadow = rls(QUOTA_CONFIG).0.with_modes(RlsModes {
        shadow: true,
        ..RlsModes::default()
    });
    assert_eq!(
        codes(&shadow, &[request("d", vec![c()]), request("d", vec![c()])]).await,
        [(OK, vec![OK]), (OK, vec![OVER])],
        "global shadow mode answers OK overall, the status still says over"
    );
}

#[tokio::test]
async fn descriptor_metadata_comes_back_for_the_descriptors_that_passed() {
    let config = "domain: d
descriptors:
  - key: tier
    value: gold
    metadata: { plan: gold, weight: 3, flags: [a, b], nested: { x: 1 } }
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: user
    metadata: { plan: per-user, nested: { y: 2 } }
    rate_limit: { unit: minute, requests_per_unit: 1 }
";
    let service = rls(config).0.with_modes(RlsModes {
        dynamic_metadata: true,
        ..RlsModes::default()
    });
    let tier = descriptor(&[("tier", "gold")]);
    let user = descriptor(&[("user", "u1")]);
    let both = request("d", vec![tier.clone(), user.clone()]);
    let first = service.should_rate_limit(&both).await.expect("an answer");
    let metadata = tollgate_envoy::rls::json::render_response(&first)["dynamicMetadata"].clone();
    assert_eq!(
        metadata,
        serde_json::json!({
            "domain": "d",
            "descriptors": [{"entries": ["tier=gold"]}, {"entries": ["user=u1"]}],
            // Both passed: merged, the first value of a field kept, mappings merged.
            "metadata": {"plan": "gold", "weight": 3.0, "flags": ["a", "b"], "nested": {"x": 1.0, "y": 2.0}}
        })
    );
    // The user's limit is now spent: only the tier's metadata comes back.
    let second = service.should_rate_limit(&both).await.expect("an answer");
    let metadata = tollgate_envoy::rls::json::render_response(&second)["dynamicMetadata"].clone();
    assert_eq!(
        metadata["metadata"],
        serde_json::json!({"plan": "gold", "weight": 3.0, "flags": ["a", "b"], "nested": {"x": 1.0}})
    );
    // Without the switch, no dynamic metadata.
    let plain = rls(config).0;
    let answer = plain.should_rate_limit(&both).await.expect("an answer");
    assert!(answer.dynamic_metadata.is_none());
}

#[tokio::test]
async fn descriptors_written_with_nothing_after_them_are_empty() {
    let (quiet, _) = rls(
        "domain: quiet\ndescriptors:\n  - key: path\n    descriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
    );
    let path = request("quiet", vec![descriptor(&[("path", "/a")])]);
    assert_eq!(
        statuses(&quiet, &path).await,
        (OK, vec![(OK, 0, None, None)])
    );
    let user = request("quiet", vec![descriptor(&[("user", "u1")])]);
    assert_eq!(statuses(&quiet, &user).await.1[0].1, 1);
    let (empty, _) = rls("domain: empty\ndescriptors:\n");
    let any = request("empty", vec![descriptor(&[("k", "v")])]);
    assert_eq!(
        statuses(&empty, &any).await,
        (OK, vec![(OK, 0, None, None)])
    );
}

/// Every per-descriptor statistic the service exposes, as `name{labels} value` lines.
fn statistics(rls: &Rls) -> Vec<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &rls.stats().registry()).expect("encoded");
    text.lines()
        .filter(|line| line.starts_with("tollgate_ratelimit_service_rate_limit_"))
        .map(|line| {
            line.trim_start_matches("tollgate_ratelimit_service_rate_limit_")
                .to_owned()
        })
        .collect()
}

async fn hit(rls: &Rls, domain: &str, entries: &[(&str, &str)], times: usize) {
    let once = request(domain, vec![descriptor(entries)]);
    for _ in 0..times {
        rls.should_rate_limit(&once).await.expect("an answer");
    }
}

const STATS_CONFIG: &str = "domain: stats
descriptors:
  - key: database
    value: users
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: unspec
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: files
    value: 'read*'
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: shadowed
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: free
    rate_limit: { unlimited: true }
  - key: blocked
    rate_limit: { unit: hour, requests_per_unit: 0 }
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: { unit: hour, requests_per_unit: 5 }
";

#[tokio::test]
async fn per_descriptor_statistics_count_as_upstream_counts_them() {
    let (rls, _) = rls(STATS_CONFIG);
    // 10 per hour, near past 8: hits 9 and 10 are near, 11 and 12 over (the over-limit hits
    // are counted, as upstream's counter counts them).
    hit(&rls, "stats", &[("database", "users")], 12).await;
    // A look-only check (hits_addend 0) counts nothing.
    let mut look = descriptor(&[("database", "users")]);
    look.hits_addend = Some(0);
    rls.should_rate_limit(&request("stats", vec![look]))
        .await
        .expect("an answer");
    // detailed_metric: under the request's value, never under the configured key alone.
    hit(&rls, "stats", &[("unspec", "a")], 3).await;
    hit(&rls, "stats", &[("unspec", "b")], 1).await;
    // value_to_metric: the route's value, the method's key alone (it has no flag).
    hit(&rls, "stats", &[("route", "/a"), ("method", "GET")], 2).await;
    hit(&rls, "stats", &[("route", "/b"), ("method", "PUT")], 1).await;
    // A wildcard is named by its pattern.
    hit(&rls, "stats", &[("files", "readme")], 1).await;
    hit(&rls, "stats", &[("files", "readall")], 1).await;
    // Shadow mode: over the limit but answered OK, counted in shadow_mode too.
    hit(&rls, "stats", &[("shadowed", "x")], 2).await;
    // Unlimited: no statistics; zero requests: every hit over.
    hit(&rls, "stats", &[("free", "x")], 3).await;
    hit(&rls, "stats", &[("blocked", "x")], 2).await;
    // Deeper than two levels: named by the first two, as upstream's mapping reads them.
    hit(&rls, "stats", &[("a", "1"), ("b", "2"), ("c", "3")], 1).await;
    // A per-request limit: under the request's entries.
    let mut overridden = descriptor(&[("tenant", "t1")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Hour as i32,
    });
    let overridden = request("stats", vec![overridden]);
    for _ in 0..2 {
        rls.should_rate_limit(&overridden).await.expect("an answer");
    }

    let mut found = statistics(&rls);
    found.sort();
    let mut expected = vec![
        r#"total_hits{domain="stats",key1="database_users"} 12"#,
        r#"within_limit{domain="stats",key1="database_users"} 10"#,
        r#"near_limit{domain="stats",key1="database_users"} 2"#,
        r#"over_limit{domain="stats",key1="database_users"} 2"#,
        // 2 per hour, near past 1: the second hit is near, the third over.
        r#"total_hits{domain="stats",key1="unspec_a"} 3"#,
        r#"within_limit{domain="stats",key1="unspec_a"} 2"#,
        r#"near_limit{domain="stats",key1="unspec_a"} 1"#,
        r#"over_limit{domain="stats",key1="unspec_a"} 1"#,
        r#"total_hits{domain="stats",key1="unspec_b"} 1"#,
        r#"within_limit{domain="stats",key1="unspec_b"} 1"#,
        r#"total_hits{domain="stats",key1="route_/a",key2="method"} 2"#,
        r#"within_limit{domain="stats",key1="route_/a",key2="method"} 2"#,
        r#"total_hits{domain="stats",key1="route_/b",key2="method"} 1"#,
        r#"within_limit{domain="stats",key1="route_/b",key2="method"} 1"#,
        r#"total_hits{domain="stats",key1="files_read*"} 2"#,
        r#"within_limit{domain="stats",key1="files_read*"} 2"#,
        // 1 per hour, near past 0: the first hit is near; the second over, in shadow mode.
        r#"total_hits{domain="stats",key1="shadowed"} 2"#,
        r#"within_limit{domain="stats",key1="shadowed"} 1"#,
        r#"near_limit{domain="stats",key1="shadowed"} 1"#,
        r#"over_limit{domain="stats",key1="shadowed"} 1"#,
        r#"shadow_mode{domain="stats",key1="shadowed"} 1"#,
        r#"total_hits{domain="stats",key1="blocked"} 2"#,
        r#"over_limit{domain="stats",key1="blocked"} 2"#,
        r#"total_hits{domain="stats",key1="a",key2="b"} 1"#,
        r#"within_limit{domain="stats",key1="a",key2="b"} 1"#,
        r#"total_hits{domain="stats",key1="tenant_t1"} 2"#,
        r#"within_limit{domain="stats",key1="tenant_t1"} 1"#,
        r#"near_limit{domain="stats",key1="tenant_t1"} 1"#,
        r#"over_limit{domain="stats",key1="tenant_t1"} 1"#,
    ];
    expected.sort();
    assert_eq!(found, expected);
}

#[tokio::test]
async fn statistics_outlive_a_reload_and_keys_from_requests_are_capped() {
    let config = || RlsConfig::from_documents(&[("stats.yaml", STATS_CONFIG)]).expect("valid");
    let rls = rls(STATS_CONFIG).0.with_stats(RlsStatsFlags {
        max_stat_keys: 2,
        ..RlsStatsFlags::default()
    });
    hit(&rls, "stats", &[("database", "users")], 3).await;
    rls.set_config(config());
    hit(&rls, "stats", &[("database", "users")], 1).await;
    assert!(
        statistics(&rls)
            .contains(&r#"total_hits{domain="stats",key1="database_users"} 4"#.to_owned()),
        "the counts carry over a reload: {:?}",
        statistics(&rls)
    );
    // Two keys from request values fit; the third's hits are counted as refused.
    hit(&rls, "stats", &[("unspec", "a")], 1).await;
    hit(&rls, "stats", &[("unspec", "b")], 1).await;
    hit(&rls, "stats", &[("unspec", "c")], 2).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &rls.stats().registry()).expect("encoded");
    assert!(text.contains("tollgate_rls_stat_keys 2\n"), "{text}");
    assert!(
        text.contains("tollgate_rls_stat_keys_refused_total 2\n"),
        "{text}"
    );
    assert!(!text.contains("unspec_c"), "{text}");
    // A rule gone from the configuration takes its statistics with it.
    rls.set_config(
        RlsConfig::from_documents(&[("stats.yaml", "domain: stats\ndescriptors: []\n")])
            .expect("valid"),
    );
    assert!(
        !statistics(&rls)
            .iter()
            .any(|line| line.contains("database_users")),
        "{:?}",
        statistics(&rls)
    );
}
