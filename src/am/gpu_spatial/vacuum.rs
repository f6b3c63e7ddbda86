//! VACUUM: ambulkdelete walks the live structure (every leaf run and
//! chain the metapage reaches; pages a merge left behind are garbage and
//! skipped) under the structure lock, so no merge moves entries while it
//! runs; it removes dead entries a page at a time (one WAL record per
//! changed page), records the new counts, bumps the vacuum count when
//! tree pages changed (cached copies of the points are reloaded), then
//! merges the delta and any underfull leaves. amvacuumcleanup merges,
//! recycles the pages merges freed, and reports.

use super::page::*;
use super::page::{Exclusive, Shared};
use super::{chain, merge, shape};
use crate::storage::{recycle, Tid, Xlog};
use pgrx::pg_sys;
use std::collections::HashSet;

/// Removes the dead entries of one page; returns how many, and the next
/// page of its chain.
fn clean(index: pg_sys::Relation, block: u32, dead: &impl Fn(&Entry) -> bool) -> (u64, u32) {
    // SAFETY: called from VACUUM, which checks for interrupts here.
    unsafe { pg_sys::vacuum_delay_point() };
    {
        // Most pages lose nothing: look under a share lock first.
        let g = Shared::lock(index, block);
        let (e, s) = entries(g.page());
        if !e.iter().any(dead) {
            return (0, s.right);
        }
    }
    let g = Exclusive::lock(index, block);
    let (e, s) = entries(g.page());
    let kept: Vec<Entry> = e.iter().filter(|e| !dead(e)).copied().collect();
    let removed = (e.len() - kept.len()) as u64;
    let x = Xlog::start(index);
    set_entries(&mut x.register(&g, false), &kept);
    x.finish();
    (removed, s.right)
}

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead_tid: &dyn Fn(Tid) -> bool) {
    let dead = |e: &Entry| dead_tid(e.heap_tid());
    merge::lock_structure(index, true);
    let m = shape::meta(index);
    let s = shape::shape(index, &m);
    let mut tree_removed = 0u64;
    let mut touched = Vec::new();
    for (i, n) in s.nodes.iter().enumerate().filter(|(_, n)| n.is_leaf()) {
        let (mut removed, mut block) = (0, n.start);
        for _ in 0..n.count {
            let (r, next) = clean(index, block, &dead);
            removed += r;
            block = next;
        }
        if removed > 0 {
            touched.push(i as u32);
            tree_removed += removed;
        }
    }
    let mut chain_removed = [0u64; 3];
    for (k, c) in m.chains().iter().enumerate() {
        let mut block = c.head;
        while block != NONE {
            let (r, next) = clean(index, block, &dead);
            chain_removed[k] += r;
            block = next;
        }
    }
    let removed = tree_removed + chain_removed.iter().sum::<u64>();
    stats.tuples_removed += removed as f64;
    if removed > 0 {
        let g = Exclusive::lock(index, META_BLOCK);
        let x = Xlog::start(index);
        let mut p = x.register(&g, false);
        let mut now = read_meta(p.as_ref());
        now.tree_entries -= tree_removed.min(now.tree_entries);
        for (c, r) in [&mut now.delta, &mut now.frozen, &mut now.odd].into_iter().zip(chain_removed) {
            c.entries -= r.min(c.entries);
        }
        if tree_removed > 0 {
            now.vacuums += 1;
        }
        write_meta(&mut p, &now);
        x.finish();
    }
    merge::merge_locked(index, &touched);
    merge::unlock_structure(index);
}

/// After VACUUM: folds the delta (without dead rows bulk delete did not
/// run and merge), recycles freed pages, and counts the entries.
pub fn cleanup(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult) {
    merge::lock_structure(index, true);
    merge::merge_locked(index, &[]);
    stats.pages_free = recycle_pages(index) as u32;
    merge::unlock_structure(index);
    let m = shape::meta(index);
    stats.num_index_tuples = (m.tree_entries + m.chains().iter().map(|c| c.entries).sum::<u64>()) as f64;
    stats.estimated_count = false;
}

/// Under the structure lock (no merge runs, so no tree page is written or
/// freed meanwhile): reads every page; gives the free space map those
/// never initialised and the FREED ones no snapshot can reach any more;
/// flags FREED the pages nothing reaches that are not flagged yet (a merge
/// a crash or an ERROR cut short, before or after its metapage record).
/// Returns the pages now free.
fn recycle_pages(index: pg_sys::Relation) -> usize {
    // SAFETY: an open index relation.
    let nblocks = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let (mut free, mut unreached) = (0, Vec::new());
    for block in META_BLOCK + 1..nblocks {
        // SAFETY: VACUUM's cost-delay point, with no lock held.
        unsafe { pg_sys::vacuum_delay_point() };
        let g = Shared::lock(index, block);
        let page = g.page();
        if page.is_new() || freed_at(&page).is_some_and(recycle::removable) {
            recycle::record_free(index, block);
            free += 1;
        } else if freed_at(&page).is_none() {
            unreached.push(block);
        }
    }
    // What the structure reaches, read after every page above: a chain
    // page an insert added since was linked when it was written.
    let m = shape::meta(index);
    let mut live: HashSet<u32> = HashSet::new();
    if m.node_count > 0 {
        live.extend(shape::node_blocks(index, &m));
        for n in shape::shape(index, &m).nodes.iter().filter(|n| n.is_leaf()) {
            live.extend(shape::run_blocks(index, (n.start, n.count)));
        }
    }
    for c in m.chains() {
        live.extend(chain::chain_blocks(index, c));
    }
    unreached.retain(|b| !live.contains(b));
    merge::free_pages(index, &unreached);
    recycle::vacuum_fsm(index);
    free
}
