//! Which index matches are rows the caller can see: batch functions return
//! only TIDs visible to the active snapshot (the visible member of each HOT
//! chain), as an index scan under the executor would.
//!
//! Matches are taken page by page (one pin and one share lock per heap
//! page). On a page marked all-visible, under an MVCC snapshot, every
//! tuple is visible and no HOT chain has more than its live member, so a
//! line pointer alone answers (the same reasoning as an index-only scan,
//! but from the page flag, which VACUUM sets together with the visibility
//! map bit); other pages, and SERIALIZABLE transactions, go through
//! heap_hot_search_buffer.

use crate::storage::{tid_to, RecentPages, Tid};
use pgrx::pg_sys;

/// (tid, position) matches in heap order, as only sorting makes them:
/// `visible` reads each heap page once without checking the order again.
pub struct HeapOrdered(Vec<(Tid, i64)>);

impl HeapOrdered {
    /// `matches` sorted (`sort`).
    pub fn sort(mut matches: Vec<(Tid, i64)>) -> Self {
        sort(&mut matches);
        HeapOrdered(matches)
    }

    /// `sort`, for matches whose positions ascend wherever their TIDs
    /// are equal (`heap_order::sort_by_tid`: a third fewer radix passes).
    pub fn sort_by_tid(mut matches: Vec<(Tid, i64)>) -> Self {
        if !is_sorted(&matches) {
            gpuindex_engine::heap_order::sort_by_tid(&mut matches);
        }
        HeapOrdered(matches)
    }

    /// Without repeated matches (still in order).
    pub fn dedup(mut self) -> Self {
        self.0.dedup();
        self
    }

    pub fn into_vec(self) -> Vec<(Tid, i64)> {
        self.0
    }
}

/// For (tid, position) matches of an index on `heap`: the visible TIDs
/// as (position, tid), in heap order (sorted first, so each heap page is
/// read once, and a join back by ctid reads the heap in order). Callers
/// go through `OpenIndex::visible`, which also applies row-level security.
///
/// # Safety
/// Call from a backend inside a transaction with an active snapshot;
/// `heap` open and locked.
pub unsafe fn visible(heap: pg_sys::Relation, matches: HeapOrdered) -> Vec<(i64, pg_sys::ItemPointerData)> {
    let matches = matches.0;
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        // Pages are read as heap pages below.
        if (*heap).rd_tableam != pg_sys::GetHeapamTableAmRoutine() {
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "gpuindex batch functions read heap tables only",
                "Use the operators through an index scan on tables of other access methods.",
            );
        }
        let snapshot = pg_sys::GetActiveSnapshot();
        let fast = line_pointers_answer(snapshot);
        let nblocks = pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM);
        let mut out = Vec::with_capacity(matches.len());
        let mut page = Vec::new();
        let mut recent = RecentPages::of(heap);
        let mut i = 0;
        while i < matches.len() {
            let block = (matches[i].0 >> 16) as u32;
            let end = i + matches[i..].partition_point(|m| (m.0 >> 16) as u32 == block);
            if block < nblocks {
                recent.prefetch_ahead(block, matches[end..].iter().map(|m| m.0));
                // Pin, resolve under the page's lock, release: one guard.
                let tids = matches[i..end].iter().map(|m| m.0);
                recent.pin_then(block, |buf| {
                    resolve_page(heap, buf, snapshot, fast, tids, &mut page);
                    crate::unguarded::ReleaseBuffer(buf);
                });
                // Both in TID order: several queries may match one row.
                let mut at = 0;
                for &(tid, position) in &matches[i..end] {
                    while page[at].0 != tid {
                        at += 1;
                    }
                    if let Some(v) = page[at].1 {
                        out.push((position, v));
                    }
                }
            }
            i = end;
        }
        out
    }
}

