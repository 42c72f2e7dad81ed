//! The server's global allocator: mimalloc, asked for alignment only when a layout needs more
//! than any block of its size already has.
//!
//! A server answers with many small, short-lived allocations (request heads, JSON bodies,
//! header values), which mimalloc serves from per-thread free lists. The `mimalloc` crate
//! passes every layout to `mi_malloc_aligned`, whose fast path takes only a free block that
//! happens to sit at the alignment; when the page's free list is empty, or the block is over
//! 1 KiB and not a power of two, it over-allocates and hands out an interior pointer. That was
//! a quarter of a check's allocations. Like the standard library's `System`, this asks for
//! plain `mi_malloc` whenever its guarantee covers the layout: every mimalloc block is aligned
//! to 16 bytes, or to its size when smaller, which is what C's `malloc` must give.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};

/// The alignment `mi_malloc` guarantees for blocks of at least this size (`MI_MAX_ALIGN_SIZE`
/// on 64-bit targets, and `max_align_t` on the targets the server builds for).
const PLAIN_ALIGN: usize = 16;

/// mimalloc behind `GlobalAlloc`.
#[derive(Debug)]
pub struct Allocator;

/// Whether `mi_malloc(size)` is aligned enough for `align`.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every pointer comes from mimalloc and goes back to it; a layout mimalloc's plain
// allocation does not align is allocated with its alignment.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions take any size and a power-of-two alignment.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` was allocated by mimalloc (above), aligned or not; `mi_free` takes both.
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by mimalloc; a block it moves to keeps the alignment the
        // layout needs (plain blocks of `new_size` have it, as for `alloc`).
        unsafe {
            if plain(layout.align(), new_size) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size class up to a few pages, at every alignment up to a page: the pointer is
    /// aligned, writable over its whole size, keeps its contents when it grows, and is freed.
    #[test]
    fn every_layout_is_aligned_and_keeps_its_contents_when_it_grows() {
        let sizes = (1..=256)
            .chain((257..=20_000).step_by(37))
            .chain([65_536, 1 << 20]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: the layout has a non-zero size; the pointer is used within it and freed once.
                unsafe {
                    for zeroed in [false, true] {
                        let ptr = if zeroed {
                            Allocator.alloc_zeroed(layout)
                        } else {
                            Allocator.alloc(layout)
                        };
                        assert!(!ptr.is_null(), "{layout:?}");
                        assert_eq!(ptr as usize % align, 0, "{layout:?}");
                        if zeroed {
                            assert!(
                                std::slice::from_raw_parts(ptr, size)
                                    .iter()
                                    .all(|&b| b == 0)
                            );
                        }
                        std::ptr::write_bytes(ptr, 0xa5, size);
                        let grown = Allocator.realloc(ptr, layout, size * 3);
                        assert_eq!(grown as usize % align, 0, "{layout:?} grown");
                        assert!(
                            std::slice::from_raw_parts(grown, size)
                                .iter()
                                .all(|&b| b == 0xa5)
                        );
                        let grown_layout = Layout::from_size_align(size * 3, align).unwrap();
                        Allocator.dealloc(grown, grown_layout);
                    }
                }
            }
        }
    }
}
