//! GTS's batch update: the delta (the cache list) and the tree's live
//! entries are built into a new tree, which replaces the old one in one
//! metapage record. Run by VACUUM (amvacuumcleanup), the only writer of
//! the tree, once the delta passes `delta_limit` pages; inserts go on
//! meanwhile (into a fresh delta), and so do scans (of the old tree and
//! the frozen delta until the switch, of the new tree after it).
//!
//! Crash safety: the frozen delta stays in the metapage until the switch
//! (scans read it, the next rebuild folds it); pages written before the
//! switch, or replaced by it but not flagged FREED yet, are unreachable,
//! and the `rebuilding` flag makes the next VACUUM find and free them.

use super::build::{write_tree, Writer};
use super::chain;
use super::page::*;
use super::page::{Exclusive, PageMut};
use super::shape;
use crate::storage::{recycle, Fork, Xlog};
use gpuindex_engine::gts::{Params, Tree, Vectors};
use pgrx::pg_sys;

/// Changes the metapage in one record.
pub fn update_meta(index: pg_sys::Relation, f: impl FnOnce(&mut Meta)) -> Meta {
    let g = Exclusive::lock(index, META_BLOCK);
    let x = Xlog::start(index);
    let mut p = x.register(&g, false);
    let mut m = read_meta(p.as_ref());
    f(&mut m);
    write_meta(&mut p, &m);
    x.finish();
    m
}

/// Every block of the tree `m` describes: nodes, pivots, leaf runs.
pub fn tree_blocks(index: pg_sys::Relation, m: &Meta) -> Vec<u32> {
    let mut out = chain::run_blocks(index, m.node_start);
    out.extend(chain::run_blocks(index, m.pivot_start));
    if m.node_start != NONE {
        let img = shape::shape(index, m);
        for leaf in img.shape.leaves() {
            out.extend(chain::run_blocks(index, img.shape.nodes[leaf].offset as u32));
        }
    }
    out
}

/// Flags pages FREED with the current safe xid, a few per record.
pub fn free_pages(index: pg_sys::Relation, blocks: &[u32]) {
    recycle::free_pages(index, blocks, |p: &mut PageMut, xid| {
        p.update_special(|s| {
            s.flags |= FREED;
            s.freed_at = xid;
        })
    });
}

/// Folds the delta into a new tree.
pub fn rebuild(index: pg_sys::Relation, fanout: usize) {
    // Freeze the delta (unless a rebuild a crash cut short left one
    // frozen), and give inserts a fresh one.
    {
        let meta = Exclusive::lock(index, META_BLOCK);
        let mut m = read_meta(meta.page());
        let fresh = (m.frozen.head == NONE).then(|| new_page(index));
        let x = Xlog::start(index);
        let mut mp = x.register(&meta, false);
        if let Some(f) = &fresh {
            x.register(f, true).init(special(KIND_CHAIN));
            m.frozen = m.delta;
            m.delta = Chain::at(f.block());
        }
        m.rebuilding = 1;
        write_meta(&mut mp, &m);
        x.finish();
    }
    let old = shape::meta(index);
    let dim = old.dim as usize;
    let mut v = Vectors::new(dim);
    let mut replaced = tree_blocks(index, &old);
    if old.node_start != NONE {
        let img = shape::shape(index, &old);
        for leaf in img.shape.leaves() {
            chain::for_run(index, dim, img.shape.nodes[leaf].offset as u32, |e| v.push(e.v, e.tid));
        }
    }
    chain::for_run(index, dim, old.frozen.head, |e| v.push(e.v, e.tid));
    replaced.extend(chain::run_blocks(index, old.frozen.head));
    // On the CPU even where there is a GPU: VACUUM (autovacuum's workers
    // above all) should not create a CUDA context, hundreds of MB of
    // device memory a process, for what all cores do in a fraction of a
    // second per million rows.
    let tree = Tree::build(shape::metric(&old), &v, Params { fanout });
    let mut new = old;
    write_tree(&Writer { index, fork: Fork::Main, logged: true }, &mut new, &tree, &v);
    drop((tree, v));
    update_meta(index, |m| {
        (m.node_start, m.pivot_start, m.node_count) = (new.node_start, new.pivot_start, new.node_count);
        (m.height, m.fanout, m.tree_entries) = (new.height, new.fanout, new.tree_entries);
        m.frozen = Chain::EMPTY;
        m.generation += 1;
        m.freed_pages += replaced.len() as u64;
    });
    free_pages(index, &replaced);
    update_meta(index, |m| m.rebuilding = 0);
}