/// Whether, under `snapshot`, a line pointer on an all-visible page
/// answers alone: an MVCC snapshot, and not SERIALIZABLE (which needs the
/// tuple-level predicate locks of the chain search), nor taken on a hot
/// standby (where heapam does not trust the page flag either: heapgetpage).
///
/// # Safety
/// `snapshot` is a valid snapshot.
pub unsafe fn line_pointers_answer(snapshot: pg_sys::Snapshot) -> bool {
    // SAFETY: the caller's snapshot.
    unsafe {
        (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC
            && !(*snapshot).takenDuringRecovery
            && pg_sys::XactIsoLevel != pg_sys::XACT_SERIALIZABLE as i32
    }
}

/// The visible member of each HOT chain rooted at `tids` (TIDs of the
/// page in `buf`, sorted; repeats are answered once) into `out` as (tid,
/// visible TID), under one share lock of the page. `fast`: what
/// `line_pointers_answer` says for `snapshot`.
///
/// # Safety
/// A backend in a transaction; `buf` pinned, a heap page of `heap`;
/// inside a guard (`unguarded::guarded`), as `each_locked`.
pub unsafe fn resolve_page(
    heap: pg_sys::Relation,
    buf: pg_sys::Buffer,
    snapshot: pg_sys::Snapshot,
    fast: bool,
    tids: impl Iterator<Item = Tid>,
    out: &mut Vec<(Tid, Option<pg_sys::ItemPointerData>)>,
) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        each_locked(buf, tids, out, |page, all_visible, tid| {
            if fast && all_visible { line_pointer_answer(page, tid) } else { None }.unwrap_or_else(|| hot_search(heap, buf, snapshot, tid))
        })
    }
}

/// The row at each of `tids` (TIDs of the page in `buf`, sorted; repeats
/// answered once) that `snapshot` sees, into `out` as (tid, itself or
/// None), under one share lock of the page: what `heap_fetch` answers for
/// each (a normal line pointer whose tuple is visible; no HOT chain
/// followed), for a join by ctid.
///
/// # Safety
/// As `resolve_page`, and `line_pointers_answer(snapshot)` (heap_fetch's
/// predicate locks are then none to take).
pub unsafe fn resolve_exact(
    heap: pg_sys::Relation,
    buf: pg_sys::Buffer,
    snapshot: pg_sys::Snapshot,
    tids: impl Iterator<Item = Tid>,
    out: &mut Vec<(Tid, Option<pg_sys::ItemPointerData>)>,
) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        each_locked(buf, tids, out, |page, all_visible, tid| {
            let lp = line_pointer(page, tid).filter(|lp| lp.lp_flags() == pg_sys::LP_NORMAL)?;
            if all_visible {
                return Some(tid_to(tid));
            }
            let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
            tuple.t_data = (page as *mut u8).add(lp.lp_off() as usize).cast();
            tuple.t_len = lp.lp_len();
            tuple.t_self = tid_to(tid);
            tuple.t_tableOid = (*heap).rd_id;
            crate::unguarded::HeapTupleSatisfiesVisibility(&mut tuple, snapshot, buf).then_some(tuple.t_self)
        })
    }
}

/// `answer(page, all-visible flag, tid)` for each of `tids` (sorted;
/// repeats answered once) into `out`, under one share lock of `buf`.
///
/// # Safety
/// `buf` pinned, a heap page; inside a guard (`unguarded::guarded`): the
/// lock, the unlock and `answer`'s calls are raw, and an ERROR in any
/// jumps over this frame to the guard (the iterator holds nothing to
/// drop: checked at compile time).
unsafe fn each_locked<I: Iterator<Item = Tid>>(
    buf: pg_sys::Buffer,
    tids: I,
    out: &mut Vec<(Tid, Option<pg_sys::ItemPointerData>)>,
    mut answer: impl FnMut(pg_sys::Page, bool, Tid) -> Option<pg_sys::ItemPointerData>,
) {
    const { assert!(!std::mem::needs_drop::<I>(), "an iterator over borrowed TIDs") };
    // SAFETY: the caller's contract.
    unsafe {
        out.clear();
        crate::unguarded::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        let page = pg_sys::BufferGetPage(buf);
        let all_visible = ((*(page as *const pg_sys::PageHeaderData)).pd_flags as u32 & pg_sys::PD_ALL_VISIBLE) != 0;
        for tid in tids {
            if out.last().is_some_and(|l| l.0 == tid) {
                continue;
            }
            let v = answer(page, all_visible, tid);
            out.push((tid, v));
        }
        crate::unguarded::LockBuffer(buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
    }
}

/// `tid`'s line pointer on `page`, if the page has one at its offset.
///
/// # Safety
/// A heap page, pinned and locked.
unsafe fn line_pointer(page: pg_sys::Page, tid: Tid) -> Option<pg_sys::ItemIdData> {
    // SAFETY: the caller's contract; offsets are checked against the
    // page's line pointer count.
    unsafe {
        let header = &*(page as *const pg_sys::PageHeaderData);
        let off = (tid & 0xffff) as usize;
        let count = (header.pd_lower as usize).saturating_sub(std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp))
            / std::mem::size_of::<pg_sys::ItemIdData>();
        if off == 0 || off > count {
            return None;
        }
        Some(*header.pd_linp.as_ptr().add(off - 1))
    }
}

