//! Sliding window counter: the current window's count plus the previous window's, weighted by
//! how much of the previous window the sliding window still covers.
//!
//! Two counters per key, close to exact when traffic is spread out. Its error bound: it never
//! admits more than the quota within one aligned window, and never more than twice the quota in
//! any span of one period (a client that fills the end of one window and paces itself through
//! the next can approach that bound; even traffic stays at the quota).
//!
//! The weighting uses IEEE doubles, evaluated in exactly the same order as in the Lua script,
//! so both stores agree to the bit. `fits` is the one predicate; `remaining` and
//! `wait_for` search it, so they can never disagree with it. The searches start from the
//! solved inequality, which is right or one off, and bracket then bisect when it is not, so a
//! check costs a handful of evaluations; the Lua script walks from the same start one step at a
//! time and finds the same answer, the predicate being monotone.
//!
//! A forced charge beyond the quota (debt, up to the limit's `max_debt`) is carried: each
//! window that passes pays off a quota's worth of the current count, and what it paid becomes
//! the previous window's count.

use super::{Transition, window_start};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::limit::Limit;

/// Sliding window counter.
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindow;

/// A sliding window counter's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct State {
    /// Start of the current window.
    pub start: Micros,
    /// Units counted in the window before it.
    pub previous: u64,
    /// Units counted in the current window.
    pub current: u64,
}

/// `n` as a double. Every count and time here is below 2^53 (quotas and periods are capped for
/// Lua's sake), so the conversion is exact; going through `i64` takes one instruction where
/// `u64` takes several.
fn float(n: u64) -> f64 {
    debug_assert!(n < 1 << 53);
    n as i64 as f64
}

/// `x` truncated to a whole number, negatives (and NaN) as 0: a starting guess for a search.
fn whole(x: f64) -> u64 {
    (x as i64).max(0) as u64
}

/// The previous window's count weighted by how much of it the sliding window still covers,
/// `elapsed` into the current window.
fn weighted(limit: &Limit, previous: u64, elapsed: Micros) -> f64 {
    let period = limit.period();
    float(previous) * float(period - elapsed) / float(period)
}

/// The one predicate: whether `current` and `cost` fit beside the `weighted` previous count.
fn fits(limit: &Limit, weighted: f64, current: u64, cost: u64) -> bool {
    weighted + float(current + cost) <= float(limit.count())
}

/// The least `x` in `lo..=hi` at which `holds` is true, for a `holds` that is monotone over the
/// range (false, then true) and is taken to be true at `hi`. The search starts at `guess`,
/// steps away from it by doubling strides until the answer is bracketed, then bisects: two
/// evaluations when the guess is right or one off, a few dozen at worst.
fn least(lo: u64, hi: u64, guess: u64, holds: impl Fn(u64) -> bool) -> u64 {
    let holds = |x: u64| x >= hi || holds(x);
    let guess = guess.clamp(lo, hi);
    let mut stride: u64 = 1;
    // `holds(above)`, and `!holds(below)` unless the answer is `lo`.
    let (mut below, mut above) = if holds(guess) {
        let mut above = guess;
        loop {
            if above == lo {
                return lo;
            }
            let probe = above.saturating_sub(stride).max(lo);
            if !holds(probe) {
                break (probe, above);
            }
            above = probe;
            stride = stride.saturating_mul(2);
        }
    } else {
        let mut below = guess;
        loop {
            let probe = below.saturating_add(stride).min(hi);
            if holds(probe) {
                break (below, probe);
            }
            below = probe;
            stride = stride.saturating_mul(2);
        }
    };
    while above - below > 1 {
        let middle = below + (above - below) / 2;
        if holds(middle) {
            above = middle;
        } else {
            below = middle;
        }
    }
    above
}

