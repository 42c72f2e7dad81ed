//! Invariants every algorithm must keep, over random traces of times and costs.

mod common;

use proptest::prelude::*;
use tollgate_core::algorithm::{self, State};
use tollgate_core::{Adjustment, Algorithm, LeakyMode, Limit, Micros};

/// A random limit of any algorithm, small enough that traces hit its edges often.
fn any_limit() -> impl Strategy<Value = Limit> {
    let period = prop_oneof![
        Just(1_000u64),
        Just(1_000_000),
        Just(7_000_000),
        Just(60_000_000),
        1u64..5_000_000
    ];
    (0usize..6, 1u64..20, period, 1u64..30, 0u64..30).prop_map(
        |(which, count, period, burst, delay)| {
            common::limit_of("p", which, count, period, burst, delay)
        },
    )
}

/// Gaps between requests scaled to the limit: often none, often around one interval.
fn trace(limit: &Limit) -> impl Strategy<Value = Vec<(Micros, u64)>> + use<> {
    let scale = if limit.interval() > 0 {
        limit.interval()
    } else {
        (limit.period() / limit.count().max(1)).max(1)
    };
    let gap = prop_oneof![3 => Just(0u64), 5 => 0..=2 * scale, 1 => 0..=3 * limit.period()];
    let cost = prop_oneof![6 => Just(1u64), 2 => 0..=limit.capacity() + 1];
    prop::collection::vec((gap, cost), 1..150)
}

fn limit_and_trace() -> impl Strategy<Value = (Limit, Vec<(Micros, u64)>)> {
    any_limit().prop_flat_map(|limit| {
        let trace = trace(&limit);
        (Just(limit), trace)
    })
}

/// Replays a trace from a fixed start, checking each decision's own promises on the way, and
/// returns what was admitted as (time, cost, delay).
fn replay(
    limit: &Limit,
    trace: &[(Micros, u64)],
) -> Result<Vec<(Micros, u64, Micros)>, TestCaseError> {
    let mut now: Micros = 1_700_000_000_000_000;
    let mut state: Option<State> = None;
    let mut admitted = Vec::new();
    for &(gap, cost) in trace {
        now += gap;
        let (decision, next) = algorithm::step(state.as_ref(), limit, now, cost);
        prop_assert!(decision.remaining() <= limit.capacity(), "{decision:?}");
        if decision.allowed() {
            state = Some(next);
            admitted.push((now, cost, decision.delay().as_micros() as Micros));
        }
        prop_assert_eq!(
            decision.retry_after().is_none(),
            cost > limit.capacity(),
            "{:?}",
            decision
        );
        if let Some(wait) = decision.retry_after() {
            let wait = wait.as_micros() as Micros;
            // Exact: a request at now + retry_after is admitted, one a microsecond earlier is not.
            let (then, _) = algorithm::step(state.as_ref(), limit, now + wait, cost);
            prop_assert!(
                then.allowed(),
                "cost {cost} at +{wait}us after {decision:?} was denied: {then:?}"
            );
            if wait > 0 {
                let (before, _) = algorithm::step(state.as_ref(), limit, now + wait - 1, cost);
                prop_assert!(
                    !before.allowed(),
                    "cost {cost} at +{}us was already admitted",
                    wait - 1
                );
            }
        }
        // `remaining` is exactly what fits right now.
        let left = algorithm::peek(state.as_ref(), limit, now, 0).remaining();
        prop_assert!(algorithm::peek(state.as_ref(), limit, now, left).allowed() || left == 0);
        if left < limit.capacity() {
            prop_assert!(!algorithm::peek(state.as_ref(), limit, now, left + 1).allowed());
        }
    }
    Ok(admitted)
}

/// The most `limit` may admit in any span `[a, b]` of length `span`.
fn bound(limit: &Limit, span: Micros) -> u64 {
    match limit.algorithm() {
        // Within one period the window algorithms are checked separately.
        Algorithm::FixedWindow | Algorithm::SlidingWindow => 2 * limit.count(),
        Algorithm::SlidingLog => limit.count(),
        Algorithm::Gcra | Algorithm::LeakyBucket => limit.capacity() + span / limit.interval(),
        // Whole-token refill: a span can hold one refill instant more than its length allows.
        Algorithm::TokenBucket => limit.capacity() + span.div_ceil(limit.interval()),
    }
}

/// 768 cases by default; `PROPTEST_CASES` asks for more (or fewer).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(768)
}

