//! A policy's limits and what shapes its charge: cost, soft limit, penalty, concurrency.

use std::time::Duration;

use super::values::read_duration;
use super::{LIMIT_FIELDS, MAX_LIMITS_PER_POLICY};
use crate::algorithm::Algorithm;
use crate::policy::model::{ConcurrencyConfig, CostConfig, LimitConfig, PenaltyConfig, SoftLimit};
use crate::yaml::Node;
use crate::yaml::read_calendar;
use tollgate_core::quota::Quota;
use tollgate_core::spec::{LimitSpec, leaky_mode};

pub(super) fn read_limits(node: Node<'_, '_>, what: &str, default_name: &str) -> Vec<LimitConfig> {
    let Some(items) = node.strict_list(&format!("{what}: limits")) else {
        return Vec::new();
    };
    if items.len() > MAX_LIMITS_PER_POLICY {
        node.error(format!(
            "{what}: {} limits, the maximum is {MAX_LIMITS_PER_POLICY}",
            items.len()
        ));
    }
    items
        .iter()
        .take(MAX_LIMITS_PER_POLICY)
        .enumerate()
        .filter_map(|(index, item)| {
            let fallback = if index == 0 {
                default_name.to_owned()
            } else {
                format!("{default_name}-{}", index + 1)
            };
            read_limit(*item, what, fallback)
        })
        .collect()
}

pub(super) fn read_limit(node: Node<'_, '_>, what: &str, fallback: String) -> Option<LimitConfig> {
    let map = node.map(&format!("{what}: a limit"))?;
    let name = map
        .get("name")
        .and_then(|n| n.text("name"))
        .map_or(fallback, |t| t.into_owned());
    let what = format!("{what}, limit {name:?}");
    let algorithm = map
        .required("algorithm", &what)
        .and_then(|n| n.parse::<Algorithm>(&format!("{what}: algorithm")));
    let quota = map
        .required("quota", &what)
        .and_then(|n| n.parse::<Quota>(&format!("{what}: quota")));
    let burst = map.get("burst").and_then(|n| {
        n.number(
            &format!("{what}: burst"),
            1..=tollgate_core::quota::MAX_COUNT,
        )
    });
    let delay_after = map.get("delay_after").and_then(|n| {
        n.number(
            &format!("{what}: delay_after"),
            1..=tollgate_core::quota::MAX_COUNT,
        )
    });
    let mode_node = map.get("mode");
    let mode_text = mode_node.and_then(|n| n.text("mode"));
    let mode = leaky_mode(mode_text.as_deref(), delay_after).unwrap_or_else(|error| {
        mode_node
            .unwrap_or(node)
            .error(format!("{what}: mode: {error}"));
        None
    });
    let lease = map
        .get("lease")
        .and_then(|n| {
            n.number(
                &format!("{what}: lease"),
                1..=tollgate_core::quota::MAX_COUNT,
            )
        })
        .unwrap_or(0);
    let scope = map
        .get("scope")
        .and_then(|n| n.parse::<crate::Scope>(&format!("{what}: scope")))
        .unwrap_or_default();
    let max_debt = map.get("max_debt").and_then(|n| {
        n.number(
            &format!("{what}: max_debt"),
            0..=tollgate_core::check::MAX_COST,
        )
    });
    let calendar = map.get("calendar").map(|n| read_calendar(n, &what));
    map.deny_unknown(&what, LIMIT_FIELDS);
    let calendar = match calendar {
        Some(read) => Some(read?),
        None => None,
    };
    Some(LimitConfig {
        name,
        spec: LimitSpec {
            algorithm: algorithm?,
            quota: quota?,
            burst,
            mode,
            lease,
            scope,
            max_debt,
            debt_expires_with_window: false,
            calendar,
        },
        origin: map.origin(),
    })
}

