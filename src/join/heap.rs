//! Heap fetches of a chunk's matches, a page at a time. The matches come
//! in TID order; `table_index_fetch_tuple` would lock and unlock the page
//! once per TID and search each HOT chain on its own (0.32 us a row, more
//! than the index's share of the join at 10^6 rows). Here each heap page
//! is pinned once, share-locked once to resolve every TID of the chunk on
//! it (`visibility::resolve_page`: the line pointer alone on an
//! all-visible page under an MVCC snapshot, the HOT chain search with its
//! predicate locks otherwise), and the rows are then served from the
//! pinned page without a lock, as a heap scan in page-at-a-time mode
//! serves them (a pinned page's tuples do not move: pruning needs a
//! cleanup lock).
//!
//! Tables of other access methods, or slots that are not buffer heap
//! slots, go through `table_index_fetch_tuple`.
//!
//! A TID probe (`exact`: `inner.ctid = outer.ctid`) fetches the row at
//! each TID itself, as a TID scan does (`heap_fetch`: no HOT chain is
//! followed; a TID of an unused, dead or redirect line pointer, or past the
//! page's last, is no row): resolved a page at a time under an MVCC
//! snapshot below SERIALIZABLE, else row by row through
//! `table_tuple_fetch_row_version` (heapam's predicate locks).

use crate::storage::{prefetch, tid_to, RecentPages, Tid};
use crate::visibility::{line_pointers_answer, resolve_exact, resolve_page};
use pgrx::pg_sys;

/// TIDs ahead of the one located whose rows are prefetched (their line
/// pointers twice as far ahead): a few hundred nanoseconds of reading
/// rows, a miss's time (`prefetch_upcoming`).
const ROWS_AHEAD: usize = 16;

pub(super) struct PageFetch {
    /// Heap table and buffer heap slot: pages are read here.
    by_page: bool,
    /// The row at each TID, not its HOT chain's visible member.
    exact: bool,
    /// Non-heap tables: the table AM's own fetch.
    index_fetch: *mut pg_sys::IndexFetchTableData,
    /// The pinned page (InvalidBuffer: none) and its block.
    buf: pg_sys::Buffer,
    block: u32,
    /// The resolved TIDs of the chunk on that page, in TID order, and
    /// where in them the last TID served was (TIDs come in order: the
    /// next is there or just after; a binary search a row was a quarter
    /// of the fetch's time).
    page: Vec<(Tid, Option<pg_sys::ItemPointerData>)>,
    at: usize,
    /// Where this backend last found the table's pages.
    recent: Option<RecentPages>,
}

/// Prefetches the resolved rows of the pinned page in `buf`: they are
/// served one by one next, each deformed on its first touch, and rows of
/// random heap pages are cache misses (a fifth of a join's time in a
/// profile, inside slot_getsomeattrs). Prefetching them together overlaps
/// those misses.
///
/// # Safety
/// `buf` pinned; `rows` resolved on it.
unsafe fn prefetch_rows(buf: pg_sys::Buffer, rows: &[(Tid, Option<pg_sys::ItemPointerData>)]) {
    // SAFETY: the page is pinned; line pointers of resolved rows are in
    // bounds.
    unsafe {
        let page = pg_sys::BufferGetPage(buf) as *const pg_sys::PageHeaderData;
        for v in rows.iter().filter_map(|r| r.1) {
            let lp = &*(*page).pd_linp.as_ptr().add(v.ip_posid as usize - 1);
            prefetch((page as *const u8).add(lp.lp_off() as usize));
        }
    }
}

/// Resolves `tids` of the pinned page in `buf` into `out`: the row at each
/// (`exact`), or its HOT chain's visible member.
///
/// # Safety
/// As `PageFetch::fetch`; `buf` pinned; inside a guard (`resolve_page`).
unsafe fn resolve(
    exact: bool,
    heap: pg_sys::Relation,
    buf: pg_sys::Buffer,
    snapshot: pg_sys::Snapshot,
    tids: impl Iterator<Item = Tid>,
    out: &mut Vec<(Tid, Option<pg_sys::ItemPointerData>)>,
) {
    // SAFETY: the caller's contract; an exact fetch comes here only where
    // line pointers answer (`fetch`).
    unsafe {
        if exact {
            resolve_exact(heap, buf, snapshot, tids, out)
        } else {
            resolve_page(heap, buf, snapshot, line_pointers_answer(snapshot), tids, out)
        }
    }
}