/// The first elapsed time in `from..period` at which [`fits`] holds for `previous` weighted at
/// that time, if any; `weighted_from` is `previous` weighted at `from`. The guess from solving
/// the inequality is corrected by walking the (monotone) predicate itself, so the answer is
/// exactly the predicate's.
#[inline]
fn first_admitting(
    limit: &Limit,
    previous: u64,
    current: u64,
    from: Micros,
    weighted_from: f64,
    cost: u64,
) -> Option<Micros> {
    // The common answer, and the one every search below would reach: it fits already.
    if fits(limit, weighted_from, current, cost) {
        return Some(from);
    }
    let period = limit.period();
    let room = float(limit.count()) - float(current + cost);
    if room < 0.0 || previous == 0 {
        return None;
    }
    let (previous_f, period_f, used_f, count_f) = (
        float(previous),
        float(period),
        float(current + cost),
        float(limit.count()),
    );
    // Exactly `fits(weighted(elapsed))`, with the conversions hoisted out of the search.
    let holds =
        |elapsed: Micros| previous_f * float(period - elapsed) / period_f + used_f <= count_f;
    // The inequality solved for `elapsed`, truncated: the answer or one below it.
    let solved = whole(period_f - room * period_f / previous_f);
    let found = least(from, period, solved, holds);
    (found < period).then_some(found)
}

/// The (previous, current) counts `windows` (at least 1) windows after the state's: each
/// window pays off a quota's worth of the current count, and the last window's payment is its
/// previous count. Without debt, that is the current count as the previous one, then nothing.
fn carried(state: &State, limit: &Limit, windows: u64) -> (u64, u64) {
    if !limit.carries_debt() {
        return (if windows == 1 { state.current } else { 0 }, 0);
    }
    let count = limit.count();
    let paid_before = (windows - 1).saturating_mul(count);
    let previous = state.current.saturating_sub(paid_before).min(count);
    let current = state
        .current
        .saturating_sub(paid_before.saturating_add(count));
    (previous, current)
}

/// When a request of `cost` that does not fit in the current window is admitted: in the first
/// later window whose carried count leaves room for it, or the one after, or the one after
/// that (where nothing is left of the state's counts).
#[cold]
fn after_this_window(state: &State, limit: &Limit, cost: u64) -> Micros {
    let period = limit.period();
    let count = limit.count();
    let first = if limit.carries_debt() {
        (state.current + cost)
            .saturating_sub(count)
            .div_ceil(count)
            .max(1)
    } else {
        1
    };
    for windows in first..first + 2 {
        let (previous, current) = carried(state, limit, windows);
        let weighted = weighted(limit, previous, 0);
        if let Some(found) = first_admitting(limit, previous, current, 0, weighted, cost) {
            return state.start + windows * period + found;
        }
    }
    state.start + (first + 2) * period
}

impl Transition for SlidingWindow {
    type State = State;

    fn fresh(limit: &Limit, now: Micros) -> State {
        State {
            start: window_start(now, limit.period()),
            previous: 0,
            current: 0,
        }
    }

    fn advance(state: &mut State, limit: &Limit, now: Micros) {
        let start = window_start(now, limit.period());
        if start > state.start {
            let (previous, current) = carried(state, limit, (start - state.start) / limit.period());
            *state = State {
                start,
                previous,
                current,
            };
        }
    }

    fn admits(state: &State, limit: &Limit, now: Micros, cost: u64) -> bool {
        let elapsed = now.saturating_sub(state.start);
        cost <= limit.count()
            && fits(
                limit,
                weighted(limit, state.previous, elapsed),
                state.current,
                cost,
            )
    }

    fn consume(state: &mut State, limit: &Limit, _now: Micros, cost: u64) {
        state.current = state
            .current
            .saturating_add(cost)
            .min(limit.count() + limit.max_debt());
    }

    fn refund(state: &mut State, limit: &Limit, _now: Micros, amount: u64, charged_at: Micros) {
        let window = window_start(charged_at, limit.period());
        if window == state.start {
            state.current = state.current.saturating_sub(amount);
        } else if window + limit.period() == state.start {
            state.previous = state.previous.saturating_sub(amount);
        }
    }

    fn remaining(state: &State, limit: &Limit, now: Micros) -> u64 {
        let weighted = weighted(limit, state.previous, now.saturating_sub(state.start));
        left(state, limit, weighted)
    }

    fn reset_after(state: &State, limit: &Limit, now: Micros) -> Micros {
        let end = if state.current > 0 {
            let owed = if limit.carries_debt() {
                state.current.div_ceil(limit.count())
            } else {
                1
            };
            let windows = owed + 1;
            state.start + windows * limit.period()
        } else if state.previous > 0 {
            state.start + limit.period()
        } else {
            return 0;
        };
        end.saturating_sub(now)
    }