pub(super) fn read_cost(node: Node<'_, '_>, what: &str) -> Option<CostConfig> {
    if node.is_mapping() {
        let map = node.map(&format!("{what}: cost"))?;
        let header = map
            .required("header", &format!("{what}: cost"))
            .and_then(|n| n.text("cost.header"))
            .map(|t| t.to_ascii_lowercase());
        let default = map
            .get("default")
            .and_then(|n| n.number("cost.default", 0..=tollgate_core::check::MAX_COST));
        let max = map
            .get("max")
            .and_then(|n| n.number("cost.max", 1..=tollgate_core::check::MAX_COST));
        map.deny_unknown(&format!("{what}: cost"), &["header", "default", "max"]);
        return Some(CostConfig::Header {
            name: header?,
            default: default.unwrap_or(1),
            max: max.unwrap_or(tollgate_core::check::MAX_COST),
        });
    }
    let text = node.text(&format!("{what}: cost"))?;
    if text == "body" {
        return Some(CostConfig::Body);
    }
    if let Some(("header", name)) = text.split_once(':')
        && !name.is_empty()
    {
        return Some(CostConfig::Header {
            name: name.to_ascii_lowercase(),
            default: 1,
            max: tollgate_core::check::MAX_COST,
        });
    }
    match text.parse::<u64>() {
        Ok(cost) if cost <= tollgate_core::check::MAX_COST => Some(CostConfig::Fixed(cost)),
        _ => {
            node.error(format!(
                "{what}: cost: expected a whole number, \"header:<name>\", \"body\" or {{header, default, max}}, found {text:?}"
            ));
            None
        }
    }
}

pub(super) fn read_soft_limit(node: Node<'_, '_>, what: &str) -> Option<SoftLimit> {
    let map = node.map(&format!("{what}: soft_limit"))?;
    let at = map
        .required("at", &format!("{what}: soft_limit"))
        .and_then(|n| {
            n.parse::<f64>(&format!("{what}: soft_limit.at"))
                .map(|at| (n, at))
        });
    let tarpit = map
        .get("tarpit")
        .and_then(|n| read_duration(n, &format!("{what}: soft_limit.tarpit")));
    map.deny_unknown(&format!("{what}: soft_limit"), &["at", "tarpit"]);
    let (n, at) = at?;
    if !(0.0..1.0).contains(&at) || at == 0.0 {
        n.error(format!(
            "{what}: soft_limit.at: expected a fraction between 0 and 1, such as 0.8"
        ));
        return None;
    }
    Some(SoftLimit { at, tarpit })
}

pub(super) fn read_penalty(node: Node<'_, '_>, what: &str) -> Option<PenaltyConfig> {
    let what = format!("{what}: penalty");
    let map = node.map(&what)?;
    let after = map
        .required("after", &what)
        .and_then(|n| n.number(&format!("{what}.after"), 1..=10_000));
    let block: Option<(usize, Vec<Duration>)> = map.required("block", &what).map(|n| {
        let items = n.list();
        let durations = items
            .iter()
            .filter_map(|d| read_duration(*d, &format!("{what}.block")))
            .collect();
        (items.len(), durations)
    });
    let within = map
        .get("within")
        .and_then(|n| read_duration(n, &format!("{what}.within")));
    let decay = map
        .get("decay")
        .and_then(|n| read_duration(n, &format!("{what}.decay")));
    map.deny_unknown(&what, &["after", "block", "within", "decay"]);
    let (written, block) = block?;
    if block.is_empty() {
        if written == 0 {
            map.error(format!(
                "{what}.block: expected at least one duration, such as [1m, 10m, 1h]"
            ));
        }
        return None;
    }
    Some(PenaltyConfig {
        after: after?,
        block,
        within,
        decay,
    })
}

pub(super) fn read_concurrency(node: Node<'_, '_>, what: &str) -> Option<ConcurrencyConfig> {
    let what = format!("{what}: concurrency");
    if !node.is_mapping() {
        let max = node.number(&what, 1..=1_000_000)?;
        return Some(ConcurrencyConfig {
            max,
            lease: Duration::from_secs(60),
        });
    }
    let map = node.map(&what)?;
    let max = map
        .required("max", &what)
        .and_then(|n| n.number(&format!("{what}.max"), 1..=1_000_000));
    let lease = map
        .get("lease")
        .and_then(|n| read_duration(n, &format!("{what}.lease")));
    map.deny_unknown(&what, &["max", "lease"]);
    Some(ConcurrencyConfig {
        max: max?,
        lease: lease.unwrap_or(Duration::from_secs(60)),
    })
}
