//! What the scripts take and give back: limits, batches of checks, adjustments and decisions.

use std::collections::HashMap;

use tollgate_core::algorithm::{Adjustment, Algorithm, LeakyMode};
use tollgate_core::calendar::Boundaries;
use tollgate_core::clock::{Clock, Micros, SystemClock};
use tollgate_core::decision::Decision;
use tollgate_core::limit::Limit;

/// Numbers per decision in a check reply.
const DECISION_WIDTH: usize = 6;

/// Bytes per number in a check reply (a big-endian `i64`).
const NUMBER_BYTES: usize = 8;

/// One item of a part: which key of the part, under which limit, at what cost.
#[derive(Debug, Clone)]
pub(crate) struct PartItem {
    pub(crate) key: usize,
    pub(crate) limit: Limit,
    pub(crate) cost: u64,
}

/// A check, or the piece of it bound for one cluster slot: decided all-or-nothing by one
/// script call, possibly together with other parts.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) keys: Vec<String>,
    pub(crate) items: Vec<PartItem>,
}

/// A limit as the scripts read it: seven numbers, and for a calendar window the period starts
/// around the caller's time, of which the script picks the one that holds its own (the
/// Redis server's clock), as the memory store picks by its clock.
#[derive(PartialEq)]
struct LimitParameters {
    numbers: [i64; 7],
    boundaries: Option<Boundaries>,
}

/// A limit's seven script parameters: alg (7 for a fixed window with a calendar), count,
/// period, capacity, interval, delay_after, debt (as `-1 - debt` for a window that forgets its
/// debt when it ends), and a calendar's period starts around `now` (the call's time; with
/// none given, this process's clock). Every number is far below 2^53, where Lua's are exact.
fn limit_parameters(limit: &Limit, now: Option<Micros>) -> LimitParameters {
    let boundaries = limit
        .calendar()
        .map(|calendar| calendar.boundaries(now.unwrap_or_else(|| SystemClock::new().now())));
    let code = match limit.algorithm() {
        Algorithm::FixedWindow if boundaries.is_some() => 7,
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingLog => 2,
        Algorithm::SlidingWindow => 3,
        Algorithm::TokenBucket => 4,
        Algorithm::LeakyBucket => 5,
        Algorithm::Gcra => 6,
    };
    let delay_after = match limit.mode() {
        LeakyMode::Meter => 0,
        LeakyMode::Queue { delay_after } => delay_after,
    };
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let debt = signed(limit.max_debt());
    let numbers = [
        code,
        signed(limit.count()),
        signed(limit.period()),
        signed(limit.capacity()),
        signed(limit.interval()),
        signed(delay_after),
        if limit.carries_debt() {
            debt
        } else {
            -1 - debt
        },
    ];
    LimitParameters {
        numbers,
        boundaries,
    }
}

/// The numbers a script reads, as it reads them: one JSON array (the scripts' `take`), its
/// closing bracket added by [`Tables::finish`].
struct Numbers(String);

impl Default for Numbers {
    fn default() -> Self {
        Self(String::with_capacity(64))
    }
}

impl Numbers {
    /// Appends `,value`; by `itoa`, as a call writes a dozen numbers or more (through
    /// `write!` they cost about 2 000 instructions a one-check call).
    fn push(&mut self, value: u64) {
        self.0.push(',');
        self.0.push_str(itoa::Buffer::new().format(value));
    }

    fn extend_signed(&mut self, values: impl IntoIterator<Item = i64>) {
        for value in values {
            self.0.push(',');
            self.0.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn extend(&mut self, values: impl IntoIterator<Item = u64>) {
        for value in values {
            self.push(value);
        }
    }
}

/// What one script call sends: KEYS (each distinct key once, so that checks of one call
/// touching the same key share its state inside the script) and the distinct limits, each
/// with a 1-based Lua index.
#[derive(Default)]
struct Tables<'p> {
    /// Borrowed from the parts, which outlive the call.
    keys: Vec<&'p str>,
    key_index: HashMap<&'p str, usize>,
    limits: Vec<LimitParameters>,
    /// The call's time, if given, for calendar windows.
    now: Option<Micros>,
}

impl<'p> Tables<'p> {
    /// The 1-based Lua index of `key`.
    fn key(&mut self, key: &'p str) -> u64 {
        let next = self.keys.len();
        let index = *self.key_index.entry(key).or_insert_with(|| {
            self.keys.push(key);
            next
        });
        index as u64 + 1
    }