/// Asserts that what was admitted (time, cost) respects the quota: the span bound, and for the
/// window algorithms the quota per aligned window.
fn assert_within_quota(limit: &Limit, admitted: &[(Micros, u64)]) -> Result<(), TestCaseError> {
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let mut total = 0;
        for &(at, cost) in &admitted[i..] {
            let span = at - start;
            if !limit.algorithm().is_rate() && span >= limit.period() {
                break;
            }
            total += cost;
            prop_assert!(
                total <= bound(limit, span),
                "{total} admitted in {span}us by {limit}"
            );
        }
    }
    if matches!(
        limit.algorithm(),
        Algorithm::FixedWindow | Algorithm::SlidingWindow
    ) {
        let mut per_window = std::collections::HashMap::<Micros, u64>::new();
        for &(at, cost) in admitted {
            *per_window.entry(at / limit.period()).or_default() += cost;
        }
        for (window, total) in per_window {
            prop_assert!(
                total <= limit.count(),
                "{total} admitted in aligned window {window} by {limit}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn never_admits_more_than_the_quota_allows((limit, trace) in limit_and_trace()) {
        let admitted = replay(&limit, &trace)?;
        let admitted: Vec<(Micros, u64)> = admitted.iter().map(|&(at, cost, _)| (at, cost)).collect();
        assert_within_quota(&limit, &admitted)?;
    }

    /// NGINX's promise, for single requests: after the first `delay_after` of a burst, what
    /// leaves is spaced one interval apart.
    #[test]
    fn a_queue_lets_requests_leave_at_the_steady_rate((limit, trace) in limit_and_trace()) {
        let LeakyMode::Queue { delay_after } = limit.mode() else { return Ok(()) };
        let singles: Vec<(Micros, u64)> = trace.iter().map(|&(gap, cost)| (gap, cost.min(1))).collect();
        let admitted = replay(&limit, &singles)?;
        let mut departures: Vec<(Micros, u64)> = admitted.iter().map(|&(at, cost, delay)| (at + delay, cost)).collect();
        departures.sort_unstable();
        for (i, &(start, _)) in departures.iter().enumerate() {
            let mut total = 0;
            for &(at, cost) in &departures[i..] {
                total += cost;
                let allowed = delay_after + (at - start) / limit.interval();
                prop_assert!(total <= allowed, "{total} left within {}us under {limit}", at - start);
            }
        }
    }

    /// Requests that fail upstream are refunded later, with other traffic in between and in
    /// any order: what stays admitted must still respect the quota, or refunds would be a way
    /// around it.
    #[test]
    fn late_refunds_never_let_more_through(
        (limit, trace) in limit_and_trace(),
        refunds in prop::collection::vec(prop::option::weighted(0.3, any::<prop::sample::Index>()), 150),
    ) {
        let mut now: Micros = 1_700_000_000_000_000;
        let mut state: Option<State> = None;
        // (time, cost, refunded)
        let mut admitted: Vec<(Micros, u64, bool)> = Vec::new();
        for (step, &(gap, cost)) in trace.iter().enumerate() {
            now += gap;
            let open: Vec<usize> = (0..admitted.len()).filter(|&i| !admitted[i].2).collect();
            if let (Some(pick), false) = (refunds[step], open.is_empty()) {
                let entry = &mut admitted[open[pick.index(open.len())]];
                let refund = Adjustment::Refund { charged_at: entry.0 };
                let (next, _) = algorithm::adjust(state.as_ref(), &limit, now, refund, entry.1);
                state = Some(next);
                entry.2 = true;
                continue;
            }
            let (decision, next) = algorithm::step(state.as_ref(), &limit, now, cost);
            if decision.allowed() {
                state = Some(next);
                admitted.push((now, cost, false));
            }
        }
        let kept: Vec<(Micros, u64)> = admitted.iter().filter(|e| !e.2).map(|e| (e.0, e.1)).collect();
        assert_within_quota(&limit, &kept)?;
    }

    #[test]
    fn refund_restores_the_prior_state((limit, trace) in limit_and_trace(), cost in 1u64..10) {
        let mut now: Micros = 1_700_000_000_000_000;
        let mut state: Option<State> = None;
        for (gap, step_cost) in trace {
            now += gap;
            let (decision, next) = algorithm::step(state.as_ref(), &limit, now, cost);
            if decision.allowed() {
                let refund = Adjustment::Refund { charged_at: now };
                let (refunded, _) = algorithm::adjust(Some(&next), &limit, now, refund, cost);
                let (prior, _) = algorithm::adjust(state.as_ref(), &limit, now, refund, 0);
                prop_assert_eq!(refunded, prior);
            }
            let (decision, next) = algorithm::step(state.as_ref(), &limit, now, step_cost);
            if decision.allowed() {
                state = Some(next);
            }
        }
    }

    #[test]
    fn a_forced_charge_is_counted_even_past_the_limit((limit, trace) in limit_and_trace(), extra in 1u64..100) {
        let mut now: Micros = 1_700_000_000_000_000;
        let mut state: Option<State> = None;
        for (gap, cost) in trace {
            now += gap;
            let (decision, next) = algorithm::step(state.as_ref(), &limit, now, cost);
            if decision.allowed() {
                state = Some(next);
            }
        }
        let (charged, _) = algorithm::adjust(state.as_ref(), &limit, now, Adjustment::Charge, extra);
        let before = algorithm::peek(state.as_ref(), &limit, now, 0).remaining();
        let after = algorithm::peek(Some(&charged), &limit, now, 0).remaining();
        prop_assert_eq!(after, before.saturating_sub(extra));
    }
}
