//! The HB+-tree side of gpu_btree: a compact copy of the inner levels,
//! built from the lowest inner level's (high key, leaf) entries into the
//! engine's implicit I-segment, cached per backend by (index, generation),
//! mirrored on the GPU at first use. A batch of probes goes through the
//! batch executor (GPU or CPU) to leaf hints; the leaf step then reads the
//! leaf pages in this backend. Every hint is checked against the page's
//! fence keys, so a stale mirror costs right-moves, never answers.

use super::page::*;
use super::tree::Tree;
use crate::storage::Shared;
use gpuindex_engine::executor::BatchJob;
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::hbtree::implicit::ImplicitInner;
use gpuindex_engine::hbtree::leaf::{self, LeafLevel};
use gpuindex_engine::hbtree::line::lower_bound;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

pub struct Mirror {
    relfilenode: pg_sys::Oid,
    pub generation: u64,
    /// Leaf block of each leaf number of the inner segment.
    pub blocks: Vec<u32>,
    pub inner: ImplicitInner,
}

thread_local! {
    static CACHE: RefCell<HashMap<pg_sys::Oid, Arc<Mirror>>> = RefCell::new(HashMap::new());
}

fn relfilenode(rel: pg_sys::Relation) -> pg_sys::Oid {
    // SAFETY: an open relation's physical identifier.
    unsafe { (*rel).rd_node.relNode }
}

/// The mirror of `tree`'s index: the cached one while its generation is
/// close enough to the metapage's (a few splits behind only costs
/// right-moves), else rebuilt from the lowest inner level.
pub fn get(tree: &Tree) -> Arc<Mirror> {
    let m = tree.meta();
    // SAFETY: rd_id of an open relation.
    let oid = unsafe { (*tree.rel).rd_id };
    let node = relfilenode(tree.rel);
    let cached = CACHE.with(|c| c.borrow().get(&oid).cloned());
    if let Some(mirror) = cached {
        let drift = m.generation.saturating_sub(mirror.generation) as usize;
        if mirror.relfilenode == node && m.generation >= mirror.generation && drift <= 16.max(mirror.blocks.len() / 100) {
            return mirror;
        }
    }
    let (highs, blocks) = if m.root_level == 0 { (vec![u64::MAX], vec![m.root]) } else { tree.level_entries(&m, 1) };
    let mirror = Arc::new(Mirror { relfilenode: node, generation: m.generation, inner: ImplicitInner::build(&highs), blocks });
    CACHE.with(|c| c.borrow_mut().insert(oid, mirror.clone()));
    mirror
}

/// The inner search of a batch: leaf numbers, on the CPU or the GPU.
pub struct LeafHints<'a>(pub &'a ImplicitInner);

impl BatchJob for LeafHints<'_> {
    type Query = u64;
    type Output = u32;

    fn run_cpu(&self, queries: &[u64]) -> Vec<u32> {
        let mut out = vec![0; queries.len()];
        self.0.descend_cpu(queries, &mut out);
        out
    }

    fn run_gpu(&self, gpu: &Gpu, queries: &[u64]) -> Result<Vec<u32>, GpuError> {
        let mut out = vec![0; queries.len()];
        self.0.descend_gpu(gpu, queries, Schedule::default(), |off, r| out[off..off + r.len()].copy_from_slice(r))?;
        Ok(out)
    }
}

/// The leaf level as pages: the engine's leaf step over shared buffers.
/// Holds the current page between searches, so ascending queries read
/// each page once.
pub struct PageLeaves<'a> {
    rel: pg_sys::Relation,
    mirror: &'a Mirror,
    current: RefCell<Option<(u32, u64, Shared)>>, // (hint, last query, page)
}

impl<'a> PageLeaves<'a> {
    pub fn new(rel: pg_sys::Relation, mirror: &'a Mirror) -> Self {
        PageLeaves { rel, mirror, current: RefCell::new(None) }
    }
}

impl LeafLevel for PageLeaves<'_> {
    /// (leaf block, lower-bound position in it)
    type Hit = (u32, u32);

    fn search(&self, leaf: u32, q: u64) -> (u32, u32) {
        let mut cur = self.current.borrow_mut();
        // Reuse the page reached for the previous query when it came from
        // the same hint and the queries ascend (the lower bound can only be
        // at or right of it); else start again at the hint.
        if !matches!(&*cur, Some((h, last, _)) if *h == leaf && *last <= q) {
            *cur = None;
            let block = *self.mirror.blocks.get(leaf as usize).unwrap_or_else(|| corrupted(format!("mirror leaf {leaf}")));
            *cur = Some((leaf, q, Shared::lock(self.rel, block)));
        }
        let (_, last, page) = cur.as_mut().expect("current page");
        *last = q;
        loop {
            let l = Leaf::new(page.page());
            if l.rightmost() || q <= l.s.high {
                return (page.block(), lower_bound(l.keys(), q) as u32);
            }
            let next = l.s.right;
            *page = Shared::lock(self.rel, next);
        }
    }
}

/// For ascending distinct probes, every (key, TID) whose key is a probe,
/// in key order, reading leaves from `hits` (the leaf step's positions).
pub fn collect(rel: pg_sys::Relation, probes: &[u64], hits: &[(u32, u32)], out: &mut Vec<(u64, Tid)>) {
    let mut page: Option<Shared> = None;
    for (&q, &(block, pos)) in probes.iter().zip(hits) {
        if page.as_ref().is_none_or(|p| p.block() != block) {
            drop(page.take()); // one page locked at a time
            page = Some(Shared::lock(rel, block));
        }
        let mut pos = pos as usize;
        loop {
            let g = page.as_ref().expect("page");
            let l = Leaf::new(g.page());
            let keys = l.keys();
            while pos < keys.len() && keys[pos] == q {
                out.push((q, l.tid(pos)));
                pos += 1;
            }
            // Equal keys may continue on the right page only if this page's
            // high key is q.
            if pos < keys.len() || l.rightmost() || l.s.high != q {
                break;
            }
            let next = l.s.right;
            drop(page.take());
            page = Some(Shared::lock(rel, next));
            pos = 0;
        }
    }
}

/// Hints for ascending probes, through the batch executor, then the leaf
/// step over pages.
pub fn probe(tree: &Tree, probes: &[u64], what: &'static str) -> Vec<(u64, Tid)> {
    let mirror = get(tree);
    let hints = crate::batch::submit(what, &LeafHints(&mirror.inner), probes);
    let leaves = PageLeaves::new(tree.rel, &mirror);
    let mut hits = vec![(0u32, 0u32); probes.len()];
    leaf::leaf_step_seq(&leaves, &hints, probes, &mut hits);
    drop(leaves);
    let mut out = Vec::with_capacity(probes.len());
    collect(tree.rel, probes, &hits, &mut out);
    out
}
