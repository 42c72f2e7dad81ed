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

/// Splits `total` units in proportion to `weights`, none above its cap: what a capped part
/// cannot take goes to the others, and the units rounding leaves go one each to the heaviest.
/// The parts add up to `min(total, sum of caps)`. Zero weights weigh alike.
pub(crate) fn split(total: u64, weights: &[f64], caps: &[u64]) -> Vec<u64> {
    let weight = |index: usize| {
        let weight = weights.get(index).copied().unwrap_or(0.0);
        if weight.is_finite() && weight > 0.0 {
            weight
        } else {
            f64::MIN_POSITIVE
        }
    };
    let mut parts = vec![0u64; caps.len()];
    let mut left = total.min(caps.iter().fold(0u64, |sum, cap| sum.saturating_add(*cap)));
    let mut open: Vec<usize> = (0..caps.len()).filter(|&i| caps[i] > 0).collect();
    while left > 0 && !open.is_empty() {
        let sum: f64 = open.iter().map(|&i| weight(i)).sum();
        let mut given = 0;
        for &i in &open {
            let part = ((left as f64) * (weight(i) / sum)).floor() as u64;
            let part = part.min(caps[i] - parts[i]).min(left - given);
            parts[i] += part;
            given += part;
        }
        if given == 0 {
            open.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)).then(a.cmp(&b)));
            for &i in &open {
                if given == left {
                    break;
                }
                parts[i] += 1;
                given += 1;
            }
        }
        left -= given;
        open.retain(|&i| parts[i] < caps[i]);
    }
    parts
}

/// Splits `total` max-min fairly among parts none above its cap: every part below its cap gets
/// at least as much as any other part does.
pub(crate) fn max_min(total: u64, caps: &[u64]) -> Vec<u64> {
    split(total, &vec![1.0; caps.len()], caps)
}

/// Splits `total` among parts grouped by `clients`, none above its cap: across clients,
/// max-min fairly on their demand (a client's demand, at most its cap, is met as far as an
/// even part allows), then what is left as headroom up to each client's cap, so that a client
/// gains nothing by claiming more than it uses or by opening more streams; within a client, by
/// its parts' demand.
pub(crate) fn by_client<C: Copy + PartialEq>(
    total: u64,
    clients: &[C],
    demands: &[f64],
    caps: &[u64],
) -> Vec<u64> {
    let mut groups: Vec<(C, Vec<usize>)> = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        match groups.iter_mut().find(|(known, _)| known == client) {
            Some((_, members)) => members.push(index),
            None => groups.push((*client, vec![index])),
        }
    }
    let cap = |members: &[usize]| {
        members.iter().fold(0u64, |sum, &i| {
            sum.saturating_add(caps.get(i).copied().unwrap_or(0))
        })
    };
    let group_caps: Vec<u64> = groups.iter().map(|(_, members)| cap(members)).collect();
    let group_demands: Vec<u64> = groups
        .iter()
        .zip(&group_caps)
        .map(|((_, members), cap)| {
            let demand: f64 = members
                .iter()
                .map(|&i| demands.get(i).copied().unwrap_or(0.0).max(0.0))
                .sum();
            (demand.ceil() as u64).min(*cap)
        })
        .collect();
    let first = max_min(total, &group_demands);
    let left = total - first.iter().sum::<u64>();
    let headroom: Vec<u64> = group_caps
        .iter()
        .zip(&first)
        .map(|(cap, given)| cap - given)
        .collect();
    let extra = max_min(left, &headroom);
    let mut parts = vec![0u64; caps.len()];
    for ((_, members), given) in groups.iter().zip(first.iter().zip(&extra)) {
        let member_demands: Vec<f64> = members.iter().map(|&i| demands[i]).collect();
        let member_caps: Vec<u64> = members.iter().map(|&i| caps[i]).collect();
        for (member, part) in
            members
                .iter()
                .zip(split(given.0 + given.1, &member_demands, &member_caps))
        {
            parts[*member] = part;
        }
    }
    parts
}

