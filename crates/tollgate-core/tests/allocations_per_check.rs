//! Allocations per check on the memory store's single-limit path, counted by a global
//! allocator: none, once the key's state exists, for every algorithm. An allocation per check is
//! the first cost a hot path pays twice (allocating, then freeing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_core::{Algorithm, Check, Limit, MemoryStore};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: defers to the system allocator and only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout, passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_single_limit_check_on_a_known_key_allocates_nothing() {
    for algorithm in Algorithm::ALL {
        let limit = Limit::new("per-user", algorithm, "10000/10ms".parse().unwrap()).unwrap();
        let store = MemoryStore::new();
        let key = String::from("user:42");
        let mut now = 1_700_000_000_000_000;
        // The first check makes the key's state; a sliding log's entries grow to their steady
        // size within a window.
        for _ in 0..20_000 {
            now += 1;
            store
                .decide(&Check::one(key.as_str(), &limit), now)
                .unwrap();
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..1_000 {
            now += 1;
            let verdict = store
                .decide(&Check::one(key.as_str(), &limit), now)
                .unwrap();
            std::hint::black_box(verdict);
        }
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocations, 0,
            "{algorithm}: {allocations} allocations in 1 000 checks"
        );
    }
}
