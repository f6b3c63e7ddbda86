//! ambulkdelete and amvacuumcleanup around the access method's own work:
//! the statistics struct (allocated when VACUUM passes none), the
//! bulk-delete callback as a closure on TIDs, the page count.

use super::am::IndexAm;
use crate::storage::{tid_to, Fork, Tid};
use pgrx::pg_sys;

fn stats_or_new(stats: *mut pg_sys::IndexBulkDeleteResult) -> *mut pg_sys::IndexBulkDeleteResult {
    if stats.is_null() {
        // SAFETY: palloc0 in VACUUM's context, as the core access methods do.
        unsafe { pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBulkDeleteResult>()) as *mut pg_sys::IndexBulkDeleteResult }
    } else {
        stats
    }
}

fn set_pages(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult) {
    // SAFETY: an open relation.
    stats.num_pages = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, Fork::Main.number()) };
}

/// # Safety
/// ambulkdelete's own arguments.
pub unsafe fn ambulkdelete<A: IndexAm>(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let stats = stats_or_new(stats);
    let callback = callback.expect("a bulk-delete callback");
    let dead = |t: Tid| {
        let mut p = tid_to(t);
        // SAFETY: VACUUM's callback and state, called during VACUUM.
        unsafe { callback(&mut p, callback_state) }
    };
    // SAFETY: valid for the call.
    let (index, s) = unsafe { ((*info).index, &mut *stats) };
    A::bulk_delete(index, s, &dead);
    super::bulk_deletes::note_finished(index);
    set_pages(index, s);
    stats
}

/// # Safety
/// amvacuumcleanup's own arguments.
pub unsafe fn amvacuumcleanup<A: IndexAm>(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    // SAFETY: valid for the call.
    let info = unsafe { &*info };
    if info.analyze_only {
        return stats;
    }
    let bulk_deleted = !stats.is_null();
    let stats = stats_or_new(stats);
    // SAFETY: allocated or passed for this call.
    let s = unsafe { &mut *stats };
    A::vacuum_cleanup(info, s, bulk_deleted);
    set_pages(info.index, s);
    stats
}
