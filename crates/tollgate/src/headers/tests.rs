use std::time::Duration;

use super::*;
use crate::algorithm::Algorithm;

fn limit(name: &str, algorithm: Algorithm, quota: &str) -> Limit {
    Limit::new(name, algorithm, quota.parse().unwrap()).unwrap()
}

fn allowed(remaining: u64, reset_after: Micros) -> Decision {
    Decision::new(true, 100, remaining, reset_after, Some(0), 0)
}

#[test]
fn ietf_fields_match_the_draft_examples_and_parse_as_structured_fields() {
    let burst = limit("burst", Algorithm::FixedWindow, "100/m");
    let daily = limit("daily", Algorithm::FixedWindow, "1000/d");
    let views = [
        LimitView {
            label: "burst",
            limit: &burst,
            unit: QuotaUnit::Requests,
            decision: allowed(50, 30_000_000),
            partition: None,
        },
        LimitView {
            label: "daily",
            limit: &daily,
            unit: QuotaUnit::Requests,
            decision: allowed(999, 3_600_000_000),
            partition: None,
        },
    ];
    let fields = rate_limit_fields(&[HeaderFamily::Ietf], &views, Some(0), 0).to_vec();
    assert_eq!(
        fields,
        [
            (
                "ratelimit-policy",
                r#""burst";q=100;w=60, "daily";q=1000;w=86400"#.to_owned()
            ),
            (
                "ratelimit",
                r#""burst";r=50;t=30, "daily";r=999;t=3600"#.to_owned()
            ),
        ]
    );
    for (_, value) in &fields {
        let parsed: sfv::List = sfv::Parser::new(value)
            .parse()
            .expect("a structured-field list");
        assert_eq!(parsed.len(), 2);
    }
}

#[test]
fn a_denying_limit_reports_when_this_request_would_fit() {
    let per_second = limit("rate", Algorithm::Gcra, "10/s");
    let denied = Decision::new(false, 10, 0, 1_000_000, Some(250_001), 0);
    let view = LimitView {
        label: "rate",
        limit: &per_second,
        unit: QuotaUnit::Requests,
        decision: denied,
        partition: None,
    };
    assert_eq!(view.seconds_until_more(), 1);
    assert_eq!(retry_after_seconds(Duration::from_micros(250_001)), 1);
    assert_eq!(retry_after_seconds(Duration::from_micros(1_000_001)), 2);
    assert_eq!(retry_after_seconds(Duration::ZERO), 1);
}

#[test]
fn rate_algorithms_report_their_burst_and_its_refill_time() {
    let bucket = Limit::builder("b", Algorithm::TokenBucket, "10/s".parse().unwrap())
        .burst(20)
        .build()
        .unwrap();
    let view = LimitView {
        label: "b",
        limit: &bucket,
        unit: QuotaUnit::ContentBytes,
        decision: allowed(5, 0),
        partition: None,
    };
    assert_eq!(view.quota_and_window(), (20, 2));
    assert_eq!(
        ietf_policy_field(&[view]).unwrap(),
        r#""b";q=20;w=2;qu="content-bytes""#
    );
}

#[test]
fn older_families_describe_the_binding_limit() {
    let hourly = limit("hourly", Algorithm::FixedWindow, "1000/h");
    let view = LimitView {
        label: "hourly",
        limit: &hourly,
        unit: QuotaUnit::Requests,
        decision: allowed(900, 1_800_000_000),
        partition: None,
    };
    let now = 1_700_000_000_000_000;
    let fields = rate_limit_fields(
        &[HeaderFamily::Draft, HeaderFamily::Legacy],
        &[view],
        Some(0),
        now,
    );
    let get = |name: &str| fields.get(name);
    assert_eq!(get("ratelimit-limit"), Some("1000"));
    assert_eq!(get("ratelimit-remaining"), Some("900"));
    assert_eq!(get("ratelimit-reset"), Some("1800"));
    assert_eq!(get("ratelimit-policy"), Some("1000;w=3600"));
    assert_eq!(get("x-ratelimit-used"), Some("100"));
    assert_eq!(get("x-ratelimit-reset"), Some("1700001800"));
    assert_eq!(get("x-ratelimit-resource"), Some("hourly"));
}

#[test]
fn labels_outside_printable_ascii_cannot_break_the_field() {
    let l = limit("x", Algorithm::FixedWindow, "1/s");
    let view = LimitView {
        label: "ünicode\"quote",
        limit: &l,
        unit: QuotaUnit::Requests,
        decision: allowed(1, 0),
        partition: None,
    };
    let value = ietf_field(&[view]).unwrap();
    let parsed: sfv::List = sfv::Parser::new(&value)
        .parse()
        .expect("still a valid list");
    assert_eq!(parsed.len(), 1);
}

