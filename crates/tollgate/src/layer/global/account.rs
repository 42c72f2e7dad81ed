//! One (key, limit)'s account with the global store on this node: the units it holds in
//! chunks (each as long as it is valid), its demand, and what the global store last said.

use smallvec::SmallVec;

use tollgate_core::clock::Micros;
use tollgate_core::decision::Decision;

/// How fast demand estimates forget, in seconds: a node's rate is an exponentially decaying
/// average over about this long.
const DEMAND_MEMORY_SECONDS: f64 = 0.5;

/// Units taken from the global store in one answer, spendable until `expires`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chunk {
    /// Tells chunks apart, so that units go back to the chunk they came from.
    id: u64,
    pub(super) units: u64,
    /// This node's clock after which the units may no longer be spent.
    pub(super) expires: Micros,
    /// The global store's time of the lease, for giving units back and refunding checks.
    pub(super) taken_at: Micros,
}

/// Units a check spent, as the parts of the chunks they came from, to put back if the check
/// is denied after all.
pub(super) type Spent = SmallVec<[Chunk; 2]>;

/// What the global store last answered for this account, and when (this node's clock) the
/// answer arrived.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    pub(super) decision: Decision,
    pub(super) received: Micros,
}

/// The units this node wants: an exponentially decaying rate of the units its checks asked
/// for (admitted or not), in units per second. A decaying average starts from nothing and
/// takes its memory to catch up, which would size a busy key's first leases far too small;
/// so while it is young, the plain average since the first check counts when it is higher.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Demand {
    rate: f64,
    at: Micros,
    /// When the first units were asked for, and how many since (while young).
    first: Option<Micros>,
    total: u64,
}

/// The shortest time a plain average is taken over, so that a first check alone does not
/// read as a flood.
const SHORTEST_AVERAGE_SECONDS: f64 = 0.05;

impl Demand {
    fn decayed(&self, now: Micros) -> f64 {
        let seconds = now.saturating_sub(self.at) as f64 / 1e6;
        self.rate * (-seconds / DEMAND_MEMORY_SECONDS).exp()
    }

    /// Seconds since the first units, while that is within the average's memory.
    fn young(&self, now: Micros) -> Option<f64> {
        let seconds = now.saturating_sub(self.first?) as f64 / 1e6;
        (seconds < DEMAND_MEMORY_SECONDS).then_some(seconds)
    }

    /// Counts `units` asked for at `now`.
    pub(super) fn observe(&mut self, units: u64, now: Micros) {
        self.rate = self.decayed(now) + units as f64 / DEMAND_MEMORY_SECONDS;
        self.at = self.at.max(now);
        let first = *self.first.get_or_insert(now);
        if self.young(now).is_some() {
            self.total = self.total.saturating_add(units);
        } else if first != now {
            self.total = 0;
        }
    }

    /// Units per second asked for lately.
    pub(super) fn rate(&self, now: Micros) -> f64 {
        let decayed = self.decayed(now);
        match self.young(now) {
            Some(seconds) => decayed.max(self.total as f64 / seconds.max(SHORTEST_AVERAGE_SECONDS)),
            None => decayed,
        }
    }
}

/// One (key, limit)'s account.
#[derive(Debug, Default)]
pub(super) struct Account {
    chunks: SmallVec<[Chunk; 2]>,
    pub(super) demand: Demand,
    pub(super) seen: Option<Seen>,
    /// Before this time (this node's clock) checks are denied here without asking: the global
    /// store denied, and said when to try again.
    pub(super) denied_until: Option<Micros>,
    /// When (this node's clock) the lease being fetched was asked for, while one is.
    pub(super) fetching: Option<Micros>,
    /// The last fetch failed: the global store could not be reached or did not answer.
    pub(super) unreachable: bool,
    /// When units were last spent or asked for here.
    pub(super) last_used: Micros,
}

impl Account {
    /// Units held and still valid (after [`expire`](Self::expire)).
    pub(super) fn held(&self) -> u64 {
        self.chunks.iter().map(|chunk| chunk.units).sum()
    }

    /// Units held that can still be spent at `at`: what lasts until a lease asked for now
    /// lands.
    pub(super) fn held_at(&self, at: Micros) -> u64 {
        self.chunks
            .iter()
            .filter(|chunk| chunk.expires > at)
            .map(|chunk| chunk.units)
            .sum()
    }