/// A window of a summing plan's matches (in heap order) whose pages are
/// pinned together (`PageFetch::pin_window`), so that their visible rows
/// can be read on every core: a pinned page's tuples do not move, and a
/// resolved row's line pointer does not change while the pin holds.
pub(super) struct PinnedRows {
    bufs: Vec<pg_sys::Buffer>,
    /// Each match with a visible row, in the window's order.
    pub(super) rows: Vec<PinnedRow>,
}

#[derive(Clone, Copy)]
pub(super) struct PinnedRow {
    /// The row's header in its pinned page.
    pub(super) addr: usize,
    /// The match's place in the window.
    pub(super) at: u32,
    /// Its page in `bufs`, and the row's TID (the HOT chain's visible member).
    page: u32,
    v: pg_sys::ItemPointerData,
}

/// The row `v` of the pinned page in `buf`: its header and length.
///
/// # Safety
/// `buf` pinned; `v` a resolved line pointer on it.
unsafe fn row_of(buf: pg_sys::Buffer, v: pg_sys::ItemPointerData) -> (*mut pg_sys::HeapTupleHeaderData, u32) {
    // SAFETY: the caller's contract.
    unsafe {
        let page = pg_sys::BufferGetPage(buf) as *const pg_sys::PageHeaderData;
        let lp = &*(*page).pd_linp.as_ptr().add(v.ip_posid as usize - 1);
        ((page as *mut u8).add(lp.lp_off() as usize).cast(), lp.lp_len())
    }
}

/// Stores the row `v` of the pinned page in `buf` into `slot`, as
/// heapam_index_fetch_tuple stores it (the slot's own tuple header).
///
/// # Safety
/// As `row_of`; `slot` a buffer heap slot of `heap`.
unsafe fn store_row(heap: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, buf: pg_sys::Buffer, v: pg_sys::ItemPointerData) {
    // SAFETY: the caller's contract.
    unsafe {
        let (data, len) = row_of(buf, v);
        let bslot = slot.cast::<pg_sys::BufferHeapTupleTableSlot>();
        let tuple = &raw mut (*bslot).base.tupdata;
        (*tuple).t_data = data;
        (*tuple).t_len = len;
        (*tuple).t_self = v;
        (*tuple).t_tableOid = (*heap).rd_id;
        crate::slot::store_buffer_tuple(tuple, slot, buf);
    }
}

impl PageFetch {
    /// # Safety
    /// `heap` open; `slot` made for it by `table_slot_create`.
    pub(super) unsafe fn begin(heap: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, exact: bool) -> PageFetch {
        // SAFETY: the caller's relation and slot.
        unsafe {
            let by_page = (*heap).rd_tableam == pg_sys::GetHeapamTableAmRoutine()
                && std::ptr::eq((*slot).tts_ops, &raw const pg_sys::TTSOpsBufferHeapTuple);
            PageFetch {
                by_page,
                exact,
                index_fetch: if by_page || exact { std::ptr::null_mut() } else { pg_sys::table_index_fetch_begin(heap) },
                buf: pg_sys::InvalidBuffer as pg_sys::Buffer,
                block: pg_sys::InvalidBlockNumber,
                page: Vec::new(),
                at: 0,
                recent: by_page.then(|| RecentPages::of(heap)),
            }
        }
    }

    /// The visible row of the HOT chain at `tid` into `slot`; false if
    /// there is none. `upcoming`: the TIDs that follow `tid` in the
    /// caller's order (those on `tid`'s page are resolved with it).
    ///
    /// # Safety
    /// As `begin`; a backend in a transaction; `snapshot` the query's.
    pub(super) unsafe fn fetch(
        &mut self,
        heap: pg_sys::Relation,
        slot: *mut pg_sys::TupleTableSlot,
        snapshot: pg_sys::Snapshot,
        tid: Tid,
        upcoming: impl Iterator<Item = Tid> + Clone,
    ) -> bool {
        // SAFETY: the caller keeps this function's contract (# Safety).
        unsafe {
            if self.exact && !(self.by_page && line_pointers_answer(snapshot)) {
                let mut ip = tid_to(tid);
                return pg_sys::table_tuple_fetch_row_version(heap, &mut ip, snapshot, slot);
            }
            if !self.by_page {
                let mut ip = tid_to(tid);
                let (mut call_again, mut all_dead) = (false, false);
                return pg_sys::table_index_fetch_tuple(self.index_fetch, &mut ip, snapshot, slot, &mut call_again, &mut all_dead);
            }
            self.prefetch_upcoming(upcoming.clone());
            let Some(v) = self.locate(heap, snapshot, tid, upcoming) else { return false };
            self.store(heap, slot, v);
            true
        }
    }

