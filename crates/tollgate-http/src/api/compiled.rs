//! Inline limits as built, by spec and name: building one formats its name and state name and
//! digests the latter, which costs more than the rest of a check on the memory store.
//!
//! Two levels. Each thread remembers the few limits it used last and finds them by comparing
//! fields, without a lock or a hash (clients send a handful of shapes, over and over); behind
//! it, one map shared by the threads, bounded, keeps every shape built so far.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use tollgate::{Limit, LimitSpec};

use super::problem::ApiError;

/// The most compiled inline limits kept in the shared map; past it, the map starts afresh.
const MAX_COMPILED: usize = 4_096;
/// Names longer than this are built every time, so neither level holds long text.
const MAX_CACHED_TEXT: usize = 128;
/// The limits each thread remembers.
const RECENT: usize = 8;

/// An inline limit's spec and name: what its built form depends on.
type CompiledKey = (LimitSpec, Option<String>);

/// Inline limits as built, by spec and name (bounded: see [`MAX_COMPILED`]).
static COMPILED: LazyLock<Mutex<HashMap<CompiledKey, Limit>>> = LazyLock::new(Default::default);

/// The limits one thread used last, replaced in turn.
#[derive(Default)]
struct Recent {
    entries: Vec<(CompiledKey, Limit)>,
    next: usize,
}

impl Recent {
    fn find(&self, spec: &LimitSpec, name: Option<&str>) -> Option<Limit> {
        self.entries
            .iter()
            .find(|((known, known_name), _)| known == spec && known_name.as_deref() == name)
            .map(|(_, limit)| limit.clone())
    }

    fn remember(&mut self, key: CompiledKey, limit: Limit) {
        if self.entries.len() < RECENT {
            self.entries.push((key, limit));
        } else {
            self.entries[self.next] = (key, limit);
            self.next = (self.next + 1) % RECENT;
        }
    }
}

thread_local! {
    static RECENT_LIMITS: RefCell<Recent> = RefCell::default();
}

/// The limit `spec` names `name`, built by `build` only when neither level holds it.
pub(super) fn compiled(
    spec: LimitSpec,
    name: Option<&String>,
    build: impl FnOnce(&LimitSpec) -> Result<Limit, ApiError>,
) -> Result<Limit, ApiError> {
    if name.is_some_and(|name| name.len() > MAX_CACHED_TEXT) {
        return build(&spec);
    }
    let name_text = name.map(String::as_str);
    if let Some(limit) = RECENT_LIMITS.with_borrow(|recent| recent.find(&spec, name_text)) {
        return Ok(limit);
    }
    let key = (spec, name.cloned());
    let limit = shared(&key, build)?;
    RECENT_LIMITS.with_borrow_mut(|recent| recent.remember(key, limit.clone()));
    Ok(limit)
}

/// The limit of `key` from the map the threads share, built and added when missing.
fn shared(
    key: &CompiledKey,
    build: impl FnOnce(&LimitSpec) -> Result<Limit, ApiError>,
) -> Result<Limit, ApiError> {
    let compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(limit) = compiled.get(key) {
        return Ok(limit.clone());
    }
    drop(compiled);
    let limit = build(&key.0)?;
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if compiled.len() >= MAX_COMPILED {
        compiled.clear();
    }
    compiled.insert(key.clone(), limit.clone());
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use tollgate::{Algorithm, Quota};

    use super::*;

    fn spec(count: u64) -> LimitSpec {
        LimitSpec::new(Algorithm::Gcra, Quota::per_second(count).expect("a quota"))
    }

    fn built(spec: &LimitSpec) -> Result<Limit, ApiError> {
        spec.build("built")
            .map_err(|error| ApiError::invalid(error.to_string()))
    }

    /// A thread remembers only its last few limits; any other is found in the shared map and
    /// never built twice, and a remembered one is never confused with another shape or name.
    #[test]
    fn a_limit_is_built_once_and_found_by_its_spec_and_name() {
        let builds = std::cell::Cell::new(0);
        let counted = |spec: &LimitSpec| {
            builds.set(builds.get() + 1);
            built(spec)
        };
        let shapes = 3 * RECENT as u64;
        // Counts far from anything other tests build, so the shared map starts without them.
        let counts = (0..shapes).map(|i| 7_000_001 + i);
        for count in counts.clone() {
            let limit = compiled(spec(count), None, counted).expect("a limit");
            assert_eq!(limit.count(), count);
        }
        assert_eq!(builds.get(), shapes);
        for count in counts {
            assert_eq!(compiled(spec(count), None, counted).unwrap().count(), count);
            let named = compiled(spec(count), Some(&"n".to_owned()), counted).unwrap();
            assert_eq!(named.count(), count);
        }
        assert_eq!(builds.get(), 2 * shapes, "once more for each named shape");
        let other_name = compiled(spec(7_000_001), Some(&"m".to_owned()), counted).unwrap();
        assert_eq!(other_name.count(), 7_000_001);
        assert_eq!(builds.get(), 2 * shapes + 1);
    }

    #[test]
    fn a_long_name_is_built_every_time() {
        let builds = std::cell::Cell::new(0);
        let long = "x".repeat(MAX_CACHED_TEXT + 1);
        for _ in 0..2 {
            compiled(spec(9_000_001), Some(&long), |spec| {
                builds.set(builds.get() + 1);
                built(spec)
            })
            .expect("a limit");
        }
        assert_eq!(builds.get(), 2);
    }
}
