//! Heap pages' all-visible bits as an index-only scan reads them to let
//! go of index pages' pins early (`Pins::all_visible`).

use super::Tid;
use pgrx::pg_sys;

/// Heap blocks one visibility-map page covers (its contents after the
/// page header, four heap blocks a byte): the map's on-disk layout, used
/// only to keep one pin per map page. visibilitymap_get_status reads the
/// right page whatever this says.
const HEAP_BLOCKS_PER_MAP_PAGE: u32 = (pg_sys::BLCKSZ - super::CONTENT_START as u32) * 4;

/// Map pages kept pinned at once at most (a 16 GB heap's): blocks beyond
/// share the last pin, which then moves between their pages.
const MAP_PAGES: usize = 64;

/// A heap's visibility map, its pages pinned as they are read (none
/// without a heap: nothing is all-visible then).
pub struct VisibilityMap {
    heap: pg_sys::Relation,
    bufs: Vec<pg_sys::Buffer>,
}

impl Default for VisibilityMap {
    fn default() -> Self {
        VisibilityMap::of(std::ptr::null_mut())
    }
}

impl VisibilityMap {
    pub fn of(heap: pg_sys::Relation) -> Self {
        VisibilityMap { heap, bufs: Vec::new() }
    }

    /// Whether the heap page of every one of `tids` is all-visible now.
    /// `tids` owns nothing to drop (it is iterated under one guard, which
    /// an ERROR jumps out of).
    pub fn all_visible<I: IntoIterator<Item = Tid>>(&mut self, tids: I) -> bool {
        const { assert!(!std::mem::needs_drop::<I::IntoIter>(), "an iterator over borrowed TIDs") };
        if self.heap.is_null() {
            return false;
        }
        let (heap, bufs) = (self.heap, &mut self.bufs);
        // SAFETY: an open heap; raw calls only under the guard (an ERROR
        // leaves the pins to the resource owner).
        unsafe {
            crate::unguarded::guarded(|| {
                tids.into_iter().all(|t| {
                    let block = (t >> 16) as u32;
                    let slot = ((block / HEAP_BLOCKS_PER_MAP_PAGE) as usize).min(MAP_PAGES - 1);
                    if bufs.len() <= slot {
                        bufs.resize(slot + 1, pg_sys::InvalidBuffer as pg_sys::Buffer);
                    }
                    crate::unguarded::visibilitymap_get_status(heap, block, &mut bufs[slot]) as u32 & pg_sys::VISIBILITYMAP_ALL_VISIBLE != 0
                })
            })
        }
    }

    /// Releases the map pages' pins.
    pub fn release(&mut self) {
        for b in self.bufs.drain(..).filter(|&b| b != pg_sys::InvalidBuffer as pg_sys::Buffer) {
            // SAFETY: pinned by visibilitymap_get_status in this transaction.
            unsafe { pg_sys::ReleaseBuffer(b) };
        }
    }
}