/// On an all-visible page: a normal line pointer is its own visible row;
/// an unused or dead one is no row (Some(None)); a redirect is left to the
/// chain search (None).
unsafe fn line_pointer_answer(page: pg_sys::Page, tid: Tid) -> Option<Option<pg_sys::ItemPointerData>> {
    // SAFETY: the caller keeps this function's contract (# Safety).
    match unsafe { line_pointer(page, tid) }.map(|lp| lp.lp_flags()) {
        Some(pg_sys::LP_NORMAL) => Some(Some(tid_to(tid))),
        Some(pg_sys::LP_REDIRECT) => None,
        _ => Some(None),
    }
}

/// The visible member of the HOT chain rooted at `tid`, if any (the
/// buffer share-locked by the caller; a raw call, under its guard).
unsafe fn hot_search(heap: pg_sys::Relation, buf: pg_sys::Buffer, snapshot: pg_sys::Snapshot, tid: Tid) -> Option<pg_sys::ItemPointerData> {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        let mut t = tid_to(tid);
        let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
        let mut all_dead = false;
        crate::unguarded::heap_hot_search_buffer(&mut t, heap, buf, snapshot, &mut tuple, &mut all_dead, true).then_some(t)
    }
}

/// Sorts matches into heap order on all cores (plain data, no PostgreSQL
/// calls): batches reach millions of matches (see `heap_order::sort`).
/// Callers that sorted already (to drop duplicates) cost one scan.
pub fn sort<T: gpuindex_engine::heap_order::HeapKey>(matches: &mut [T]) {
    if !is_sorted(matches) {
        gpuindex_engine::heap_order::sort(matches);
    }
}

/// Whether matches are in order, millions checked on all cores (the pool
/// made ready for the sort that may follow).
fn is_sorted<T: Ord + Sync>(matches: &[T]) -> bool {
    use rayon::prelude::*;
    crate::batch::ensure_cpu_pool();
    if matches.len() < 1 << 16 {
        return matches.is_sorted();
    }
    matches.par_windows(2).all(|w| w[0] <= w[1])
}

/// Rows grouped by position, heap order kept within each (a counting
/// sort: positions are a dense range, at most the number of queries).
pub fn by_position<T: Copy>(rows: Vec<(i64, T)>) -> Vec<(i64, T)> {
    let (Some(lo), Some(hi)) = (rows.iter().map(|r| r.0).min(), rows.iter().map(|r| r.0).max()) else {
        return rows;
    };
    let span = (hi - lo) as usize + 1;
    if span > 4 * rows.len() + 1024 {
        let mut rows = rows;
        rows.sort_by_key(|r| r.0);
        return rows;
    }
    let mut start = vec![0usize; span + 1];
    for r in &rows {
        start[(r.0 - lo) as usize + 1] += 1;
    }
    for i in 0..span {
        start[i + 1] += start[i];
    }
    let mut out = rows.clone();
    for r in rows {
        let slot = &mut start[(r.0 - lo) as usize];
        out[*slot] = r;
        *slot += 1;
    }
    out
}