    /// Drops the chunks no longer valid at `now`; returns the units they still held, which
    /// can no longer be spent or given back (stranded).
    pub(super) fn expire(&mut self, now: Micros) -> u64 {
        let mut stranded = 0;
        self.chunks.retain(|chunk| {
            let valid = chunk.expires > now;
            if !valid {
                stranded += chunk.units;
            }
            valid
        });
        stranded
    }

    /// Adds a chunk of `units` spendable until `expires`; `id` is unique among every chunk of
    /// the node (an account forgotten and made again must not take back another's units).
    pub(super) fn add(&mut self, id: u64, units: u64, expires: Micros, taken_at: Micros) {
        if units == 0 {
            return;
        }
        self.insert(Chunk {
            id,
            units,
            expires,
            taken_at,
        });
    }

    /// Keeps the chunks soonest to expire first: those are spent first.
    fn insert(&mut self, chunk: Chunk) {
        let at = self.chunks.partition_point(|c| c.expires <= chunk.expires);
        self.chunks.insert(at, chunk);
    }

    /// Spends `cost` units if held (soonest to expire first), and counts the account as used.
    pub(super) fn spend(&mut self, cost: u64) -> Option<Spent> {
        if self.held() < cost {
            return None;
        }
        let mut spent = Spent::new();
        let mut due = cost;
        for chunk in &mut self.chunks {
            if due == 0 {
                break;
            }
            let taken = due.min(chunk.units);
            if taken > 0 {
                chunk.units -= taken;
                due -= taken;
                spent.push(Chunk {
                    units: taken,
                    ..*chunk
                });
            }
        }
        self.chunks.retain(|chunk| chunk.units > 0);
        Some(spent)
    }

    /// Puts back units a denied check spent, into the chunk they came from while it is valid.
    /// Units of a chunk that expired meanwhile are not resurrected: they are returned, to be
    /// counted as stranded.
    pub(super) fn put_back(&mut self, spent: &Spent, now: Micros) -> u64 {
        let mut lost = 0;
        for part in spent {
            if part.expires <= now {
                lost += part.units;
                continue;
            }
            match self.chunks.iter_mut().find(|chunk| chunk.id == part.id) {
                Some(chunk) => chunk.units += part.units,
                None => self.insert(*part),
            }
        }
        lost
    }

    /// Takes every chunk out, to give its units back to the global store.
    pub(super) fn drain(&mut self) -> SmallVec<[Chunk; 2]> {
        std::mem::take(&mut self.chunks)
    }

    /// The answer for a check admitted from held units: the global store's last answer,
    /// brought forward, with what this node still holds counted as remaining.
    pub(super) fn admitted(&self, now: Micros) -> Decision {
        let (limit, remaining, reset_after) = self.seen.map_or((0, 0, 0), |seen| {
            let aged = seen.decision.aged(now.saturating_sub(seen.received));
            (aged.limit(), aged.remaining(), aged.reset_after_micros())
        });
        Decision::new(
            true,
            limit,
            remaining.saturating_add(self.held()),
            reset_after,
            Some(0),
            0,
        )
    }

    /// The answer for a check denied here while the global store's denial lasts: that
    /// denial, brought forward, retrying when it ends (or `refresh` from now, when the
    /// denial has ended and a new lease is on its way).
    pub(super) fn denied(&self, now: Micros, refresh: Micros) -> Decision {
        let until = self.denied_until.unwrap_or(now);
        let retry = until.saturating_sub(now).max(refresh).max(1);
        let (limit, reset_after) = self.seen.map_or((0, retry), |seen| {
            let aged = seen.decision.aged(now.saturating_sub(seen.received));
            (aged.limit(), aged.reset_after_micros())
        });
        Decision::new(false, limit, 0, reset_after.max(retry), Some(retry), 0)
    }
}

/// What decides the size of the next lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizing {
    /// Units the check that asks needs itself (0 for a lease fetched in the background).
    pub(super) cost: u64,
    /// This node's demand, in units per second.
    pub(super) rate: f64,
    /// How long a lease should last at that rate, in microseconds.
    pub(super) span: Micros,
    /// The most one lease may take: a share of the limit's capacity.
    pub(super) most: u64,
    /// What the global store said was left, when that is recent.
    pub(super) remaining: Option<u64>,
    /// Time left in the limit's window, for a fixed window: units leased beyond what the
    /// node will spend before the window ends would be stranded.
    pub(super) window_left: Option<Micros>,
}

