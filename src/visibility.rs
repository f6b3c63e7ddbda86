//! Which index matches are rows the caller can see: batch functions return
//! only TIDs visible to the active snapshot (the visible member of each HOT
//! chain), as an index scan under the executor would.

use crate::storage::{tid_to, Tid};
use pgrx::pg_sys;

/// For (tid, position) matches of an index on `heap_oid`: the visible
/// TIDs as (position, tid), in heap order (sorting first means the checks
/// read each heap page once, and a join back by ctid reads the heap
/// sequentially).
///
/// # Safety
/// Call from a backend inside a transaction with an active snapshot.
pub unsafe fn visible(heap_oid: pg_sys::Oid, mut matches: Vec<(Tid, i64)>) -> Vec<(i64, pg_sys::ItemPointerData)> {
    matches.sort_unstable();
    let heap = pg_sys::table_open(heap_oid, pg_sys::AccessShareLock as i32);
    let am = &*(*heap).rd_tableam;
    let fetch = am.index_fetch_begin.expect("index_fetch_begin")(heap);
    let slot = pg_sys::table_slot_create(heap, std::ptr::null_mut());
    let snapshot = pg_sys::GetActiveSnapshot();
    let mut out = Vec::with_capacity(matches.len());
    let mut last: Option<(Tid, Option<pg_sys::ItemPointerData>)> = None;
    for (tid, position) in matches {
        // One fetch per distinct TID (several queries may match one row).
        let seen = match last {
            Some((t, v)) if t == tid => v,
            _ => {
                let mut t = tid_to(tid);
                let (mut call_again, mut all_dead) = (false, false);
                let found = am.index_fetch_tuple.expect("index_fetch_tuple")(fetch, &mut t, snapshot, slot, &mut call_again, &mut all_dead);
                let v = found.then(|| (*slot).tts_tid);
                last = Some((tid, v));
                v
            }
        };
        if let Some(v) = seen {
            out.push((position, v));
        }
    }
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    am.index_fetch_end.expect("index_fetch_end")(fetch);
    pg_sys::table_close(heap, pg_sys::AccessShareLock as i32);
    out
}