    /// Whether `locate` serves this fetch: a heap table's HOT chains.
    pub(super) fn locates(&self) -> bool {
        self.by_page && !self.exact
    }

    /// The visible member of the HOT chain at `tid`, on the page this
    /// fetch now holds pinned (until it moves to another); None if there
    /// is none. As `fetch`, where `locates` (the caller prefetches,
    /// `prefetch_upcoming`).
    ///
    /// # Safety
    /// As `fetch`.
    pub(super) unsafe fn locate(
        &mut self,
        heap: pg_sys::Relation,
        snapshot: pg_sys::Snapshot,
        tid: Tid,
        upcoming: impl Iterator<Item = Tid>,
    ) -> Option<pg_sys::ItemPointerData> {
        // SAFETY: the caller keeps this function's contract (# Safety).
        unsafe {
            let block = (tid >> 16) as u32;
            if block != self.block || self.buf == pg_sys::InvalidBuffer as pg_sys::Buffer {
                // The last page's pin released, this one's taken, pruned
                // and its TIDs resolved: raw calls under one guard (five
                // guarded calls a page were a tenth of a kNN join's time).
                let old = std::mem::replace(&mut self.buf, pg_sys::InvalidBuffer as pg_sys::Buffer);
                self.block = block;
                let recent = self.recent.as_mut().expect("a heap read by page");
                let on_page = std::iter::once(tid).chain(upcoming.take_while(|&t| (t >> 16) as u32 == block && t >= tid));
                let (exact, page) = (self.exact, &mut self.page);
                self.buf = recent.pin_then(block, |buf| {
                    if old != pg_sys::InvalidBuffer as pg_sys::Buffer {
                        crate::unguarded::ReleaseBuffer(old);
                    }
                    // As heapam's index fetch does when it moves to a page.
                    crate::unguarded::heap_page_prune_opt(heap, buf);
                    resolve(exact, heap, buf, snapshot, on_page, page);
                });
                prefetch_rows(self.buf, &self.page);
                self.at = 0;
            }
            let at = match self.page.get(self.at..).and_then(|rest| rest.iter().take(2).position(|p| p.0 == tid)) {
                Some(i) => Some(self.at + i),
                None => self.page.binary_search_by_key(&tid, |p| p.0).ok(),
            };
            match at {
                Some(at) => {
                    self.at = at;
                    self.page[at].1
                }
                None => {
                    // Out of the caller's order: this TID alone.
                    let mut one = Vec::with_capacity(1);
                    crate::unguarded::guarded(|| resolve(self.exact, heap, self.buf, snapshot, std::iter::once(tid), &mut one));
                    one[0].1
                }
            }
        }
    }

    /// Prefetches for the TIDs `upcoming` (those located after the next,
    /// in order): the line pointer of the one `2 * ROWS_AHEAD` on, the row
    /// of the one `ROWS_AHEAD` on (its line pointer asked for before). A
    /// distance in TIDs, not pages: a dense batch's few dozen matches a
    /// page made a look a few hundred TIDs ahead for the pages four and
    /// eight on (`RecentPages::prefetch_ahead`) reach none.
    pub(super) fn prefetch_upcoming(&self, upcoming: impl Iterator<Item = Tid>) {
        if let Some(recent) = self.recent.as_ref() {
            let mut ahead = upcoming.skip(ROWS_AHEAD - 1);
            if let Some(t) = ahead.next() {
                recent.prefetch_row((t >> 16) as u32, t as u16);
                if let Some(t) = ahead.nth(ROWS_AHEAD - 1) {
                    recent.prefetch_line_pointer(t);
                }
            }
        }
    }

    /// The row `v` found by `locate` on the pinned page: its header and
    /// length (valid while the page stays pinned: until the next
    /// `locate` of another page).
    ///
    /// # Safety
    /// `v` from this fetch's last `locate`.
    pub(super) unsafe fn row(&self, v: pg_sys::ItemPointerData) -> (*mut pg_sys::HeapTupleHeaderData, u32) {
        // SAFETY: the caller's contract: a resolved line pointer of the
        // pinned page.
        unsafe { row_of(self.buf, v) }
    }

    /// Stores the row `v` found by `locate` into `slot`, as
    /// heapam_index_fetch_tuple stores it (the slot's own tuple header).
    ///
    /// # Safety
    /// As `row`; `slot` the one `begin` was given.
    pub(super) unsafe fn store(&self, heap: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, v: pg_sys::ItemPointerData) {
        // SAFETY: the caller's contract.
        unsafe { store_row(heap, slot, self.buf, v) }
    }

