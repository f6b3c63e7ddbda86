//! VACUUM. ambulkdelete removes dead entries from every page the
//! structure reaches (leaf runs and chains), a page at a time, each with
//! the metapage's count in one record. amvacuumcleanup rebuilds the tree
//! once the delta passes `delta_limit` pages (`rebuild.rs`), then, if a
//! rebuild freed pages or was cut short, reads every page: FREED ones no
//! snapshot can reach go to the free space map, unreachable ones are
//! flagged FREED.

use super::page::*;
use super::page::{Exclusive, Shared};
use super::{chain, rebuild, shape};
use crate::storage::{recycle, Tid, Xlog};
use pgrx::pg_sys;
use std::collections::HashSet;

#[derive(Clone, Copy)]
enum Count {
    Tree,
    Delta,
    Frozen,
    Nulls,
}

/// Removes the dead entries of one page (of `dim` dimensions); returns
/// how many, and the next page.
fn clean(index: pg_sys::Relation, block: u32, dim: usize, dead: &dyn Fn(Tid) -> bool, count: Count) -> (u64, u32) {
    // SAFETY: VACUUM's cost-delay and interrupt point, no lock held.
    unsafe { pg_sys::vacuum_delay_point() };
    {
        let g = Shared::lock(index, block);
        let (mut e, s) = entries(g.page(), dim);
        if !e.any(|e| dead(e.tid)) {
            return (0, s.right);
        }
    }
    // The metapage first, as appends lock it before their tail page.
    let meta = Exclusive::lock(index, META_BLOCK);
    let g = Exclusive::lock(index, block);
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut p = x.register(&g, false);
    let (e, s) = entries(g.page(), dim);
    let mut kept = 0;
    for e in e.filter(|e| !dead(e.tid)) {
        put_entry(&mut p, dim, kept, &e);
        kept += 1;
    }
    let gone = s.count as u64 - kept as u64;
    truncate(&mut p, dim, kept);
    let mut m = read_meta(mp.as_ref());
    let counter = match count {
        Count::Tree => &mut m.tree_entries,
        Count::Delta => &mut m.delta.entries,
        Count::Frozen => &mut m.frozen.entries,
        Count::Nulls => &mut m.nulls.entries,
    };
    *counter -= gone.min(*counter);
    write_meta(&mut mp, &m);
    x.finish();
    (gone, s.right)
}

fn clean_run(index: pg_sys::Relation, mut block: u32, dim: usize, dead: &dyn Fn(Tid) -> bool, count: Count) -> u64 {
    let mut removed = 0;
    while block != NONE {
        let (r, next) = clean(index, block, dim, dead, count);
        removed += r;
        block = next;
    }
    removed
}

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
    let m = shape::meta(index);
    let dim = m.dim as usize;
    let mut removed = 0;
    if m.node_start != NONE {
        let img = shape::shape(index, &m);
        for leaf in img.shape.leaves() {
            removed += clean_run(index, img.shape.nodes[leaf].offset as u32, dim, dead, Count::Tree);
        }
    }
    removed += clean_run(index, m.delta.head, dim, dead, Count::Delta);
    removed += clean_run(index, m.frozen.head, dim, dead, Count::Frozen);
    removed += clean_run(index, m.nulls.head, 0, dead, Count::Nulls);
    stats.tuples_removed += removed as f64;
    if removed > 0 {
        rebuild::update_meta(index, |m| m.vacuums += 1);
    }
}

pub fn cleanup(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult) {
    let m = shape::meta(index);
    if m.dim > 0 && (m.delta.pages > super::options::delta_limit(index) || m.frozen.head != NONE) {
        rebuild::rebuild(index, super::options::fanout(index));
    }
    let m = shape::meta(index);
    if m.rebuilding != 0 || m.freed_pages > 0 {
        stats.pages_free = recycle_pages(index) as u32;
    }
    stats.num_index_tuples = shape::meta(index).entries() as f64;
    stats.estimated_count = false;
}

/// Reads every page: gives the free space map those never initialised and
/// the FREED ones no snapshot can reach; flags FREED those nothing reaches
/// (a rebuild cut short). Returns the pages now free.
fn recycle_pages(index: pg_sys::Relation) -> usize {
    // SAFETY: an open index relation.
    let nblocks = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let (mut free, mut waiting, mut unreached) = (0, 0u64, Vec::new());
    for block in META_BLOCK + 1..nblocks {
        // SAFETY: VACUUM's cost-delay point, with no lock held.
        unsafe { pg_sys::vacuum_delay_point() };
        let g = Shared::lock(index, block);
        let page = g.page();
        // A new page (all zeros: the relation extended just before a
        // crash) has no special area to read.
        let freed = if page.is_new() { None } else { freed_at(&page) };
        if page.is_new() || freed.is_some_and(recycle::removable) {
            recycle::record_free(index, block);
            free += 1;
        } else if freed.is_some() {
            waiting += 1;
        } else {
            unreached.push(block);
        }
    }
    // What the structure reaches, read after every page above: a chain
    // page an insert added since was linked when it was written.
    let m = shape::meta(index);
    let mut live: HashSet<u32> = rebuild::tree_blocks(index, &m).into_iter().collect();
    for c in [m.delta, m.frozen, m.nulls] {
        live.extend(chain::run_blocks(index, c.head));
    }
    unreached.retain(|b| !live.contains(b));
    rebuild::free_pages(index, &unreached);
    let waiting = waiting + unreached.len() as u64;
    rebuild::update_meta(index, |m| {
        m.freed_pages = waiting;
        m.rebuilding = 0;
    });
    recycle::vacuum_fsm(index);
    free
}
