//! envoyproxy/ratelimit's plain counters through the limiter (see [`crate::counter`]): the
//! window read from the limiter's clock, the local over-limit cache, upstream's read-first
//! rule, and the store for one-second windows.

use smallvec::SmallVec;

use super::Limiter;
use crate::counter::{Count, CounterAdd, CounterOp, Tally, window_key};
use crate::error::Error;
use crate::store::{Store, StoreError};
use tollgate_core::clock::MICROS_PER_SECOND;

impl<S: Store> Limiter<S> {
    /// Counts a request's hits in plain fixed-window counters under keys that name their
    /// window, as envoyproxy/ratelimit counts them in Redis, so that both can share the
    /// counters: every counter raised by its hits (refused ones too), left to live its window
    /// and the count's jitter, and each answered over its limit once its count passes the
    /// limit. The window comes from the limiter's clock, the node's, as upstream's does (Redis's
    /// clock would name other keys than upstream's nodes name). One tally per counter, in order.
    pub async fn count(&self, count: &Count<'_>) -> Result<Vec<Tally>, Error> {
        count.validate().map_err(StoreError::from)?;
        let now = self.inner.clock.now();
        let at = now / MICROS_PER_SECOND;
        let counters = count.counters();
        let windows: SmallVec<[u64; 4]> = counters.iter().map(|c| c.window).collect();
        let keys: SmallVec<[String; 4]> = counters
            .iter()
            .map(|counter| window_key(&counter.key, counter.window, at))
            .collect();
        let cache = self.cache();
        let cached: SmallVec<[bool; 4]> = keys
            .iter()
            .map(|key| count.uses_local_cache() && cache.counter_over(key, now))
            .collect();
        let current = if count.stops_increment_over_limit() && !cached.contains(&true) {
            let reads: SmallVec<[CounterOp<'_>; 4]> = keys
                .iter()
                .map(|key| CounterOp { key, add: None })
                .collect();
            Some(self.send_counters(&reads, &windows).await?)
        } else {
            None
        };
        let addends = count.addends(&cached, current.as_deref());
        let jitter = count.jitter_seconds();
        let mut raises: SmallVec<[CounterOp<'_>; 4]> = SmallVec::new();
        let mut raised_windows: SmallVec<[u64; 4]> = SmallVec::new();
        for (index, key) in keys.iter().enumerate() {
            if cached[index] {
                continue;
            }
            let extra = if jitter > 0 {
                fastrand::u64(..jitter)
            } else {
                0
            };
            raises.push(CounterOp {
                key,
                add: Some(CounterAdd {
                    hits: addends[index],
                    ttl: windows[index].saturating_add(extra),
                }),
            });
            raised_windows.push(windows[index]);
        }
        let mut counts = self
            .send_counters(&raises, &raised_windows)
            .await?
            .into_iter();
        let tallies = counters
            .iter()
            .zip(&keys)
            .zip(cached)
            .map(|((counter, key), cached)| {
                let value = if cached {
                    0
                } else {
                    counts.next().unwrap_or_default()
                };
                let tally = Tally::new(value, counter.limit, counter.window, at, cached);
                if count.uses_local_cache() && !cached && tally.is_over() {
                    let until = tally.window_end().saturating_mul(MICROS_PER_SECOND);
                    cache.remember_counter(key, until, now);
                }
                tally
            })
            .collect();
        Ok(tallies)
    }

    /// Sends `ops` (of counters of `windows` seconds) through the guards to the store, those of
    /// one-second windows to the per-second store when there is one; the counts, in order.
    async fn send_counters(
        &self,
        ops: &[CounterOp<'_>],
        windows: &[u64],
    ) -> Result<Vec<u64>, StoreError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let per_second = self.inner.per_second.load();
        let Some(per_second) = per_second.as_deref().filter(|_| windows.contains(&1)) else {
            return self.inner.store.counters(ops).await;
        };
        let mut seconds: SmallVec<[CounterOp<'_>; 4]> = SmallVec::new();
        let mut others: SmallVec<[CounterOp<'_>; 4]> = SmallVec::new();
        for (op, &window) in ops.iter().zip(windows) {
            if window == 1 {
                seconds.push(*op);
            } else {
                others.push(*op);
            }
        }
        let others = async {
            if others.is_empty() {
                return Ok(Vec::new());
            }
            self.inner.store.counters(&others).await
        };
        let (seconds, others) =
            futures_util::future::join(per_second.counters(&seconds), others).await;
        let (mut seconds, mut others) = (seconds?.into_iter(), others?.into_iter());
        Ok(windows
            .iter()
            .map(|&window| {
                let counts = if window == 1 {
                    &mut seconds
                } else {
                    &mut others
                };
                counts.next().unwrap_or_default()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use std::sync::Arc;

    use crate::{AnyStore, ManualClock, MemoryStore};

    fn counts(tallies: &[Tally]) -> Vec<u64> {
        tallies.iter().map(Tally::count).collect()
    }

    #[tokio::test]
    async fn windows_come_from_the_limiters_clock_and_seconds_may_go_elsewhere() {
        // The store's own clock stands elsewhere: keys are named by the limiter's.
        let store_clock = ManualClock::new(0);
        let store = MemoryStore::builder()
            .clock(Arc::new(store_clock.clone()))
            .build();
        let clock = ManualClock::new(1_234 * MICROS_PER_SECOND);
        let limiter = Limiter::builder(store)
            .clock(Arc::new(clock.clone()))
            .build();
        let count = Count::new()
            .expiration_jitter(Duration::ZERO)
            .counter("d_k_v_", 1, 5, 2)
            .counter("d_k_v_", 60, 5, 1);
        assert_eq!(counts(&limiter.count(&count).await.unwrap()), [2, 1]);
        let read = |key| CounterOp { key, add: None };
        let stored = limiter
            .store()
            .counters(&[read("d_k_v_1234"), read("d_k_v_1200")])
            .await
            .unwrap();
        assert_eq!(stored, [2, 1]);

        let per_second = MemoryStore::builder()
            .clock(Arc::new(store_clock.clone()))
            .build();
        limiter
            .settings()
            .set_per_second_store(Some(AnyStore::Memory(per_second)));
        assert_eq!(
            counts(&limiter.count(&count).await.unwrap()),
            [2, 2],
            "the second's counter starts afresh in its own store"
        );
        let stored = limiter
            .store()
            .counters(&[read("d_k_v_1234")])
            .await
            .unwrap();
        assert_eq!(stored, [2], "and the main store's is left alone");
    }
}