/// Near the end of the quota, a lease takes at most this fraction of what is left, so that
/// the last units go to the nodes that use them rather than to the first to ask.
const END_SHARE: u64 = 4;

impl Sizing {
    /// Enough units for `span` of this node's demand, within the share of the capacity, a
    /// quarter of what is left and what the window still allows; never less than the cost
    /// and, for a lease fetched ahead, one unit.
    pub(super) fn units(&self) -> u64 {
        let over = |micros: Micros| (self.rate * micros as f64 / 1e6).ceil() as u64;
        let mut units = over(self.span).min(self.most);
        if let Some(remaining) = self.remaining {
            units = units.min(remaining / END_SHARE);
        }
        if let Some(left) = self.window_left {
            units = units.min(over(left));
        }
        units.max(self.cost).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizing() -> Sizing {
        Sizing {
            cost: 1,
            rate: 1000.0,
            span: 200_000,
            most: 1000,
            remaining: None,
            window_left: None,
        }
    }

    #[test]
    fn a_lease_lasts_the_span_at_the_nodes_rate() {
        assert_eq!(sizing().units(), 200);
        let quiet = Sizing {
            rate: 0.0,
            ..sizing()
        };
        assert_eq!(quiet.units(), 1, "a node without demand takes what it asks");
        let costly = Sizing {
            rate: 0.0,
            cost: 7,
            ..sizing()
        };
        assert_eq!(costly.units(), 7);
    }

    #[test]
    fn leases_shrink_near_the_end_of_the_quota_and_of_the_window() {
        let capped = Sizing {
            most: 50,
            ..sizing()
        };
        assert_eq!(capped.units(), 50, "at most a share of the capacity");
        let ending = Sizing {
            remaining: Some(100),
            ..sizing()
        };
        assert_eq!(ending.units(), 25, "a quarter of what is left");
        let closing = Sizing {
            window_left: Some(30_000),
            ..sizing()
        };
        assert_eq!(
            closing.units(),
            30,
            "what the node spends before the window ends"
        );
        let exhausted = Sizing {
            remaining: Some(2),
            cost: 3,
            ..sizing()
        };
        assert_eq!(exhausted.units(), 3, "never less than the check's own cost");
    }

    #[test]
    fn a_busy_keys_demand_is_known_within_its_first_round_trip() {
        let mut demand = Demand::default();
        for ms in 0..40u64 {
            for _ in 0..2 {
                demand.observe(1, ms * 1000);
            }
        }
        // 2 000 a second, seen for 40 ms: the plain average (over at least 50 ms) knows.
        let rate = demand.rate(40_000);
        assert!(rate > 1500.0, "{rate}");
        let mut once = Demand::default();
        once.observe(1, 0);
        assert!(once.rate(0) <= 20.0, "one check is not a flood");
    }

    #[test]
    fn demand_follows_the_rate_and_forgets() {
        let mut demand = Demand::default();
        for ms in 0..2000u64 {
            demand.observe(1, ms * 1000);
        }
        let rate = demand.rate(2_000_000);
        assert!((rate - 1000.0).abs() < 30.0, "{rate}");
        let later = demand.rate(4_000_000);
        assert!(later < 20.0, "{later}");
    }

    #[test]
    fn units_are_spent_soonest_expiring_first_and_put_back_where_they_came_from() {
        let mut account = Account::default();
        account.add(1, 3, 2_000, 10);
        account.add(2, 5, 1_000, 20);
        assert_eq!(account.held(), 8);
        assert_eq!(account.held_at(1_500), 3, "only what outlasts 1 500");
        let spent = account.spend(6).expect("8 held");
        assert_eq!(account.held(), 2);
        assert!(account.spend(3).is_none(), "only 2 left");
        // The chunk expiring at 1 000 is gone by 1 500: its units cannot come back.
        assert_eq!(account.expire(1_500), 0);
        assert_eq!(account.put_back(&spent, 1_500), 5);
        assert_eq!(account.held(), 3);
        assert_eq!(account.expire(2_000), 3, "what expires unspent is stranded");
        assert_eq!(account.held(), 0);
    }
}
