//! VACUUM: ambulkdelete removes the entries of dead heap tuples, leaf by
//! leaf and NULL page by NULL page (one WAL record per changed page);
//! amvacuumcleanup reports the index's size. Empty pages are kept (no page
//! deletion yet): their fence keys keep every mirror hint valid.

use super::page::*;
use super::tree::Tree;
use crate::storage::{Exclusive, Xlog};
use pgrx::pg_sys;
use pgrx::prelude::*;

fn stats_or_new(stats: *mut pg_sys::IndexBulkDeleteResult) -> *mut pg_sys::IndexBulkDeleteResult {
    if stats.is_null() {
        // SAFETY: palloc0 of a plain struct.
        unsafe { PgBox::<pg_sys::IndexBulkDeleteResult>::alloc0().into_pg() }
    } else {
        stats
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let stats = stats_or_new(stats);
    let index = (*info).index;
    let tree = Tree::new(index);
    let callback = callback.expect("a bulk-delete callback");
    let dead = |t: Tid| {
        let mut p = tid_to(t);
        callback(&mut p, callback_state)
    };
    let m = tree.meta();
    let (mut removed, mut kept) = (0f64, 0f64);
    let mut block = m.leftmost[0];
    while block != NONE {
        pg_sys::vacuum_delay_point();
        let page = Exclusive::lock(index, block);
        let l = Leaf::new(page.page());
        let (keys, tids): (Vec<u64>, Vec<Tid>) = (0..l.count()).map(|i| (l.keys()[i], l.tid(i))).filter(|&(_, t)| !dead(t)).unzip();
        removed += (l.count() - keys.len()) as f64;
        kept += keys.len() as f64;
        let next = if l.rightmost() { NONE } else { l.s.right };
        if keys.len() != l.count() {
            let x = Xlog::start(index);
            leaf_set(&mut x.register(&page, false), &keys, &tids);
            x.finish();
        }
        block = next;
    }
    let mut block = m.null_head;
    while block != NONE {
        let page = Exclusive::lock(index, block);
        let n = Nulls::new(page.page());
        let tids: Vec<Tid> = (0..n.count()).map(|i| n.tid(i)).filter(|&t| !dead(t)).collect();
        removed += (n.count() - tids.len()) as f64;
        kept += tids.len() as f64;
        let next = n.s.right;
        if tids.len() != n.count() {
            let x = Xlog::start(index);
            nulls_set(&mut x.register(&page, false), &tids);
            x.finish();
        }
        block = next;
    }
    (*stats).tuples_removed += removed;
    (*stats).num_index_tuples = kept;
    (*stats).num_pages = pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM);
    stats
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    if (*info).analyze_only {
        return stats;
    }
    let fresh = stats.is_null();
    let stats = stats_or_new(stats);
    if fresh {
        // No bulk delete ran: the heap's count is the best cheap estimate.
        (*stats).num_index_tuples = (*info).num_heap_tuples;
        (*stats).estimated_count = (*info).estimated_count;
    }
    (*stats).num_pages = pg_sys::RelationGetNumberOfBlocksInFork((*info).index, pg_sys::ForkNumber::MAIN_FORKNUM);
    stats
}
