//! The visibility map's answers for an index-only join's matches: whether
//! a match's heap page is all-visible (every row on it visible to every
//! snapshot, so the index entry's chain has its visible row: what an
//! index-only scan trusts) while no bulk delete of the index has finished
//! since the search began.
//!
//! An answer is kept for the page's next matches of the same search: they
//! were found by it, after their rows were inserted, and an insert clears
//! the bit before its index entry exists; an entry of the page that a bulk
//! delete removed before the bit was set shows in the count read just
//! after the map. So the map and the count (a fence and a shared-memory
//! read) are read once a page a search, in whatever order the matches
//! come (`State::heap_order`): read a match, the map cost an index-only
//! count over 2.3M matches in random order ~20 ms locally (175 against
//! 154 ms), and the fence was a third of the per-row path's samples.

use pgrx::pg_sys;

/// Heap pages below this have their answers kept in a table (4 bytes a
/// page: at most 16 MB, for 32 GB of heap); past it, the last page's.
const KEPT_PAGES: usize = 1 << 22;

pub(super) struct AllVisible {
    /// The visibility map page the last check read (InvalidBuffer: none).
    buf: pg_sys::Buffer,
    /// By heap page: `search << 1 | answer`, valid while `search` is the
    /// current one.
    kept: Vec<u32>,
    search: u32,
    /// A page past `KEPT_PAGES` and its answer.
    last: Option<(u32, bool)>,
}

impl AllVisible {
    pub(super) fn new() -> AllVisible {
        AllVisible { buf: pg_sys::InvalidBuffer as pg_sys::Buffer, kept: Vec::new(), search: 1, last: None }
    }

    /// A new search: no answer is kept from before (it may find rows
    /// inserted since a page was checked).
    pub(super) fn forget(&mut self) {
        self.last = None;
        self.search += 1;
        if self.search == u32::MAX >> 1 {
            self.kept.clear();
            self.search = 1;
        }
    }

    /// Whether `block` of `heap` is all-visible and `unchanged()` (the
    /// index's bulk-delete count, read after the map) holds.
    ///
    /// # Safety
    /// `heap` open.
    pub(super) unsafe fn check(&mut self, heap: pg_sys::Relation, block: u32, unchanged: impl FnOnce() -> bool) -> bool {
        // SAFETY: the caller's open heap.
        self.kept(block).unwrap_or_else(|| unsafe { self.read(heap, block, unchanged) })
    }

    /// The answer kept for `block` in this search, if any.
    pub(super) fn kept(&self, block: u32) -> Option<bool> {
        match self.kept.get(block as usize) {
            Some(&k) if k >> 1 == self.search => Some(k & 1 != 0),
            _ => self.last.filter(|&(b, _)| b == block).map(|(_, answer)| answer),
        }
    }

    /// Reads `block`'s answer (`check`) and keeps it for this search.
    ///
    /// # Safety
    /// `heap` open.
    pub(super) unsafe fn read(&mut self, heap: pg_sys::Relation, block: u32, unchanged: impl FnOnce() -> bool) -> bool {
        let at = block as usize;
        // SAFETY: the caller's open heap; the map page stays pinned in buf.
        let answer = unsafe { pg_sys::visibilitymap_get_status(heap, block, &mut self.buf) } & pg_sys::VISIBILITYMAP_ALL_VISIBLE as u8 != 0
            && unchanged();
        if at < KEPT_PAGES {
            if self.kept.len() <= at {
                self.kept.resize(at + 1, 0);
            }
            self.kept[at] = self.search << 1 | answer as u32;
        } else {
            self.last = Some((block, answer));
        }
        answer
    }

    /// Drops the map page's pin (and the kept answers).
    pub(super) fn release(&mut self) {
        self.forget();
        if self.buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
            // SAFETY: the pin visibilitymap_get_status took.
            unsafe { pg_sys::ReleaseBuffer(self.buf) };
            self.buf = pg_sys::InvalidBuffer as pg_sys::Buffer;
        }
    }
}