    /// The 1-based Lua index of `limit`'s parameters.
    fn limit(&mut self, limit: &Limit) -> u64 {
        let parameters = limit_parameters(limit, self.now);
        let index = match self.limits.iter().position(|known| *known == parameters) {
            Some(index) => index,
            None => {
                self.limits.push(parameters);
                self.limits.len() - 1
            }
        };
        index as u64 + 1
    }

    /// KEYS and ARGV[2]: the limits, then `rest`.
    fn finish(self, rest: &Numbers) -> (Vec<&'p str>, String) {
        let mut spec = Numbers(String::with_capacity(
            8 + 40 * self.limits.len() + rest.0.len(),
        ));
        spec.push(self.limits.len() as u64);
        for parameters in &self.limits {
            spec.extend_signed(parameters.numbers);
            spec.extend(parameters.boundaries.into_iter().flatten());
        }
        let mut text = spec.0;
        text.replace_range(..1, "[");
        text.push_str(&rest.0);
        text.push(']');
        (self.keys, text)
    }
}

/// A one-item check as the check script reads it in one number where its key index, limit
/// index and cost fit their fields: `-(key * 2^20 + limit * 2^10 + cost)`, negative so that it
/// cannot be an item count. cjson reads a number for about 900 of Redis's instructions, so one
/// in place of four (the count, key, limit and cost) spared a decision 1 900-2 600 of its
/// 44 000-58 000 at 4 to 16 checks a call (`scripts/redis-script-cost --rev REV --batch 4,8,16`).
fn packed_item(key: u64, limit: u64, cost: u64) -> Option<i64> {
    if key < 1 << 16 && limit < 1 << 10 && cost < 1 << 10 {
        i64::try_from(key << 20 | limit << 10 | cost)
            .ok()
            .map(|packed| -packed)
    } else {
        None
    }
}

/// KEYS and ARGV[2] (after the time) of one check-script call for `parts` at `now` (`None`:
/// the server's clock).
pub(crate) fn encode_checks<'p>(
    parts: impl ExactSizeIterator<Item = &'p Part>,
    now: Option<Micros>,
) -> (Vec<&'p str>, String) {
    // Room for a key a part, the usual call, so the key table grows only for larger checks.
    let mut tables = Tables {
        now,
        keys: Vec::with_capacity(parts.len()),
        key_index: HashMap::with_capacity(parts.len()),
        ..Tables::default()
    };
    let mut rest = Numbers::default();
    rest.push(parts.len() as u64);
    for part in parts {
        if let [item] = part.items.as_slice() {
            let key = tables.key(&part.keys[item.key]);
            let limit = tables.limit(&item.limit);
            match packed_item(key, limit, item.cost) {
                Some(packed) => rest.extend_signed([packed]),
                None => rest.extend([1, key, limit, item.cost]),
            }
            continue;
        }
        rest.push(part.items.len() as u64);
        for item in &part.items {
            let key = tables.key(&part.keys[item.key]);
            let limit = tables.limit(&item.limit);
            rest.extend([key, limit, item.cost]);
        }
    }
    tables.finish(&rest)
}

/// KEYS and ARGV[2] (after the time) of one adjust-script call at `now` (`None`: the server's
/// clock).
pub(crate) fn encode_adjustments<'p>(
    part: &'p Part,
    adjustments: &[Adjustment],
    now: Option<Micros>,
) -> (Vec<&'p str>, String) {
    let mut tables = Tables {
        now,
        ..Tables::default()
    };
    let mut rest = Numbers::default();
    rest.push(part.items.len() as u64);
    for (item, adjustment) in part.items.iter().zip(adjustments) {
        let key = tables.key(&part.keys[item.key]);
        let limit = tables.limit(&item.limit);
        rest.extend([key, limit, item.cost]);
        match adjustment {
            Adjustment::Refund { charged_at } => rest.extend([1, *charged_at]),
            Adjustment::Charge => rest.extend([2, 0]),
        }
    }
    tables.finish(&rest)
}

/// Why a script reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected reply from the check script: {0}")]
pub(crate) struct BadReply(pub(crate) String);