    /// Pins the pages of `window` (matches (TID, outer row) in heap order:
    /// a few hundred pages at most, which stay pinned until `unpin`),
    /// resolves each page's TIDs as `locate` does, and gives the visible
    /// rows.
    ///
    /// # Safety
    /// As `locate`, where `locates`.
    pub(super) unsafe fn pin_window(&mut self, heap: pg_sys::Relation, snapshot: pg_sys::Snapshot, window: &[(Tid, u32)]) -> PinnedRows {
        self.release();
        let recent = self.recent.as_mut().expect("a heap read by page");
        let mut out = PinnedRows { bufs: Vec::new(), rows: Vec::with_capacity(window.len()) };
        let mut i = 0;
        while i < window.len() {
            let block = (window[i].0 >> 16) as u32;
            let j = i + window[i..].iter().take_while(|m| (m.0 >> 16) as u32 == block).count();
            let page = &mut self.page;
            let on_page = window[i..j].iter().map(|m| m.0);
            // SAFETY: the caller's contract; raw calls under pin_then's
            // guard, as `locate` makes them.
            let buf = recent.pin_then(block, |buf| unsafe {
                crate::unguarded::heap_page_prune_opt(heap, buf);
                resolve(false, heap, buf, snapshot, on_page, page);
            });
            let p = out.bufs.len() as u32;
            out.bufs.push(buf);
            // `page` holds the window's TIDs of this page in their order,
            // each repeat once.
            let mut k = 0;
            for (at, &(tid, _)) in (i..j).zip(&window[i..j]) {
                while self.page[k].0 != tid {
                    k += 1;
                }
                if let Some(v) = self.page[k].1 {
                    // SAFETY: a line pointer `resolve` found on the page.
                    let (row, _) = unsafe { row_of(buf, v) };
                    out.rows.push(PinnedRow { addr: row as usize, at: at as u32, page: p, v });
                }
            }
            i = j;
        }
        self.page.clear();
        out
    }

    /// Stores `row` of `pinned` into `slot` (as `store`).
    ///
    /// # Safety
    /// `pinned` not yet unpinned; `slot` the one `begin` was given.
    pub(super) unsafe fn store_pinned(
        &self,
        heap: pg_sys::Relation,
        slot: *mut pg_sys::TupleTableSlot,
        pinned: &PinnedRows,
        row: &PinnedRow,
    ) {
        // SAFETY: the caller's contract.
        unsafe { store_row(heap, slot, pinned.bufs[row.page as usize], row.v) }
    }

    /// Drops the window's pins.
    pub(super) fn unpin(&mut self, pinned: PinnedRows) {
        // SAFETY: pins `pin_window` took; raw calls under one guard.
        unsafe {
            crate::unguarded::guarded(|| {
                for b in pinned.bufs {
                    crate::unguarded::ReleaseBuffer(b);
                }
            })
        }
    }

    /// `f` of the buffers this backend remembers for the table (none for
    /// a table not read by page), for parallel workers.
    pub(super) fn with_known_buffers<R>(&self, f: impl FnOnce(&[pg_sys::Buffer]) -> R) -> R {
        match self.recent.as_ref() {
            Some(r) => r.with_known_buffers(f),
            None => f(&[]),
        }
    }

    /// Takes the leader's remembered buffers where this worker knows none.
    pub(super) fn seed(&mut self, buffers: &[pg_sys::Buffer]) {
        if let Some(r) = self.recent.as_mut() {
            r.seed(buffers);
        }
    }

    /// Drops the page pin (the slot keeps its own while it holds a row).
    pub(super) fn release(&mut self) {
        if self.buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
            // SAFETY: a pin this fetch took.
            unsafe { pg_sys::ReleaseBuffer(self.buf) };
            self.buf = pg_sys::InvalidBuffer as pg_sys::Buffer;
        }
        self.block = pg_sys::InvalidBlockNumber;
        self.page.clear();
    }

    /// Forgets the page: a new chunk or rescan brings other TIDs.
    pub(super) unsafe fn reset(&mut self) {
        self.release();
        if !self.index_fetch.is_null() {
            // SAFETY: the fetch begun by `begin`.
            unsafe { pg_sys::table_index_fetch_reset(self.index_fetch) };
        }
    }

    pub(super) unsafe fn end(&mut self) {
        self.release();
        // Back into this backend's memory of the table.
        self.recent = None;
        if !self.index_fetch.is_null() {
            // SAFETY: the fetch begun by `begin`.
            unsafe { pg_sys::table_index_fetch_end(self.index_fetch) };
            self.index_fetch = std::ptr::null_mut();
        }
    }
}
