//! Measures the heap bytes the memory store holds per key with a counting allocator, and checks
//! that the store's own estimate (what `stats()` reports) is close to the truth.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use tollgate_core::{Algorithm, Check, Limit, MemoryStore};

struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator and only counts sizes. The one unsafe block of the
// project, in a test, because measuring heap bytes needs a global allocator.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout, passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 100_000;

#[test]
fn bytes_per_key_are_small_and_reported_truthfully() {
    for algorithm in Algorithm::ALL {
        let limit = Limit::new("bytes", algorithm, "100/h".parse().unwrap()).unwrap();
        let keys: Vec<String> = (0..KEYS).map(|n| format!("user:{n}")).collect();
        let store = MemoryStore::new();
        let before = HELD.load(Ordering::Relaxed);
        for key in &keys {
            store
                .decide(&Check::one(key.as_str(), &limit), 1_700_000_000_000_000)
                .unwrap();
        }
        let measured = (HELD.load(Ordering::Relaxed) - before) as usize / KEYS;
        let stats = store.stats();
        assert_eq!(stats.keys, KEYS);
        let reported = stats.bytes_per_key();
        println!("{algorithm}: {measured} bytes per key measured, {reported} reported");
        // A log's state is boxed, with its entries and what it owes beyond them (16 bytes).
        let ceiling = if algorithm == Algorithm::SlidingLog {
            224
        } else {
            160
        };
        assert!(measured <= ceiling, "{algorithm}: {measured} bytes per key");
        assert!(
            reported.abs_diff(measured) * 5 <= measured,
            "{algorithm}: reported {reported}, measured {measured}"
        );
    }
}
