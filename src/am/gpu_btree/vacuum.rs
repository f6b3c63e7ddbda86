//! VACUUM: ambulkdelete removes the entries of dead heap tuples, leaf by
//! leaf and NULL page by NULL page (one WAL record per changed page; each
//! page under a cleanup lock, which waits for index-only scans' pins), and
//! deletes the leaves and NULL pages it leaves empty, with the inner pages
//! left without children (`delete.rs`); amvacuumcleanup, while deleted
//! pages wait, reads every page, gives those no snapshot can reach any
//! more to the free space map and finishes deletions a crash cut short.

use super::delete;
use super::page::Exclusive;
use super::page::*;
use super::tree::Tree;
use crate::storage::{recycle, Xlog};
use pgrx::pg_sys;

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
    let tree = Tree::new(index);
    let m = tree.meta();
    let (mut removed, mut kept) = (0f64, 0f64);
    let mut block = m.leftmost[0];
    while block != NONE {
        // SAFETY: VACUUM's interrupt and cost-delay check.
        unsafe { pg_sys::vacuum_delay_point() };
        let page = Exclusive::lock_for_cleanup(index, block);
        let l = Leaf::new(page.page());
        let (keys, tids): (Vec<u64>, Vec<Tid>) = l.entries(0, l.count()).filter(|&(_, t)| !dead(t)).unzip();
        removed += (l.count() - keys.len()) as f64;
        kept += keys.len() as f64;
        let (next, half_dead) = (if l.rightmost() { NONE } else { l.s.right }, l.s.flags & HALF_DEAD != 0);
        if keys.len() != l.count() {
            let x = Xlog::start(index);
            leaf_set(&mut x.register(&page, false), &keys, &tids);
            x.finish();
        }
        if half_dead {
            drop(page);
            stats.pages_newly_deleted += delete::unlink(&tree, block);
        } else if keys.is_empty() {
            stats.pages_newly_deleted += delete::delete_empty_leaf(&tree, page);
        }
        block = next;
    }
    // The NULL chain; `prev` is the last page kept before `block`.
    let (mut block, mut prev) = (m.null_head, NONE);
    while block != NONE {
        // SAFETY: VACUUM's interrupt and cost-delay check.
        unsafe { pg_sys::vacuum_delay_point() };
        let page = Exclusive::lock_for_cleanup(index, block);
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
        drop(page);
        if tids.is_empty() && next != NONE && delete::delete_empty_null_page(&tree, prev, block) {
            stats.pages_newly_deleted += 1;
        } else {
            prev = block;
        }
        block = next;
    }
    stats.tuples_removed += removed;
    stats.num_index_tuples = kept;
}

/// While deleted pages wait (this VACUUM deleted some, or the metapage
/// counts some from before), reads every page: records in the free space
/// map the deleted ones no snapshot can reach any more, and pages never
/// initialised (an extension a crash cut short), and finishes the
/// deletions a crash left half-done (half-dead leaves: a VACUUM without
/// dead rows never reaches them through `bulk_delete`); the metapage
/// keeps the count of those still waiting.
pub fn recycle_pages(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult) {
    let tree = Tree::new(index);
    let waiting = tree.meta().deleted_pages;
    if waiting == 0 && stats.pages_newly_deleted == 0 {
        return;
    }
    // SAFETY: an open relation.
    let nblocks = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let (mut deleted, mut free, mut still) = (0u32, 0u32, 0u32);
    let mut half_dead = Vec::new();
    for block in 1..nblocks {
        // SAFETY: VACUUM's interrupt and cost-delay check.
        unsafe { pg_sys::vacuum_delay_point() };
        let g = Shared::lock(index, block);
        let page = g.page();
        // A new page (all zeros: the relation extended just before a
        // crash) is free, and has no special area to read.
        let (is_deleted, recyclable) = match page.is_new() {
            true => (false, true),
            false => deleted_xid(&page).map_or((false, false), |x| (true, recycle::removable(x))),
        };
        if !is_deleted && !page.is_new() {
            let s = page.special();
            if s.page_id == PAGE_ID && s.kind == KIND_LEAF && s.flags & HALF_DEAD != 0 {
                half_dead.push(block);
            }
        }
        drop(g);
        deleted += is_deleted as u32;
        still += (is_deleted && !recyclable) as u32;
        if recyclable {
            free += 1;
            recycle::record_free(index, block);
        }
    }
    recycle::vacuum_fsm(index);
    if crate::guc::DEBUG_INTERRUPT_PAGE_DELETION.get() {
        still += half_dead.len() as u32; // left for the next VACUUM
    } else {
        for block in half_dead {
            let n = delete::unlink(&tree, block);
            (deleted, still) = (deleted + n, still + n);
            stats.pages_newly_deleted += n;
        }
    }
    stats.pages_deleted = deleted;
    stats.pages_free = free;
    if still != waiting {
        let meta = Exclusive::lock(index, META_BLOCK);
        let x = Xlog::start(index);
        let mut mp = x.register(&meta, false);
        let mut m = read_meta(mp.as_ref());
        m.deleted_pages = still;
        write_meta(&mut mp, &m);
        x.finish();
    }
}
