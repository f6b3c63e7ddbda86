//! VACUUM: ambulkdelete removes the entries of dead rows from every leaf
//! and delta page in one pass over the relation (a page at a time, one
//! WAL record per changed page); the metapage then records the new counts
//! and, when tree pages changed, bumps the vacuum count so that cached
//! copies of the points are reloaded. amvacuumcleanup reports the counts.

use super::page::*;
use crate::storage::{tid_to, Exclusive, Shared, Xlog};
use pgrx::pg_sys;
use pgrx::prelude::*;

fn nblocks(index: pg_sys::Relation) -> u32 {
    // SAFETY: an open index relation.
    unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) }
}

fn stats_or_new(stats: *mut pg_sys::IndexBulkDeleteResult) -> &'static mut pg_sys::IndexBulkDeleteResult {
    // SAFETY: palloc0'd in the vacuum's context when absent, as the AMs do.
    unsafe {
        if stats.is_null() {
            &mut *(pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBulkDeleteResult>()) as *mut pg_sys::IndexBulkDeleteResult)
        } else {
            &mut *stats
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let index = (*info).index;
    let stats = stats_or_new(stats);
    let dead = |e: &Entry| {
        let mut t = tid_to(e.heap_tid());
        callback.expect("bulk-delete callback")(&mut t, callback_state)
    };
    let (mut tree_removed, mut delta_removed) = (0u64, 0u64);
    for block in 1..nblocks(index) {
        pg_sys::vacuum_delay_point();
        // Most pages lose nothing: look under a share lock first.
        let kind = {
            let g = Shared::lock(index, block);
            let s = g.page().special();
            if !matches!(s.kind, KIND_LEAF | KIND_DELTA) || !entries(g.page()).0.iter().any(dead) {
                continue;
            }
            s.kind
        };
        let g = Exclusive::lock(index, block);
        let kept: Vec<Entry> = entries(g.page()).0.iter().filter(|e| !dead(e)).copied().collect();
        let removed = (g.page().special().count as usize - kept.len()) as u64;
        let x = Xlog::start(index);
        set_entries(&mut x.register(&g, false), &kept);
        x.finish();
        if kind == KIND_LEAF {
            tree_removed += removed;
        } else {
            delta_removed += removed;
        }
    }
    stats.tuples_removed += (tree_removed + delta_removed) as f64;
    if tree_removed + delta_removed > 0 {
        let g = Exclusive::lock(index, META_BLOCK);
        let x = Xlog::start(index);
        let mut p = x.register(&g, false);
        let mut m = read_meta(p.as_ref());
        m.tree_entries -= tree_removed.min(m.tree_entries);
        m.delta_entries -= delta_removed.min(m.delta_entries);
        if tree_removed > 0 {
            m.vacuums += 1;
        }
        write_meta(&mut p, &m);
        x.finish();
    }
    stats as *mut _
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    if (*info).analyze_only {
        return stats;
    }
    let index = (*info).index;
    let stats = stats_or_new(stats);
    let m = super::shape::meta(index);
    stats.num_pages = nblocks(index);
    stats.num_index_tuples = (m.tree_entries + m.delta_entries) as f64;
    stats.estimated_count = false;
    stats as *mut _
}