/// Splits a check-script reply (one string of big-endian `i64`s: the time, then six numbers a
/// decision) into the call's time and each part's decisions.
pub(crate) fn decode_checks(
    reply: &[u8],
    item_counts: &[usize],
) -> Result<(Micros, Vec<Vec<Decision>>), BadReply> {
    let expected = 1 + DECISION_WIDTH * item_counts.iter().sum::<usize>();
    if reply.len() != expected * NUMBER_BYTES {
        return Err(BadReply(format!(
            "{} bytes, expected {}",
            reply.len(),
            expected * NUMBER_BYTES
        )));
    }
    let reply: Vec<i64> = reply
        .chunks_exact(NUMBER_BYTES)
        .map(|bytes| {
            let mut number = [0; NUMBER_BYTES];
            number.copy_from_slice(bytes);
            i64::from_be_bytes(number)
        })
        .collect();
    let number =
        |value: i64| u64::try_from(value).map_err(|_| BadReply(format!("negative value {value}")));
    let now = number(reply[0])?;
    let mut decisions = reply[1..].chunks_exact(DECISION_WIDTH);
    let mut parts = Vec::with_capacity(item_counts.len());
    for &count in item_counts {
        let mut part = Vec::with_capacity(count);
        for fields in decisions.by_ref().take(count) {
            let retry_after = if fields[4] < 0 {
                None
            } else {
                Some(number(fields[4])?)
            };
            part.push(Decision::new(
                fields[0] == 1,
                number(fields[1])?,
                number(fields[2])?,
                number(fields[3])?,
                retry_after,
                number(fields[5])?,
            ));
        }
        parts.push(part);
    }
    Ok((now, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str) -> Limit {
        Limit::new(name, Algorithm::Gcra, "10/s".parse().unwrap()).unwrap()
    }

    #[test]
    fn parts_of_one_call_share_the_index_of_a_shared_key() {
        let part = |keys: &[&str]| Part {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            items: (0..keys.len())
                .map(|key| PartItem {
                    key,
                    limit: limit("l"),
                    cost: 1,
                })
                .collect(),
        };
        let mut costly = part(&["a"]);
        costly.items[0].cost = 1_024;
        let parts = [part(&["a", "b"]), part(&["b"]), costly];
        let (keys, spec) = encode_checks(parts.iter(), None);
        assert_eq!(keys, ["a", "b"]);
        // One distinct limit (GCRA 10/s: alg, count, period, capacity, interval, delay_after,
        // debt);
        // 3 checks; the first: 2 items (key 1, key 2), each under limit 1 at cost 1; the
        // second: one item on key 2, packed as -(2 * 2^20 + 1 * 2^10 + 1); the third: one item
        // on key 1 whose cost does not fit the packed form, as an item count and its three.
        assert_eq!(
            spec,
            "[1,6,10,1000000,10,100000,0,22517998126,3,2,1,1,1,2,1,1,-2098177,1,1,1,1024]"
        );
    }

    #[test]
    fn an_item_is_packed_only_where_every_field_fits() {
        assert_eq!(packed_item(1, 1, 0), Some(-(1 << 20 | 1 << 10)));
        assert_eq!(
            packed_item((1 << 16) - 1, 1_023, 1_023),
            Some(-((1 << 36) - 1))
        );
        assert_eq!(packed_item(1 << 16, 1, 1), None);
        assert_eq!(packed_item(1, 1 << 10, 1), None);
        assert_eq!(packed_item(1, 1, 1 << 10), None);
    }

    fn packed(numbers: &[i64]) -> Vec<u8> {
        numbers.iter().flat_map(|n| n.to_be_bytes()).collect()
    }

    #[test]
    fn replies_are_checked_before_they_are_trusted() {
        let reply = packed(&[1_000, 1, 10, 9, 100_000, 0, 0, 0, 10, 0, 900_000, -1, 0]);
        let (now, parts) = decode_checks(&reply, &[1, 1]).unwrap();
        assert_eq!(now, 1_000);
        assert!(parts[0][0].allowed());
        assert_eq!(parts[0][0].remaining(), 9);
        assert_eq!(parts[1][0].retry_after(), None);
        assert!(decode_checks(&reply, &[1]).is_err());
        assert!(decode_checks(&reply[..reply.len() - 1], &[1, 1]).is_err());
        assert!(decode_checks(&packed(&[1_000, 1, -10, 9, 0, 0, 0]), &[1]).is_err());
    }
}
