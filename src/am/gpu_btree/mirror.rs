//! The HB+-tree side of gpu_btree: a compact copy of the inner levels,
//! built from the lowest inner level's (high key, leaf) entries into the
//! engine's implicit I-segment, cached per backend by (index, generation),
//! mirrored on the GPU at first use. A batch of probes goes through the
//! batch executor (GPU or CPU), or the GPU service's copy of the mirror
//! (`service.rs`), to leaf hints; the leaf step (`leaf_step.rs`) then
//! reads the leaf pages in this backend. Every hint is checked against
//! the page's kind and fence keys, so a stale mirror costs right-moves or
//! a descent, never answers.

use super::leaf_step::Tally;
use super::page::Shared;
use super::page::*;
use super::tree::Tree;
use crate::am::common::cache;
use gpuindex_engine::executor::BatchJob;
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::hbtree::implicit::ImplicitInner;
use std::sync::Arc;

pub struct Mirror {
    pub generation: u64,
    /// Leaf block of each leaf number of the inner segment.
    pub blocks: Vec<u32>,
    pub inner: ImplicitInner,
}

impl cache::Image for Mirror {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.inner.bytes() + self.blocks.len() * 4
    }
    fn device_bytes(&self) -> usize {
        self.inner.device_bytes()
    }
}

/// The mirror of `tree`'s index: the cached one while its generation is
/// close enough to the metapage's (a few splits behind only costs
/// right-moves), else rebuilt from the lowest inner level.
pub fn get(tree: &Tree) -> Arc<Mirror> {
    let m = tree.meta();
    if let Some(mirror) = cache::lookup::<Mirror>(tree.rel, "hb+ mirror") {
        let drift = m.generation.saturating_sub(mirror.generation) as usize;
        if m.generation >= mirror.generation && drift <= 16.max(mirror.blocks.len() / 100) {
            return mirror;
        }
    }
    let (highs, blocks) = if m.root_level == 0 { (vec![u64::MAX], vec![m.root]) } else { tree.level_entries(&m, 1) };
    cache::store(tree.rel, "hb+ mirror", Mirror { generation: m.generation, inner: ImplicitInner::build(&highs), blocks })
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

/// Whether a mirror hint may start the search for q: a leaf (live or
/// dead) with nothing equal to q to its left. Every key left of a leaf is
/// at most its low fence, and a dead leaf's fences stay those of the range
/// it gave to the page on its right. A hint older than a page deletion may
/// name a page recycled since into anything.
fn hint_fits(page: &PageRef, q: u64) -> bool {
    let s = page.special();
    s.page_id == PAGE_ID && s.kind == KIND_LEAF && (s.flags & LEFTMOST != 0 || s.low < q)
}

/// A leaf to start the search for q from: the hint (a block, from this
/// backend's mirror or the service's) where it fits, else the leaf a
/// descent of `tree` finds. `blocks` is the index's size: a hint from an
/// image of the index's file before a rewrite may lie past it.
pub fn hinted_leaf(tree: &Tree, block: u32, blocks: u32, q: u64) -> Shared {
    hinted_leaf_by(tree, block, blocks, q, |b| Shared::lock(tree.rel, b))
}

/// `hinted_leaf`, the hint's page locked by `lock`.
pub fn hinted_leaf_by(tree: &Tree, block: u32, blocks: u32, q: u64, lock: impl FnOnce(u32) -> Shared) -> Shared {
    if block < blocks && block != META_BLOCK {
        let g = lock(block);
        if hint_fits(&g.page(), q) {
            return g;
        }
    }
    tree.find_leaf(q)
}

/// The index's size in blocks, for `hinted_leaf`.
pub fn blocks(tree: &Tree) -> u32 {
    crate::am::common::build::nblocks(tree.rel, crate::storage::Fork::Main)
}

/// The leaf hints, as blocks, of the ascending `probes`: from the GPU
/// service where it pays (`service::hints`), else through this backend's
/// mirror and the batch executor (CPU or GPU).
pub fn hints(tree: &Tree, probes: &[u64], what: &'static str) -> Vec<u32> {
    if let Some(blocks) = super::service::hints(tree, probes, what) {
        return blocks;
    }
    let mirror = get(tree);
    let leaves = crate::batch::submit(what, &LeafHints(&mirror.inner), probes);
    leaves.iter().map(|&l| *mirror.blocks.get(l as usize).unwrap_or_else(|| corrupted(format!("mirror leaf {l}")))).collect()
}

/// Every (key, TID) whose key is one of the ascending distinct `probes`, in
/// key order: hints through the batch executor, then the leaf step over
/// pages (counting what it can in a `tally`: `leaf_step::Tally`); past
/// `cap` entries, how many it found when it stopped.
pub fn probe(tree: &Tree, probes: &[u64], what: &'static str, cap: usize, tally: Option<&mut Tally>) -> Result<Vec<(u64, Tid)>, usize> {
    super::leaf_step::probe_leaves(tree, &hints(tree, probes, what), probes, cap, tally)
}
