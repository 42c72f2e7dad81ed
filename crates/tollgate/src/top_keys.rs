//! The most frequent keys in a stream, in bounded memory: the space-saving algorithm (Metwally,
//! Agrawal, El Abbadi). It keeps `capacity` counters; a new key takes over the smallest one and
//! inherits its count as its possible overcount. Any key seen more than `total / capacity`
//! times is guaranteed to be held, and each count is at most `error` too high.

use std::collections::HashMap;
use std::sync::Mutex;

/// The longest key kept; longer keys are cut (on a character boundary).
const MAX_KEY_BYTES: usize = 256;

/// One tracked key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TopKey {
    /// The key.
    pub key: String,
    /// How often it was seen (an overestimate by at most `error`).
    pub count: u64,
    /// How much of `count` may belong to keys it replaced.
    pub error: u64,
}

/// A bounded summary of the most frequent keys.
#[derive(Debug)]
pub struct TopKeys {
    capacity: usize,
    counters: Mutex<HashMap<String, (u64, u64)>>,
}

fn cut(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

impl TopKeys {
    /// A summary keeping `capacity` counters.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            counters: Mutex::new(HashMap::with_capacity(capacity.max(1))),
        }
    }

    /// Counts one occurrence of `key`.
    pub fn record(&self, key: &str) {
        let key = cut(key);
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((count, _)) = counters.get_mut(key) {
            *count += 1;
            return;
        }
        if counters.len() < self.capacity {
            counters.insert(key.to_owned(), (1, 0));
            return;
        }
        let smallest = counters
            .iter()
            .min_by_key(|(_, (count, _))| *count)
            .map(|(key, (count, _))| (key.clone(), *count));
        if let Some((evicted, floor)) = smallest {
            counters.remove(&evicted);
            counters.insert(key.to_owned(), (floor + 1, floor));
        }
    }

    /// The `n` most frequent keys, most frequent first.
    pub fn top(&self, n: usize) -> Vec<TopKey> {
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<TopKey> = counters
            .iter()
            .map(|(key, (count, error))| TopKey {
                key: key.clone(),
                count: *count,
                error: *error,
            })
            .collect();
        keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(n);
        keys
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_hitters_are_found_among_many_rare_keys_in_bounded_memory() {
        // 15 500 occurrences over 20 counters: any key seen more than 775 times is held, and a
        // rare key's count (what it inherited) stays below the heavy keys'.
        let top = TopKeys::new(20);
        for round in 0..10_000u32 {
            // Three heavy keys amid a stream of keys seen once each.
            top.record(&format!("rare:{round}"));
            if round % 4 == 0 {
                top.record("ip:203.0.113.7");
            }
            if round % 5 == 0 {
                top.record("user:42");
            }
            if round % 10 == 0 {
                top.record("tenant:acme");
            }
        }
        let found = top.top(3);
        let keys: Vec<&str> = found.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["ip:203.0.113.7", "user:42", "tenant:acme"]);
        for key in &found {
            assert!(key.count >= key.error);
        }
        assert_eq!(top.counters.lock().expect("not poisoned").len(), 20);
        assert!(top.top(100).len() <= 20);
    }

    #[test]
    fn long_keys_are_cut_on_a_character_boundary() {
        let top = TopKeys::new(2);
        let long = "é".repeat(300);
        top.record(&long);
        let kept = &top.top(1)[0].key;
        assert!(kept.len() <= MAX_KEY_BYTES);
        assert!(long.starts_with(kept.as_str()));
    }
}