/// Found by the `rate_limit_headers` fuzz target: times near the end of `u64` overflowed the
/// legacy reset.
#[test]
fn extreme_times_saturate_instead_of_overflowing() {
    let window = limit("w", Algorithm::FixedWindow, "5/h");
    let views = [LimitView {
        label: "w",
        limit: &window,
        unit: QuotaUnit::Requests,
        decision: Decision::new(false, 5, 0, u64::MAX - 1, Some(u64::MAX - 2), 0),
        partition: None,
    }];
    let fields = rate_limit_fields(&[HeaderFamily::Legacy], &views, Some(0), u64::MAX - 3);
    let reset = fields
        .iter()
        .find(|(name, _)| *name == "x-ratelimit-reset")
        .expect("a reset field");
    assert_eq!(reset.1, u64::MAX.div_ceil(MICROS_PER_SECOND).to_string());
}

#[test]
fn a_partition_key_is_a_byte_sequence_on_both_ietf_fields() {
    let per_user = limit("peruser", Algorithm::FixedWindow, "100/m");
    let views = [LimitView {
        label: "peruser",
        limit: &per_user,
        unit: QuotaUnit::Requests,
        decision: allowed(99, 60_000_000),
        partition: Some(&[0x70, 0x7b, 0x1d, 0x76, 0x34, 0x5a]),
    }];
    let fields = rate_limit_fields(&[HeaderFamily::Ietf], &views, Some(0), 0).to_vec();
    assert_eq!(
        fields,
        [
            (
                "ratelimit-policy",
                r#""peruser";q=100;w=60;pk=:cHsddjRa:"#.to_owned()
            ),
            (
                "ratelimit",
                r#""peruser";r=99;t=60;pk=:cHsddjRa:"#.to_owned()
            ),
        ]
    );
    for (_, value) in &fields {
        let parsed: sfv::List = sfv::Parser::new(value).parse().expect("a list");
        let sfv::ListEntry::Item(item) = &parsed[0] else {
            panic!("an item");
        };
        assert_eq!(
            item.params.get("pk"),
            Some(&sfv::BareItem::ByteSequence(vec![
                0x70, 0x7b, 0x1d, 0x76, 0x34, 0x5a
            ]))
        );
    }
}

proptest::proptest! {
    /// Whatever the names, counts and partition keys, both IETF fields read back, through a
    /// structured-field parser, as one item per limit with the name (printable ASCII kept,
    /// anything else `?`) and the values written.
    #[test]
    fn ietf_fields_read_back_as_written(
        labels in proptest::collection::vec("[ -~\"\\\\é]{0,12}", 1..4),
        remaining in proptest::prelude::any::<u64>(),
        reset_after in 0u64..u64::MAX / 2,
        partition in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
        bytes_unit in proptest::prelude::any::<bool>(),
    ) {
        let counted = limit("counted", Algorithm::FixedWindow, "100/m");
        let unit = if bytes_unit { QuotaUnit::ContentBytes } else { QuotaUnit::Requests };
        let views: Vec<LimitView<'_>> = labels
            .iter()
            .map(|label| LimitView {
                label,
                limit: &counted,
                unit,
                decision: Decision::new(true, 100, remaining, reset_after, Some(0), 0),
                partition: partition.as_deref(),
            })
            .collect();
        for (value, expected) in [
            (ietf_policy_field(&views).unwrap(), [("q", 100), ("w", 60)]),
            (
                ietf_field(&views).unwrap(),
                [
                    ("r", remaining.min(999_999_999_999_999)),
                    ("t", reset_after.div_ceil(MICROS_PER_SECOND)),
                ],
            ),
        ] {
            let parsed: sfv::List = sfv::Parser::new(&value).parse().expect("a list");
            proptest::prop_assert_eq!(parsed.len(), labels.len());
            for (entry, label) in parsed.iter().zip(&labels) {
                let sfv::ListEntry::Item(item) = entry else {
                    panic!("an item in {value}");
                };
                let shown: String = label
                    .chars()
                    .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
                    .collect();
                proptest::prop_assert_eq!(item.bare_item.as_string().map(|s| s.as_str()), Some(shown.as_str()));
                for (key, number) in expected {
                    proptest::prop_assert_eq!(
                        item.params.get(key).and_then(sfv::BareItem::as_integer).map(i64::from),
                        Some(i64::try_from(number).unwrap())
                    );
                }
                proptest::prop_assert_eq!(
                    item.params.get("pk").and_then(sfv::BareItem::as_byte_sequence),
                    partition.as_deref()
                );
            }
            if value.contains(";q=") {
                let qu = parsed.iter().filter_map(|entry| match entry {
                    sfv::ListEntry::Item(item) => item.params.get("qu").and_then(sfv::BareItem::as_string).map(|s| s.as_str().to_owned()),
                    sfv::ListEntry::InnerList(_) => None,
                }).next();
                proptest::prop_assert_eq!(qu, bytes_unit.then(|| "content-bytes".to_owned()));
            }
        }
    }
}
