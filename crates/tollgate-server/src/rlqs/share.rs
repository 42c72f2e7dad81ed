//! The arithmetic of quota assignments: what an Envoy wants from its reported demand, a server's
//! fair part of a limit, splitting what was granted by demand, and the token bucket an
//! assignment becomes. Shares are counted in requests per the limit's period (a limit of
//! `600/m` has 600 units to share), so that every assignment is a whole part of the limit.

use std::time::Duration;

use super::super::rls::proto::types::TokenBucket;

/// An Envoy is assigned its demand and this much more, so that growing traffic is seen as
/// denials before it is starved, and a share tracks demand within a slot or two.
const HEADROOM: f64 = 1.25;

/// The units an Envoy with `demand` (requests per period) asks for: its demand and headroom,
/// at least one, at most the whole limit.
pub(crate) fn want(demand: f64, quota: u64) -> u64 {
    let wanted = (demand.max(0.0) * HEADROOM).ceil();
    // A float above u64::MAX saturates; the limit caps it anyway.
    (wanted as u64).saturating_add(1).min(quota)
}

/// A server's fair part of `quota` when its Envoys' demand is `own` of `total` reported to the
/// store by every server: in proportion, rounded down so the parts never add up to more.
pub(crate) fn fair(quota: u64, own: u64, total: u64) -> u64 {
    let total = total.max(own).max(1);
    (u128::from(quota) * u128::from(own) / u128::from(total)) as u64
}

/// Splits `total` units over `wants`: everyone their want if the total covers it, else in
/// proportion to the wants (rounded down, the units left over one each to the largest wants),
/// never more than a want. The parts add up to `min(total, sum of wants)`.
pub(crate) fn split(total: u64, wants: &[u64]) -> Vec<u64> {
    let sum: u128 = wants.iter().map(|&want| u128::from(want)).sum();
    if sum <= u128::from(total) {
        return wants.to_vec();
    }
    let mut parts: Vec<u64> = wants
        .iter()
        .map(|&want| (u128::from(total) * u128::from(want) / sum) as u64)
        .collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by(|&a, &b| wants[b].cmp(&wants[a]).then(a.cmp(&b)));
    for index in order.into_iter().cycle().take(wants.len() * 2) {
        if left == 0 {
            break;
        }
        if parts[index] < wants[index] {
            parts[index] += 1;
            left -= 1;
        }
    }
    parts
}

/// The token bucket Envoy enforces for a share of `share` requests per `period`, whose burst is
/// what the share earns in `slot` (at least one request).
///
/// Envoy reads a fill interval in whole seconds (it truncates the rest), so the bucket refills
/// `tokens_per_fill` every whole number of seconds: the period itself when it is whole seconds,
/// else the shortest interval that earns at least one request, rounded down. Either way the
/// rate Envoy enforces is never above the share.
pub(crate) fn token_bucket(share: u64, period: Duration, slot: Duration) -> TokenBucket {
    let per_second = share as f64 / period.as_secs_f64();
    let (tokens, seconds) = if period.subsec_nanos() == 0 && share <= u64::from(u32::MAX) {
        (share, period.as_secs())
    } else {
        let seconds = (1.0 / per_second).ceil().max(1.0);
        ((per_second * seconds).floor().min(f64::from(u32::MAX)) as u64, seconds as u64)
    };
    let burst = (per_second * slot.as_secs_f64()).ceil().clamp(1.0, f64::from(u32::MAX));
    TokenBucket {
        max_tokens: burst as u32,
        tokens_per_fill: Some(tokens.clamp(1, u64::from(u32::MAX)) as u32),
        fill_interval: Some(prost_types::Duration {
            seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envoy_wants_its_demand_and_headroom_within_the_limit() {
        assert_eq!(want(0.0, 600), 1, "an idle subscriber keeps one unit");
        assert_eq!(want(100.0, 600), 126);
        assert_eq!(want(1_000.0, 600), 600);
        assert_eq!(want(f64::INFINITY, 600), 600);
    }

    #[test]
    fn fair_parts_never_add_up_to_more_than_the_quota() {
        assert_eq!(fair(600, 10, 30), 200);
        assert_eq!(fair(600, 10, 0), 600, "alone, the whole limit");
        let parts: u64 = [1, 1, 1].iter().map(|&own| fair(100, own, 3)).sum();
        assert!(parts <= 100);
    }

    #[test]
    fn a_split_is_by_want_and_adds_up() {
        assert_eq!(split(100, &[10, 20]), vec![10, 20], "all covered");
        assert_eq!(split(90, &[60, 30, 30]), vec![46, 22, 22]);
        assert_eq!(split(0, &[5, 5]), vec![0, 0]);
        let parts = split(10, &[1, 1000, 1000]);
        assert_eq!(parts.iter().sum::<u64>(), 10);
        assert!(parts.iter().zip([1, 1000, 1000]).all(|(p, w)| *p <= w));
    }

    #[test]
    fn the_bucket_refills_at_the_share_and_never_faster() {
        let minute = Duration::from_secs(60);
        let slot = Duration::from_secs(2);
        let bucket = token_bucket(300, minute, slot);
        assert_eq!(bucket.tokens_per_fill, Some(300));
        assert_eq!(bucket.fill_interval.map(|d| d.seconds), Some(60));
        assert_eq!(bucket.max_tokens, 10, "two seconds at five a second");
        let small = token_bucket(1, minute, slot);
        assert_eq!(small.max_tokens, 1);
        // A period Envoy cannot express: 3 per 1.5 s is 2 a second.
        let odd = token_bucket(3, Duration::from_millis(1_500), slot);
        assert_eq!(
            (odd.tokens_per_fill, odd.fill_interval.map(|d| d.seconds)),
            (Some(2), Some(1))
        );
        // 1 per 1.5 s: 1 every 2 s, under the share.
        let slow = token_bucket(1, Duration::from_millis(1_500), slot);
        assert_eq!(
            (slow.tokens_per_fill, slow.fill_interval.map(|d| d.seconds)),
            (Some(1), Some(2))
        );
    }
}