/// The token bucket Envoy enforces for a share of `share` requests per `period`, whose burst is
/// what the share earns in a second (at least one request): a bucket starts full, and a burst
/// of a second keeps what Envoys can admit at once close to the limit's rate.
///
/// Envoy reads a fill interval in whole seconds (it truncates the rest), so the bucket refills
/// `tokens_per_fill` every whole number of seconds: the period itself when it is whole seconds,
/// else the shortest interval that earns at least one request, rounded down. Either way the
/// rate Envoy enforces is never above the share.
pub(crate) fn token_bucket(share: u64, period: Duration) -> TokenBucket {
    let per_second = share as f64 / period.as_secs_f64();
    let (tokens, seconds) = if period.subsec_nanos() == 0 && share <= u64::from(u32::MAX) {
        (share, period.as_secs())
    } else {
        let seconds = (1.0 / per_second).ceil().max(1.0);
        (
            (per_second * seconds).floor().min(f64::from(u32::MAX)) as u64,
            seconds as u64,
        )
    };
    let burst = per_second.ceil().clamp(1.0, f64::from(u32::MAX));
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
    fn a_split_follows_the_weights_within_the_caps_and_adds_up() {
        assert_eq!(
            split(100, &[1.0, 1.0], &[10, 20]),
            vec![10, 20],
            "all covered"
        );
        assert_eq!(
            split(600, &[10.0, 5.0, 1.0], &[600, 600, 600]),
            vec![376, 187, 37]
        );
        assert_eq!(
            split(600, &[10.0, 5.0, 1.0], &[100, 600, 600]),
            vec![100, 417, 83],
            "what a capped part cannot take goes to the others by weight"
        );
        assert_eq!(split(0, &[1.0, 1.0], &[5, 5]), vec![0, 0]);
        assert_eq!(split(3, &[0.0, 0.0, 0.0], &[5, 5, 5]), vec![1, 1, 1]);
        let parts = split(10, &[1.0, 1000.0, 1000.0], &[1, 1000, 1000]);
        assert_eq!(parts.iter().sum::<u64>(), 10);
        assert!(parts.iter().zip([1, 1000, 1000]).all(|(p, cap)| *p <= cap));
    }

    #[test]
    fn clients_split_max_min_on_demand_then_headroom_and_gain_nothing_from_streams() {
        // One client's 20 streams claiming the whole limit against another's honest 5 of 10:
        // the honest client gets its 5.
        let mut clients = vec![1; 20];
        clients.push(2);
        let mut demands = vec![10.0; 20];
        demands.push(5.0);
        let mut caps = vec![10; 20];
        caps.push(7);
        let parts = by_client(10, &clients, &demands, &caps);
        assert_eq!(parts[20], 5);
        assert_eq!(parts[..20].iter().sum::<u64>(), 5);
        // Demand under the limit is met, and the rest is headroom up to the wants.
        assert_eq!(
            by_client(10, &[1, 2, 3], &[6.0, 3.0, 1.0], &[8, 4, 2]),
            vec![6, 3, 1]
        );
        assert_eq!(
            by_client(10, &[1, 2], &[2.0, 3.0], &[3, 5]),
            vec![3, 5],
            "headroom to the wants"
        );
        // Over the limit: the small demand is met, the large ones share the rest evenly.
        assert_eq!(
            by_client(10, &[1, 2, 3], &[10.0, 5.0, 1.0], &[10, 7, 2]),
            vec![5, 4, 1]
        );
    }

    #[test]
    fn the_bucket_refills_at_the_share_and_never_faster() {
        let minute = Duration::from_secs(60);
        let bucket = token_bucket(300, minute);
        assert_eq!(bucket.tokens_per_fill, Some(300));
        assert_eq!(bucket.fill_interval.map(|d| d.seconds), Some(60));
        assert_eq!(bucket.max_tokens, 5, "a second at five a second");
        let small = token_bucket(1, minute);
        assert_eq!(small.max_tokens, 1);
        // A period Envoy cannot express: 3 per 1.5 s is 2 a second.
        let odd = token_bucket(3, Duration::from_millis(1_500));
        assert_eq!(
            (odd.tokens_per_fill, odd.fill_interval.map(|d| d.seconds)),
            (Some(2), Some(1))
        );
        // 1 per 1.5 s: 1 every 2 s, under the share.
        let slow = token_bucket(1, Duration::from_millis(1_500));
        assert_eq!(
            (slow.tokens_per_fill, slow.fill_interval.map(|d| d.seconds)),
            (Some(1), Some(2))
        );
    }
}
