//! Folding the delta into the tree with G-PICS's bulk update (the
//! engine's `plan_update` over the leaf pages): inserted points find their
//! leaves, overfull leaves split, underfull siblings merge, and only the
//! affected leaves are written. A leaf that only gained points and has
//! room in its run gets them appended in place; any other changed leaf
//! gets a new run, and its old run is left as it was (scans that began
//! before the merge may still read it).
//!
//! Concurrency, step by step:
//! 1. a heavyweight lock on the metapage's block keeps merges and VACUUM's
//!    bulk delete apart (inserts try it and skip the merge when it is
//!    taken);
//! 2. the delta is frozen: a new, empty delta takes the inserts, and scans
//!    read the frozen one beside the tree until the merge is done;
//! 3. leaves and nodes are written (WAL-logged, never over a page a scan
//!    of the old shape needs, except for appends);
//! 4. one metapage record switches to the new nodes and drops the frozen
//!    delta; the generation bump refreshes every backend's cached copy.
//!
//! A scan may meet an appended entry twice (in its leaf and in the frozen
//! delta): scans drop duplicate TIDs. After a crash between 3 and 4 the
//! next merge starts again from the frozen delta; entries already
//! appended are recognised by TID and neither added nor counted twice.

use super::page::*;
use super::page::{Exclusive, PageMut};
use super::shape;
use crate::am::common::{Access, OpenIndex};
use crate::storage::{recycle, Xlog};
use gpuindex_engine::gpics::tree::Node;
use gpuindex_engine::gpics::update::{plan_update, LeafData, LeafSource};
use gpuindex_engine::gpics::{Params, Points};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// Takes the structure lock (merges, bulk deletes); false if `wait` is
/// off and another backend holds it. Released at transaction end if an
/// ERROR leaves it held.
pub fn lock_structure(index: pg_sys::Relation, wait: bool) -> bool {
    // SAFETY: heavyweight page lock on an open relation.
    unsafe {
        if wait {
            pg_sys::LockPage(index, META_BLOCK, pg_sys::ExclusiveLock as i32);
            true
        } else {
            pg_sys::ConditionalLockPage(index, META_BLOCK, pg_sys::ExclusiveLock as i32)
        }
    }
}

pub fn unlock_structure(index: pg_sys::Relation) {
    // SAFETY: held by lock_structure.
    unsafe { pg_sys::UnlockPage(index, META_BLOCK, pg_sys::ExclusiveLock as i32) };
}

/// Folds the delta into the tree; None if another merge or a VACUUM holds
/// the structure and `wait` is off. Returns the entries merged.
pub fn merge(index: pg_sys::Relation, wait: bool) -> Option<u64> {
    if !lock_structure(index, wait) {
        return None;
    }
    let merged = merge_locked(index, &[]);
    unlock_structure(index);
    Some(merged)
}

/// Sets the metapage's `settled` (in a record of its own, where it
/// changes). Cleared before a merge writes a page: pages it frees, or
/// writes and leaves unreached when a crash or an ERROR cuts it short,
/// wait for VACUUM's pass over every page.
pub fn set_settled(index: pg_sys::Relation, settled: bool) {
    let meta = Exclusive::lock(index, META_BLOCK);
    let mut m = read_meta(meta.page());
    if (m.settled != 0) == settled {
        return;
    }
    m.settled = settled as u32;
    let x = Xlog::start(index);
    write_meta(&mut x.register(&meta, false), &m);
    x.finish();
}

/// Step 2: moves the delta to `frozen` (unless a crashed merge left one)
/// and starts an empty delta.
fn freeze(index: pg_sys::Relation) -> Meta {
    let meta = Exclusive::lock(index, META_BLOCK);
    let mut m = read_meta(meta.page());
    if m.frozen.head != NONE || m.delta.entries == 0 {
        return m;
    }
    let fresh = new_page(index);
    let x = Xlog::start(index);
    let mut fp = x.register(&fresh, true);
    fp.init(special(KIND_DELTA));
    set_entries(&mut fp, &[]);
    m.frozen = m.delta;
    m.delta = Chain::at(fresh.block());
    write_meta(&mut x.register(&meta, false), &m);
    x.finish();
    m
}

/// The leaf runs of the current tree as the engine's leaf source; keeps,
/// for each leaf it read, its entries and how many of them the metapage
/// counts: not those a merge cut short appended from the frozen delta
/// (`frozen`).
struct Pages<'a> {
    rel: pg_sys::Relation,
    nodes: &'a [Node],
    frozen: &'a HashSet<u64>,
    counted: RefCell<HashMap<u32, (usize, usize)>>,
}