    fn wait_for(state: &State, limit: &Limit, now: Micros, cost: u64) -> Option<Micros> {
        let elapsed = now.saturating_sub(state.start);
        let weighted = weighted(limit, state.previous, elapsed);
        wait(state, limit, now, weighted, cost)
    }

    /// The default composition, with the previous window's weight computed once: the
    /// admission, `remaining` and `retry_after` all read it at the same instant.
    fn step(state: &mut State, limit: &Limit, now: Micros, cost: u64) -> Decision {
        Self::advance(state, limit, now);
        let weighted = weighted(limit, state.previous, now.saturating_sub(state.start));
        let allowed = cost <= limit.count() && fits(limit, weighted, state.current, cost);
        if allowed {
            Self::consume(state, limit, now, cost);
        }
        Decision::new(
            allowed,
            limit.capacity(),
            left(state, limit, weighted),
            Self::reset_after(state, limit, now),
            wait(state, limit, now, weighted, cost),
            0,
        )
    }
}

/// [`Transition::remaining`] with the previous window already `weighted` at now.
#[inline]
fn left(state: &State, limit: &Limit, weighted: f64) -> u64 {
    let count = limit.count();
    let estimate = whole(float(count) - (weighted + float(state.current)));
    let guess = estimate.min(count.saturating_sub(state.current));
    // The most that fits, up to the count; 0 when nothing does.
    least(0, count, guess, |units| {
        !fits(limit, weighted, state.current, units + 1)
    })
}

