//! Merging the delta into the run: VACUUM does it when the delta holds at
//! least an eighth of the run's entries (and 1024), `gpu_learned_merge`
//! when asked. The run's live entries and the delta's, read in key order
//! (two sorted streams: no heap scan, no sort), become a new run with a
//! new model; one WAL record then switches the run metapage to it, bumping
//! the generation, and gives the delta a new empty root.
//!
//! - Writers wait: the merge holds ShareRowExclusiveLock on the index
//!   while it runs, which every inserter's RowExclusiveLock conflicts with
//!   (VACUUM only takes it when free, and merges another time otherwise);
//!   readers go on. A scan reads the run and the delta of one generation (it reads
//!   the generation before and after it starts on the delta, `scan.rs`),
//!   and goes on reading that generation's pages, which the switch leaves
//!   intact.
//! - The replaced pages are freed as nbtree frees deleted pages: the old
//!   delta's are marked retired at a safe xid (contents untouched) and
//!   recycled by VACUUM through the free space map once no snapshot can
//!   reach them; the old run's extents are listed as retired in the run
//!   metapage, and the next merge writes its run into them once their safe
//!   xid is removable, after a reuse record that makes standbys cancel
//!   queries that could still read them.
//! - A crash before the switch leaves the new run's pages unreferenced (the
//!   retired extents are written again next time; pages added at the end
//!   stay unused until a REINDEX); a crash after it, before every old delta
//!   page is marked, leaves the unmarked ones unused the same way. Nothing
//!   the index answers from is touched before the switch.

use super::build::{write_run, PageSink};
use super::page::*;
use super::run;
use crate::am::common::{Access, OpenIndex};
use crate::am::gpu_btree::page::*;
use crate::am::gpu_btree::tree::Tree;
use crate::storage::{recycle, RecentPages, Tid, Xlog};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::iter::Peekable;

/// VACUUM merges a delta of at least run entries / MERGE_FRACTION...
const MERGE_FRACTION: u64 = 8;
/// ... and at least this many entries.
const MERGE_MIN: u64 = 1024;

/// The delta metapage's generation jumps by this at a merge, past any drift
/// a cached mirror of the inner levels tolerates (`mirror::get`): no hint
/// of the replaced delta is used again.
const MIRROR_GENERATION_JUMP: u64 = 1 << 32;

/// Blocks of every page of the delta's key levels (leftmost pages and
/// right links; the NULL chain is not the key tree's and stays).
fn tree_pages(index: pg_sys::Relation, m: &Meta) -> Vec<u32> {
    let mut pages = Vec::new();
    for level in 0..=m.root_level as usize {
        let mut block = m.leftmost[level];
        while block != NONE {
            pages.push(block);
            let s = Shared::lock(index, block).page().special();
            block = if s.flags & RIGHTMOST != 0 { NONE } else { s.right };
        }
    }
    pages
}

/// Entries in the delta's leaves (a walk of level 0).
fn delta_entries(index: pg_sys::Relation, m: &Meta) -> u64 {
    let (mut n, mut block) = (0u64, m.leftmost[0]);
    while block != NONE {
        let s = Shared::lock(index, block).page().special();
        n += if is_dead(&s) { 0 } else { s.count as u64 };
        block = if s.flags & RIGHTMOST != 0 { NONE } else { s.right };
    }
    n
}

/// The entries of a sequence of pages in key order, a page at a time.
fn paged<F: FnMut(usize) -> Option<Vec<(u64, Tid)>>>(mut page: F) -> impl Iterator<Item = (u64, Tid)> {
    let mut i = 0;
    std::iter::from_fn(move || {
        let items = page(i)?;
        i += 1;
        Some(items)
    })
    .flatten()
}

/// Two ascending streams in one order, the first's first on ties.
struct Merged<A: Iterator<Item = (u64, Tid)>, B: Iterator<Item = (u64, Tid)>>(Peekable<A>, Peekable<B>);

