//! What every access method's scan shares: the scan descriptor with the
//! AM's state in `opaque` (freed with the scan's memory context) and a
//! memory context for returned index tuples, and the MVCC check.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// Starts a scan with `state` in `opaque`.
///
/// # Safety
/// ambeginscan's arguments.
pub unsafe fn begin<S>(
    index: pg_sys::Relation,
    nkeys: i32,
    norderbys: i32,
    state: impl FnOnce(pg_sys::MemoryContext) -> S,
) -> pg_sys::IndexScanDesc {
    // SAFETY: as the caller's.
    unsafe {
        let scan = pg_sys::RelationGetIndexScan(index, nkeys, norderbys);
        let tuple_ctx = pg_sys::AllocSetContextCreateExtended(pg_sys::CurrentMemoryContext, c"gpuindex tuples".as_ptr(), 0, 1024, 8192);
        (*scan).opaque = pgrx::PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(state(tuple_ctx)) as *mut std::ffi::c_void;
        scan
    }
}

/// The state `begin` stored.
///
/// # Safety
/// `scan` was started by `begin` with a state of type `S`.
pub unsafe fn state<'a, S>(scan: pg_sys::IndexScanDesc) -> &'a mut S {
    // SAFETY: as the caller's; lives as long as the scan's memory context.
    unsafe { &mut *((*scan).opaque as *mut S) }
}

/// Scans that drop page locks between calls need an MVCC snapshot.
pub fn check_snapshot(scan: &pg_sys::IndexScanDescData, am: &str, instead: &str) {
    // SAFETY: xs_snapshot is set for every scan the executor runs.
    let t = unsafe { scan.xs_snapshot.as_ref().map(|s| s.snapshot_type) };
    if !matches!(t, Some(pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC)) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{am} scans need an MVCC snapshot"),
            format!("{am} cannot serve exclusion constraints or CLUSTER; use {instead} for those."),
        );
    }
}

/// amrescan's first step: the new keys (and ORDER BY keys) into the scan.
///
/// # Safety
/// amrescan's arguments.
pub unsafe fn copy_keys(scan: pg_sys::IndexScanDesc, keys: pg_sys::ScanKey, nkeys: i32, orderbys: pg_sys::ScanKey, norderbys: i32) {
    // SAFETY: the scan has room for the counts it was begun with.
    unsafe {
        if !keys.is_null() && nkeys > 0 {
            std::ptr::copy(keys, (*scan).keyData, nkeys as usize);
        }
        if !orderbys.is_null() && norderbys > 0 {
            std::ptr::copy(orderbys, (*scan).orderByData, norderbys as usize);
        }
    }
}

/// amcanreturn: every gpuindex index stores its one column's value
/// exactly, so index-only scans can return it.
#[pg_guard]
pub unsafe extern "C-unwind" fn amcanreturn(_index: pg_sys::Relation, attno: std::ffi::c_int) -> bool {
    attno == 1
}
