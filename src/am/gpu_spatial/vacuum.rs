//! VACUUM: ambulkdelete walks the live structure (every leaf run and
//! chain the metapage reaches; pages a merge left behind are garbage and
//! skipped) under the structure lock, so no merge moves entries while it
//! runs; it removes dead entries a page at a time (one WAL record per
//! changed page, with the metapage's counts), then bumps the vacuum count
//! (the epoch: cached copies of the points are reloaded, and index-only
//! scans that may have read a removed entry are waited for), then merges
//! the delta and any underfull leaves. amvacuumcleanup merges, recycles
//! the pages merges freed, and reports.

use super::page::*;
use super::page::{Exclusive, Shared};
use super::{chain, interlock, merge, shape};
use crate::storage::{recycle, Tid, Xlog};
use pgrx::pg_sys;
use std::collections::HashSet;

/// The metapage count a page's entries are in.
#[derive(Clone, Copy)]
enum Count {
    Tree,
    Delta,
    Frozen,
    Odd,
}

/// Removes the dead entries of one page, and takes them off the
/// metapage's count in the same record (a crash between pages leaves the
/// counts right). Entries of the tree that are also in the frozen delta
/// (`frozen`: appended by a merge a crash cut short) are not in the
/// tree's count. Returns how many it removed, and the next page.
fn clean(index: pg_sys::Relation, block: u32, dead: &impl Fn(&Entry) -> bool, count: Count, frozen: &HashSet<u64>) -> (u64, u32) {
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
    // The metapage first, as appends lock it before their tail page.
    let meta = Exclusive::lock(index, META_BLOCK);
    let g = Exclusive::lock(index, block);
    let (e, s) = entries(g.page());
    let (gone, kept): (Vec<Entry>, Vec<Entry>) = e.iter().copied().partition(|e| dead(e));
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut m = read_meta(mp.as_ref());
    let (counter, n) = match count {
        Count::Tree => (&mut m.tree_entries, gone.iter().filter(|e| !frozen.contains(&e.tid)).count()),
        Count::Delta => (&mut m.delta.entries, gone.len()),
        Count::Frozen => (&mut m.frozen.entries, gone.len()),
        Count::Odd => (&mut m.odd.entries, gone.len()),
    };
    *counter -= (n as u64).min(*counter);
    write_meta(&mut mp, &m);
    set_entries(&mut x.register(&g, false), &kept);
    x.finish();
    (gone.len() as u64, s.right)
}

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead_tid: &dyn Fn(Tid) -> bool) {
    let dead = |e: &Entry| dead_tid(e.heap_tid());
    merge::lock_structure(index, true);
    let m = shape::meta(index);
    let s = shape::shape(index, &m);
    let mut frozen = HashSet::new();
    chain::for_chain(index, m.frozen, |page| frozen.extend(page.iter().map(|e| e.tid)));
    let mut removed = 0u64;
    let mut touched = Vec::new();
    for (i, n) in s.nodes.iter().enumerate().filter(|(_, n)| n.is_leaf()) {
        let (mut from_leaf, mut block) = (0, n.start);
        for _ in 0..n.count {
            let (r, next) = clean(index, block, &dead, Count::Tree, &frozen);
            from_leaf += r;
            block = next;
        }
        if from_leaf > 0 {
            touched.push(i as u32);
            removed += from_leaf;
        }
    }
    for (c, count) in m.chains().into_iter().zip([Count::Delta, Count::Frozen, Count::Odd]) {
        let mut block = c.head;
        while block != NONE {
            let (r, next) = clean(index, block, &dead, count, &frozen);
            removed += r;
            block = next;
        }
    }
    stats.tuples_removed += removed as f64;
    if removed > 0 {
        // A new epoch: cached copies of the points are reloaded, and
        // index-only scans that may have read a removed entry are waited
        // for (interlock.rs).
        let g = Exclusive::lock(index, META_BLOCK);
        let x = Xlog::start(index);
        let mut p = x.register(&g, false);
        let mut now = read_meta(p.as_ref());
        now.vacuums += 1;
        write_meta(&mut p, &now);
        x.finish();
        drop(g);
        interlock::wait_for_scans(index, now.vacuums - 1);
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
/// Skipped while the metapage says `settled` (no page waited at the last
/// pass and no merge has written since; as for gpu_btree, a page an
/// extension a crash cut short left uninitialised waits for a later pass).
/// Returns the pages now free.
fn recycle_pages(index: pg_sys::Relation) -> usize {
    if shape::meta(index).settled != 0 {
        return 0;
    }
    // SAFETY: an open index relation.
    let nblocks = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let (mut free, mut waiting, mut unreached) = (0, 0, Vec::new());
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
        } else {
            waiting += 1;
        }
    }
    // What the structure reaches, read after every page above: a chain
    // page an insert added since was linked when it was written.
    let m = shape::meta(index);
    let mut live: HashSet<u32> = HashSet::new();
    if m.node_count > 0 {
        live.extend(shape::node_blocks(index, &m));
        for n in shape::shape(index, &m).nodes.iter().filter(|n| n.is_leaf()) {
            live.extend(shape::linked_blocks(index, n.start, Some(n.count)));
        }
    }
    for c in m.chains() {
        live.extend(shape::linked_blocks(index, c.head, None));
    }
    unreached.retain(|b| !live.contains(b));
    merge::free_pages(index, &unreached);
    recycle::vacuum_fsm(index);
    if waiting + unreached.len() == 0 {
        merge::set_settled(index, true);
    }
    free
}