impl<A: Iterator<Item = (u64, Tid)>, B: Iterator<Item = (u64, Tid)>> Iterator for Merged<A, B> {
    type Item = (u64, Tid);
    fn next(&mut self) -> Option<(u64, Tid)> {
        match (self.0.peek(), self.1.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => self.1.next(),
            (Some(_), _) => self.0.next(),
            (None, _) => self.1.next(),
        }
    }
}

/// A merge's pages: the retired extents when their safe xid is removable
/// (one reuse record before the first is written, for standbys), then new
/// ones at the end of the relation. Each page is logged whole.
struct MergePages {
    index: pg_sys::Relation,
    usable: bool,
    spare: std::vec::IntoIter<u32>,
    reuse_logged: bool,
    xid: u64,
    /// Retired extents past what the new run's extents may hold.
    left: Vec<[u32; 2]>,
}

impl PageSink for MergePages {
    fn write(&mut self, fill: &dyn Fn(&mut PageMut)) -> u32 {
        let g = match self.spare.next() {
            Some(b) => {
                if !self.reuse_logged {
                    recycle::log_reuse(self.index, b, self.xid);
                    self.reuse_logged = true;
                }
                Exclusive::lock(self.index, b)
            }
            None => crate::storage::new_page(self.index),
        };
        let x = Xlog::start(self.index);
        fill(&mut x.register(&g, true));
        x.finish();
        g.block()
    }
}

impl MergePages {
    fn new(index: pg_sys::Relation, rm: &RunMeta) -> MergePages {
        let usable = rm.retired_xid != 0 && recycle::removable(rm.retired_xid);
        let mut spare: Vec<[u32; 2]> = if usable { rm.retired().to_vec() } else { Vec::new() };
        spare.sort_unstable();
        // The new run's extents: these and one at the end.
        let left = spare.split_off(spare.len().min(MAX_EXTENTS - 1));
        let blocks: Vec<u32> = spare.iter().flat_map(|e| e[0]..e[0] + e[1]).collect();
        MergePages { index, usable, spare: blocks.into_iter(), reuse_logged: false, xid: rm.retired_xid, left }
    }

    /// The retired list after the merge: the retired extents not written
    /// (all of them when they were not usable yet) and the replaced run's,
    /// joined where adjacent; past MAX_EXTENTS the smallest are dropped
    /// (left unused until a REINDEX).
    fn retired(self, old: &RunMeta) -> Vec<[u32; 2]> {
        let mut all = Vec::new();
        if self.usable {
            self.spare.for_each(|b| push_block(&mut all, b));
            all.extend(self.left);
        } else {
            all.extend_from_slice(old.retired());
        }
        all.extend_from_slice(old.extents());
        all.sort_unstable();
        let mut joined: Vec<[u32; 2]> = Vec::with_capacity(all.len());
        for e in all {
            match joined.last_mut() {
                Some(l) if l[0] + l[1] == e[0] => l[1] += e[1],
                _ => joined.push(e),
            }
        }
        if joined.len() > MAX_EXTENTS {
            joined.sort_unstable_by_key(|e| std::cmp::Reverse(e[1]));
            joined.truncate(MAX_EXTENTS);
            joined.sort_unstable();
        }
        joined
    }
}