/// [`Transition::wait_for`] with the previous window already `weighted` at `now`.
#[inline]
fn wait(state: &State, limit: &Limit, now: Micros, weighted: f64, cost: u64) -> Option<Micros> {
    if cost > limit.count() {
        return None;
    }
    let elapsed = now.saturating_sub(state.start);
    let at = match first_admitting(
        limit,
        state.previous,
        state.current,
        elapsed,
        weighted,
        cost,
    ) {
        Some(found) => state.start + found,
        None => after_this_window(state, limit, cost),
    };
    Some(at.saturating_sub(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::testing::Run;

    #[test]
    fn least_finds_what_a_walk_finds_from_any_guess() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let lo = rng.u64(0..1_000);
            let hi = lo + rng.u64(0..1_000);
            let threshold = rng.u64(0..hi + 10);
            let guess = rng.u64(0..hi + 10);
            let expected = (lo..hi).find(|&x| x >= threshold).unwrap_or(hi);
            assert_eq!(
                least(lo, hi, guess, |x| x >= threshold),
                expected,
                "lo {lo} hi {hi} threshold {threshold} guess {guess}"
            );
        }
    }

    /// `remaining` and `first_admitting` as the Lua script computes them: a walk one step at a
    /// time from the solved guess.
    fn walked_remaining(state: &State, limit: &Limit, now: Micros) -> u64 {
        let weighted = weighted(limit, state.previous, now.saturating_sub(state.start));
        let estimate = (limit.count() as f64 - (weighted + state.current as f64)).floor();
        let mut guess = (estimate.max(0.0) as u64).min(limit.count().saturating_sub(state.current));
        while guess > 0 && !fits(limit, weighted, state.current, guess) {
            guess -= 1;
        }
        while guess < limit.count() && fits(limit, weighted, state.current, guess + 1) {
            guess += 1;
        }
        guess
    }

    fn walked_first_admitting(
        limit: &Limit,
        previous: u64,
        current: u64,
        from: Micros,
        cost: u64,
    ) -> Option<Micros> {
        let period = limit.period();
        let room = limit.count() as f64 - (current + cost) as f64;
        if room < 0.0 {
            return None;
        }
        if previous == 0 {
            return Some(from);
        }
        let holds = |elapsed: Micros| {
            previous as f64 * (period - elapsed) as f64 / period as f64 + (current + cost) as f64
                <= limit.count() as f64
        };
        let solved = (period as f64 - room * period as f64 / previous as f64).ceil();
        let mut guess = (solved.max(from as f64) as Micros).min(period);
        while guess > from && holds(guess - 1) {
            guess -= 1;
        }
        while guess < period && !holds(guess) {
            guess += 1;
        }
        (guess < period).then_some(guess)
    }

    #[test]
    fn searches_agree_with_the_lua_walk() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..20_000 {
            let count = rng.u64(1..2_000);
            let period = if rng.bool() {
                rng.u64(1..5_000_000)
            } else {
                rng.u64(1..=crate::MAX_PERIOD_MICROS)
            };
            let quota = crate::Quota::new(count, std::time::Duration::from_micros(period)).unwrap();
            let limit = Limit::new("w", Algorithm::SlidingWindow, quota).unwrap();
            let state = State {
                start: rng.u64(period..4_000_000_000_000_000) / period * period,
                previous: rng.u64(0..=2 * count),
                current: rng.u64(0..=2 * count),
            };
            let now = state.start + rng.u64(0..period);
            let from = now - state.start;
            let cost = rng.u64(0..=count + 1);
            assert_eq!(
                SlidingWindow::remaining(&state, &limit, now),
                walked_remaining(&state, &limit, now),
                "{state:?} {limit} at {now}"
            );
            assert_eq!(
                first_admitting(
                    &limit,
                    state.previous,
                    state.current,
                    from,
                    weighted(&limit, state.previous, from),
                    cost
                ),
                walked_first_admitting(&limit, state.previous, state.current, from, cost),
                "{state:?} {limit} from {from} cost {cost}"
            );
        }
    }

    #[test]
    fn debt_is_carried_a_quota_a_window() {
        let limit = crate::testing::limit(Algorithm::SlidingWindow, "10/s");
        let mut state = SlidingWindow::fresh(&limit, 0);
        SlidingWindow::consume(&mut state, &limit, 0, 35);
        assert_eq!(SlidingWindow::reset_after(&state, &limit, 0), 5_000_000);
        SlidingWindow::advance(&mut state, &limit, 3_000_000);
        assert_eq!(
            (state.previous, state.current),
            (10, 5),
            "three windows paid 30"
        );
        // 5 carried and the previous 10 weighted by their overlap: one more fits once the
        // weighted 10 fall to 4, 600 ms into the window.
        assert_eq!(
            SlidingWindow::wait_for(&state, &limit, 3_000_000, 1),
            Some(600_000)
        );
        // Six more need the next window, once the 5 carried weigh 4 (200 ms into it).
        assert_eq!(
            SlidingWindow::wait_for(&state, &limit, 3_000_000, 6),
            Some(1_200_000)
        );
        SlidingWindow::advance(&mut state, &limit, 5_000_000);
        assert_eq!((state.previous, state.current), (0, 0));
    }

    #[test]
    fn weights_the_previous_window_by_its_overlap() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(900_000).admits(10).then_denies(1);
        // 25% into the next window, 75% of the previous ten still count: 7.5, so 2 fit.
        run.at(1_250_000).admits(2).then_denies(1);
        // Halfway: 5 of the previous count, 2 current, so 3 more fit.
        run.at(1_500_000).admits(3).then_denies(1);
    }

    #[test]
    fn does_not_admit_the_double_burst_of_a_fixed_window() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(990_000).admits(10);
        run.at(1_000_000).denies(1);
    }

    #[test]
    fn retry_after_is_the_first_instant_that_fits() {
        let mut run = Run::new(Algorithm::SlidingWindow, "10/s", 0);
        run.at(500_000).admits(10);
        let denied = run.at(1_000_000).check(1);
        // previous = 10: weighted(e) = 10 * (1 - e/1s) must fall to 9, at e = 100 ms.
        assert_eq!(denied.retry_after().unwrap().as_micros(), 100_000);
        run.at(1_099_999).denies(1);
        run.at(1_100_000).admits(1);
    }

    #[test]
    fn retry_after_can_reach_into_the_window_after_next() {
        let mut run = Run::new(Algorithm::SlidingWindow, "4/s", 0);
        run.at(0).admits(4);
        let denied = run.check(4);
        // Next window: previous = 4 weighted must reach 0, which only the window after does.
        assert_eq!(denied.retry_after().unwrap().as_micros(), 2_000_000);
    }
}