impl Pages<'_> {
    fn read(&self, node: u32) -> Points {
        let n = &self.nodes[node as usize];
        let mut p = Points::default();
        let mut counted = 0;
        shape::for_run(self.rel, (n.start, n.count), |page| {
            for e in page {
                p.push(e.x, e.y, e.tid);
                counted += usize::from(!self.frozen.contains(&e.tid));
            }
        });
        self.counted.borrow_mut().insert(node, (p.len(), counted));
        p
    }
}

impl LeafSource for Pages<'_> {
    fn load(&self, nodes: &[u32]) -> Vec<Points> {
        nodes.iter().map(|&n| self.read(n)).collect()
    }
    fn count(&self, node: u32) -> usize {
        if let Some(&(c, _)) = self.counted.borrow().get(&node) {
            return c;
        }
        let n = &self.nodes[node as usize];
        let mut c = 0;
        shape::for_run(self.rel, (n.start, n.count), |page| c += page.len());
        c
    }
}

fn entries_of(p: &Points) -> Vec<Entry> {
    (0..p.len()).map(|i| Entry { x: p.x[i], y: p.y[i], tid: p.id[i] }).collect()
}

/// Writes `items` on a new run of pages of `kind` (recycled ones where the
/// free space map has them), WAL-logged: full images, four pages a record,
/// written last page first so that each links to the next; four buffer
/// locks at a time however long the run. Returns the first block and the
/// pages.
fn write_run<T: Copy>(
    index: pg_sys::Relation,
    kind: u8,
    items: &[T],
    per_page: usize,
    set: fn(&mut super::page::PageMut, &[T]),
) -> (u32, u32) {
    let chunks: Vec<&[T]> = if items.is_empty() { vec![&[][..]] } else { items.chunks(per_page).collect() };
    let mut next = NONE;
    for group in chunks.chunks(4).rev() {
        let pages: Vec<Exclusive> = group.iter().map(|_| new_page(index)).collect();
        let x = Xlog::start(index);
        for (i, (g, d)) in pages.iter().zip(group).enumerate() {
            let mut p = x.register(g, true);
            let mut sp = special(kind);
            sp.right = pages.get(i + 1).map_or(next, |n| n.block());
            p.init(sp);
            set(&mut p, d);
        }
        x.finish();
        next = pages[0].block();
    }
    (next, chunks.len() as u32)
}

/// Flags `blocks` FREED with the safe xid of now (four pages a record):
/// scans that read the shape before may still read them; VACUUM recycles
/// them once no snapshot is that old.
pub fn free_pages(index: pg_sys::Relation, blocks: &[u32]) {
    recycle::free_pages(index, blocks, |p: &mut PageMut, xid| {
        p.update_special(|s| {
            s.flags |= FREED;
            s.freed_at = xid;
        })
    });
}

/// Appends the points of `p` that the run does not hold yet (by TID) to
/// its free slots, in place. False, changing nothing, if they do not fit.
fn append_in_place(index: pg_sys::Relation, run: (u32, u32), p: &Points) -> bool {
    let mut have = HashSet::new();
    let mut used = 0usize;
    let mut blocks = Vec::with_capacity(run.1 as usize);
    shape::for_run_pages(index, run, |b, page| {
        blocks.push(b);
        used += page.len();
        have.extend(page.iter().map(|e| e.tid));
    });
    let new: Vec<Entry> = entries_of(p).into_iter().filter(|e| !have.contains(&e.tid)).collect();
    if used + new.len() > run.1 as usize * ENTRY_CAPACITY {
        return false;
    }
    let mut rest = &new[..];
    for b in blocks {
        if rest.is_empty() {
            break;
        }
        let g = Exclusive::lock(index, b);
        let (now, _) = entries(g.page());
        let room = ENTRY_CAPACITY - now.len();
        if room == 0 {
            continue;
        }
        let take = room.min(rest.len());
        let mut all = now.to_vec();
        all.extend_from_slice(&rest[..take]);
        let x = Xlog::start(index);
        set_entries(&mut x.register(&g, false), &all);
        x.finish();
        rest = &rest[take..];
    }
    true
}

