//! The server's global allocator: mimalloc, asked for alignment only when a layout needs more
//! than any block of its size already has.
//!
//! A server answers with many small, short-lived allocations (request heads, JSON bodies,
//! header values), which mimalloc serves from per-thread free lists. The `mimalloc` crate
//! passes every layout to `mi_malloc_aligned`, whose fast path takes only a free block that
//! happens to sit at the alignment; when the page's free list is empty, or the block is over
//! 1 KiB and not a power of two, it over-allocates and hands out an interior pointer. That was
//! a quarter of a check's allocations. Like the standard library's `System`, this asks for
//! plain `mi_malloc` whenever C's `malloc` guarantee covers the layout: on 64-bit targets
//! mimalloc rounds every size class past 8 bytes to a multiple of 16 (`MI_ALIGN2W`) and
//! starts every page's blocks at 16, so a block is aligned to 16, or to 8 when it is 8 bytes.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};

/// The alignment of every mimalloc block of more than 8 bytes (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// mimalloc behind `GlobalAlloc`.
#[derive(Debug)]
pub struct Allocator;

/// Whether `mi_malloc(size)` is aligned enough for `align`: a block is at least as large as
/// its size, and aligned to 16 or to its own size.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// A block for `layout` from `plain_fn` when its alignment covers the layout, else from
/// `aligned_fn` (mimalloc's plain and aligned functions of one kind: malloc or zalloc).
///
/// # Safety
///
/// `layout` has a non-zero size, as `GlobalAlloc` promises.
#[inline(always)]
unsafe fn allocate(
    layout: Layout,
    plain_fn: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned_fn: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: mimalloc's allocation functions take any size and a power-of-two alignment.
    unsafe {
        if plain(layout.align(), layout.size()) {
            plain_fn(layout.size()).cast()
        } else {
            aligned_fn(layout.size(), layout.align()).cast()
        }
    }
}

// SAFETY: every pointer comes from mimalloc and goes back to it; a layout mimalloc's plain
// allocation does not align is allocated with its alignment.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `GlobalAlloc` callers give a non-zero size.
        unsafe { allocate(layout, mi_malloc, mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { allocate(layout, mi_zalloc, mi_zalloc_aligned) }
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

    /// Every size class up to a few pages, at every alignment up to a page, with many blocks
    /// of a layout alive at once (so that blocks past a page's first are looked at): each
    /// pointer is aligned, writable over its whole size, keeps its contents when it grows, and
    /// is freed.
    #[test]
    fn every_layout_is_aligned_and_keeps_its_contents_when_it_grows() {
        let sizes = (1..=300)
            .chain((301..=20_000).step_by(37))
            .chain([65_536, 1 << 20]);
        for size in sizes {
            for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let grown = Layout::from_size_align(size * 3, align).unwrap();
                let live = if size > 4096 { 2 } else { 24 };
                for zeroed in [false, true] {
                    // SAFETY: the layout has a non-zero size; each pointer is used within it
                    // and freed once, with the layout it has then.
                    unsafe {
                        let blocks: Vec<*mut u8> = (0..live)
                            .map(|_| {
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
                                ptr
                            })
                            .collect();
                        for ptr in blocks {
                            let moved = Allocator.realloc(ptr, layout, grown.size());
                            assert_eq!(moved as usize % align, 0, "{layout:?} grown");
                            assert!(
                                std::slice::from_raw_parts(moved, size)
                                    .iter()
                                    .all(|&b| b == 0xa5)
                            );
                            Allocator.dealloc(moved, grown);
                        }
                    }
                }
            }
        }
    }

    /// The layouts a plain block serves: alignments up to 16 that the size covers.
    #[test]
    fn plain_blocks_serve_only_the_alignments_they_have() {
        assert!(plain(8, 8) && plain(8, 12) && plain(1, 3));
        assert!(plain(16, 16) && plain(16, 17) && plain(16, 4096));
        assert!(!plain(16, 8) && !plain(8, 4));
        assert!(!plain(32, 64) && !plain(4096, 4096));
    }
}