/// Merges the delta of `index` into a new run (the caller holds
/// MERGE_LOCK on it); returns the delta entries moved.
fn merge(index: pg_sys::Relation) -> u64 {
    let tree = Tree::new(index);
    let m = tree.meta();
    let old_pages = tree_pages(index, &m);
    let run = run::get(index);
    if old_pages.len() == 1 && delta_entries(index, &m) == 0 {
        return 0;
    }
    let recent = &mut RecentPages::of(index);
    let live = paged(|i| {
        (i < run.pages()).then(|| {
            let g = run.page(recent, i);
            let p = RunPage::new(g.page());
            let mut live = Vec::with_capacity(p.count());
            p.copy_live(0, p.count(), &mut live);
            live
        })
    });
    let moved = Cell::new(0u64);
    let mut leaf = m.leftmost[0];
    let delta = paged(|_| {
        (leaf != NONE).then(|| {
            // SAFETY: VACUUM's (and a function's) interrupt and cost-delay check.
            unsafe { pg_sys::vacuum_delay_point() };
            let g = Shared::lock(index, leaf);
            let l = Leaf::new(g.page());
            leaf = if l.rightmost() { NONE } else { l.s.right };
            let items: Vec<(u64, Tid)> = if is_dead(&l.s) { Vec::new() } else { l.entries(0, l.count()).collect() };
            moved.set(moved.get() + items.len() as u64);
            items
        })
    });
    let mut sink = MergePages::new(index, &run.meta);
    let mut rm = write_run(&mut sink, Merged(live.peekable(), delta.peekable()));
    let retired = sink.retired(&run.meta);
    let new_root = new_page(index);

    // The switch: the new run, the retired extents, and an empty delta.
    let xid = recycle::safe_xid_now();
    rm.generation = run.meta.generation + 1;
    rm.retired_xid = xid;
    assert!(set_extents(&mut rm.retired, &mut rm.nretired, &retired));
    {
        // The old root first: a descent from a cached root holds that page
        // while it reads the metapage.
        let old_root = Exclusive::lock(index, m.root);
        let run_meta = Exclusive::lock(index, RUN_META_BLOCK);
        let meta = Exclusive::lock(index, META_BLOCK);
        let x = Xlog::start(index);
        init_run_meta(&mut x.register(&run_meta, false), rm);
        let mut mp = x.register(&meta, false);
        let mut dm = read_meta(mp.as_ref());
        dm.root = new_root.block();
        dm.root_level = 0;
        dm.leftmost = [NONE; MAX_LEVELS];
        dm.leftmost[0] = dm.root;
        dm.generation += MIRROR_GENERATION_JUMP;
        dm.deleted_pages += old_pages.len() as u32;
        write_meta(&mut mp, &dm);
        let mut root = x.register(&new_root, true);
        root.init(special(KIND_LEAF, 0, LEFTMOST | RIGHTMOST, 0, u64::MAX));
        leaf_set(&mut root, &[], &[]);
        // Retired in the same record: a backend's cached root (a descent
        // that skips the metapage) is checked against this under its lock.
        set_retired(&mut x.register(&old_root, false), xid);
        x.finish();
    }
    drop(new_root);
    // The old delta's other pages, one record each (a scan may hold one).
    for &b in old_pages.iter().filter(|&&b| b != m.root) {
        let g = Exclusive::lock(index, b);
        let x = Xlog::start(index);
        set_retired(&mut x.register(&g, false), xid);
        x.finish();
    }
    moved.get()
}

/// VACUUM's merge: when the delta is large enough and no writer holds the
/// index (else the next VACUUM tries again).
pub fn merge_if_due(index: pg_sys::Relation) {
    let m = Tree::new(index).meta();
    let due = (run::get(index).n() as u64 / MERGE_FRACTION).max(MERGE_MIN);
    // SAFETY: a lock on an open relation.
    if delta_entries(index, &m) >= due && unsafe { pg_sys::ConditionalLockRelation(index, MERGE_LOCK) } {
        merge_locked(index);
    }
}

/// The lock a merge holds: every inserter's RowExclusiveLock conflicts
/// with it, and so does another merge's; readers' AccessShareLock not.
const MERGE_LOCK: pg_sys::LOCKMODE = pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE;

/// `merge` under MERGE_LOCK, taken by the caller; released at once after
/// (the merge is complete and logged), so that writers wait for the
/// merge only, not for the rest of the caller's transaction.
fn merge_locked(index: pg_sys::Relation) -> u64 {
    let moved = merge(index);
    // SAFETY: the lock the caller took on this open relation.
    unsafe { pg_sys::UnlockRelation(index, MERGE_LOCK) };
    moved
}

#[pg_extern(
    volatile,
    strict,
    sql = "CREATE FUNCTION gpu_learned_merge(index regclass) RETURNS bigint
    VOLATILE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_learned_merge(index: pg_sys::Oid) -> i64 {
    let open = OpenIndex::open(index, "gpu_learned", Access::Maintain, pg_sys::AccessShareLock as i32);
    // SAFETY: a lock on an open relation.
    unsafe { pg_sys::LockRelation(open.index, MERGE_LOCK) };
    merge_locked(open.index) as i64
}