/// Steps 2 to 4 under the structure lock; `touched` are leaves VACUUM
/// emptied some (checked for merging). Returns the entries merged.
pub fn merge_locked(index: pg_sys::Relation, touched: &[u32]) -> u64 {
    let m = freeze(index);
    if m.frozen.head == NONE && touched.is_empty() {
        return 0;
    }
    set_settled(index, false);
    let mut inserts = Points::default();
    super::chain::for_chain(index, m.frozen, |page| {
        for e in page {
            inserts.push(e.x, e.y, e.tid);
        }
    });
    let params = Params { mc: m.mc as usize, mh: m.mh as usize };
    let s = shape::shape(index, &m);
    let frozen: HashSet<u64> = inserts.id.iter().copied().collect();
    let src = Pages { rel: index, nodes: &s.nodes, frozen: &frozen, counted: RefCell::new(HashMap::new()) };
    let (nodes, tree_entries) = match plan_update(&s.nodes, params, &inserts, touched, &src) {
        Ok(plan) => {
            let mut nodes = plan.nodes;
            let mut total = m.tree_entries as i64;
            for &(_, counted) in src.counted.borrow().values() {
                total -= counted as i64; // every loaded leaf is rewritten or merged away
            }
            for n in nodes.iter_mut().filter(|n| n.is_leaf()) {
                match &plan.leaves[n.leaf as usize - 1] {
                    LeafData::Keep(o) => (n.start, n.count) = (s.nodes[*o as usize].start, s.nodes[*o as usize].count),
                    LeafData::New { points, origin } => {
                        let mut e = entries_of(points);
                        e.sort_unstable_by_key(|e| e.tid);
                        e.dedup_by_key(|e| e.tid);
                        total += e.len() as i64;
                        let old = origin.map(|o| (s.nodes[o as usize].start, s.nodes[o as usize].count));
                        match old {
                            Some(run) if append_in_place(index, run, points) => (n.start, n.count) = run,
                            _ => (n.start, n.count) = write_run(index, KIND_LEAF, &e, ENTRY_CAPACITY, set_entries),
                        }
                    }
                }
            }
            (nodes, total.max(0) as u64)
        }
        // No tree yet, or a point the root cannot grow to: build anew.
        Err(_) => {
            let mut all = Points::default();
            // (A merge cut short on this path appended nothing: the same
            // tree and frozen delta led it here too.)
            for i in (0..s.nodes.len()).filter(|&i| s.nodes[i].is_leaf()) {
                let p = src.read(i as u32);
                all.x.extend_from_slice(&p.x);
                all.y.extend_from_slice(&p.y);
                all.id.extend_from_slice(&p.id);
            }
            all.x.extend_from_slice(&inserts.x);
            all.y.extend_from_slice(&inserts.y);
            all.id.extend_from_slice(&inserts.id);
            let tree = super::build::build_tree(&all, params);
            let mut nodes = tree.nodes.clone();
            for &l in &tree.leaves {
                let n = &mut nodes[l as usize];
                let e = entries_of(&Points {
                    x: tree.pts.x[n.start as usize..(n.start + n.count) as usize].to_vec(),
                    y: tree.pts.y[n.start as usize..(n.start + n.count) as usize].to_vec(),
                    id: tree.pts.id[n.start as usize..(n.start + n.count) as usize].to_vec(),
                });
                (n.start, n.count) = write_run(index, KIND_LEAF, &e, ENTRY_CAPACITY, set_entries);
            }
            (nodes, tree.pts.len() as u64)
        }
    };
    let (node_start, _) = write_run(index, KIND_NODES, &nodes, NODE_CAPACITY, set_nodes);
    if crate::guc::DEBUG_INTERRUPT_MERGES.get() {
        error!("gpu_spatial merge interrupted before its metapage record (gpuindex.debug_interrupt_merges)");
    }
    // Step 4.
    let meta = Exclusive::lock(index, META_BLOCK);
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut now = read_meta(mp.as_ref());
    now.node_start = node_start;
    now.node_count = nodes.len() as u32;
    now.leaf_count = nodes.iter().filter(|n| n.is_leaf()).count() as u32;
    now.tree_entries = tree_entries;
    now.generation += 1;
    now.frozen = Chain::EMPTY;
    write_meta(&mut mp, &now);
    x.finish();
    drop(meta);
    // What the old shape reached and the new one does not: replaced leaf
    // runs, the old node run, the merged delta.
    let live: HashSet<u32> = nodes.iter().filter(|n| n.is_leaf()).map(|n| n.start).collect();
    let mut freed = Vec::new();
    for n in s.nodes.iter().filter(|n| n.is_leaf() && !live.contains(&n.start)) {
        freed.extend(shape::linked_blocks(index, n.start, Some(n.count)));
    }
    if m.node_count > 0 {
        freed.extend(shape::node_blocks(index, &m));
    }
    freed.extend(shape::linked_blocks(index, m.frozen.head, None));
    free_pages(index, &freed);
    m.frozen.entries
}

/// `gpu_spatial_merge(index)`: folds the index's delta into its tree now
/// (waiting for a running merge or VACUUM); returns the entries merged.
/// Only the table's owner may (as for REINDEX).
#[pg_extern(
    volatile,
    parallel_unsafe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_merge(index regclass) RETURNS bigint
    VOLATILE PARALLEL UNSAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_merge(index: pg_sys::Oid) -> i64 {
    // RowExclusiveLock, as inserts take: merges run beside them.
    let open = OpenIndex::open(index, "gpu_spatial", Access::Maintain, pg_sys::RowExclusiveLock as i32);
    merge(open.index, true).unwrap_or(0) as i64
}
