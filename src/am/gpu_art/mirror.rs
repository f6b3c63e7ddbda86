//! The device mirror: the engine's CuART over the leaves' high keys (read
//! from the lowest inner level), mapping a key's lower bound to the first
//! leaf whose high key is at least it, that is the leaf a descent finds.
//! Cached per backend by (index, generation), uploaded to the GPU at its
//! first GPU batch. A batch of sorted probes (`= ANY`, the probe function,
//! the batched join) gets every leaf in one lower-bound batch, on the GPU
//! or all cores, instead of one descent each.
//!
//! A hint is where a descent would have started at the mirror's
//! generation. Splits only move keys right and gpu_art never frees a leaf
//! page, so every leaf left of a hint still holds only keys below the
//! probe: the scan moves right from the hint past splits made since, and
//! a stale mirror costs right-moves, never rows.

use super::page::*;
use super::tree::Tree;
use crate::am::common::cache;
use crate::storage::RecentPages;
use gpuindex_engine::art::gpu::{search_gpu, DeviceArt, Format, Op};
use gpuindex_engine::art::{self, Art, ByteKeys};
use gpuindex_engine::gpu::Schedule;
use pgrx::pg_sys;
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

pub struct Mirror {
    generation: u64,
    /// The first leaf whose high key is the mirror's key of each rank, and
    /// last the first leaf past every value key (NULLs, the rightmost).
    blocks: Vec<u32>,
    art: Option<Art>,
    device: OnceLock<DeviceArt>,
}

impl cache::Image for Mirror {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.art.as_ref().map_or(0, |a| a.bytes()) + self.blocks.len() * 4
    }
    fn device_bytes(&self) -> usize {
        self.device.get().map_or(0, |d| d.bytes())
    }
}

/// The mirror of `tree`'s index: the cached one while its generation is
/// close enough to the metapage's, else rebuilt from the lowest inner level.
pub fn get(tree: &Tree) -> Arc<Mirror> {
    let m = tree.meta();
    if let Some(mirror) = cache::lookup::<Mirror>(tree.rel, "art mirror") {
        let drift = m.generation.saturating_sub(mirror.generation) as usize;
        if m.generation >= mirror.generation && drift <= 16.max(mirror.blocks.len() / 100) {
            return mirror;
        }
    }
    let (keys, blocks) = lowest_level(tree);
    cache::store(tree.rel, "art mirror", Mirror::new(m.generation, &keys, blocks))
}

/// The leaves' distinct high keys (value keys) and the first leaf of
/// each, then the first leaf past every value key, from the lowest inner
/// level (a one-leaf tree: no key, the root).
pub fn lowest_level(tree: &Tree) -> (ByteKeys, Vec<u32>) {
    let m = tree.meta();
    let mut keys = ByteKeys::new();
    let mut blocks = Vec::new();
    if m.root_level == 0 {
        blocks.push(m.root);
        return (keys, blocks);
    }
    let mut g = tree.leftmost(1);
    loop {
        let n = Node::new(g.page());
        for i in 0..n.count() {
            let (k, child) = n.entry(i);
            if k.rank != RANK_VALUE {
                break;
            }
            // A long key read whole (rare: a separator past 2000 bytes).
            let whole = match k.as_key() {
                Some(k) => Cow::Borrowed(k.bytes),
                None => Cow::Owned(super::long::resolve(tree.rel, k).bytes),
            };
            if keys.is_empty() || keys.get(keys.len() - 1) != &whole[..] {
                keys.push(&whole);
                blocks.push(child as u32);
            }
        }
        // The first child past the value keys: the rest of this page,
        // or the first entry of a page to the right.
        if let Some(i) = (0..n.count()).find(|&i| n.stored(i).rank != RANK_VALUE) {
            blocks.push(n.entry(i).1 as u32);
            return (keys, blocks);
        }
        if n.rightmost() {
            corrupted("the lowest inner level does not end at +infinity".into());
        }
        let right = n.s.right;
        drop(g);
        g = Shared::lock(tree.rel, right);
    }
}

/// The leaf to start each query's search from: from the GPU service where
/// it pays (`service::hints`), else through this backend's mirror.
pub fn hints(tree: &Tree, queries: &ByteKeys, what: &'static str) -> Vec<u32> {
    match super::service::hints(tree, queries, what) {
        Some(blocks) => blocks,
        None => get(tree).hints(queries, what),
    }
}

impl Mirror {
    /// The mirror of `lowest_level`'s keys and blocks at `generation`.
    pub fn new(generation: u64, keys: &ByteKeys, blocks: Vec<u32>) -> Mirror {
        let depth = if keys.len() < 4096 { 1 } else { 2 };
        let art = (!keys.is_empty())
            .then(|| art::build::build(keys, depth).unwrap_or_else(|e| corrupted(format!("high keys the mirror cannot hold: {e:?}"))));
        Mirror { generation, blocks, art, device: OnceLock::new() }
    }

    /// The leaf to start each query's search from, through the batch
    /// executor (CPU or GPU, by this session's settings).
    pub fn hints(&self, queries: &ByteKeys, what: &'static str) -> Vec<u32> {
        if self.art.is_none() {
            return vec![self.blocks[0]; queries.len()];
        }
        let ranks = crate::batch::run(what, queries.len(), || self.ranks_cpu(queries), |gpu| self.ranks_gpu(gpu, queries));
        self.blocks_of(&ranks)
    }

    /// Each query's lower bound among the keys, on all cores.
    pub fn ranks_cpu(&self, queries: &ByteKeys) -> Vec<u64> {
        match &self.art {
            Some(art) => (0..queries.len()).into_par_iter().map(|i| art.lower_bound(queries.get(i))).collect(),
            None => vec![0; queries.len()],
        }
    }

    /// The same on `gpu` (the tree uploaded at the first call).
    pub fn ranks_gpu(&self, gpu: &gpuindex_engine::gpu::Gpu, queries: &ByteKeys) -> Result<Vec<u64>, gpuindex_engine::gpu::GpuError> {
        let Some(art) = &self.art else { return Ok(vec![0; queries.len()]) };
        let dev = self.device(gpu)?;
        let mut out = vec![0u64; queries.len()];
        search_gpu(gpu, art, dev, Op::LowerBound, queries, Format::for_queries(queries), &mut out, Schedule::default())?;
        Ok(out)
    }

    /// The tree on `gpu`, uploaded at the first call (None: no keys).
    pub fn device(&self, gpu: &gpuindex_engine::gpu::Gpu) -> Result<&DeviceArt, gpuindex_engine::gpu::GpuError> {
        let art = self.art.as_ref().expect("a mirror with keys");
        if let Some(d) = self.device.get() {
            return Ok(d);
        }
        let d = DeviceArt::upload(gpu, art)?;
        Ok(self.device.get_or_init(|| d))
    }

    /// Whether it holds keys (else every query starts at the one leaf).
    pub fn has_keys(&self) -> bool {
        self.art.is_some()
    }

    /// The leaf of each rank.
    pub fn blocks_of(&self, ranks: &[u64]) -> Vec<u32> {
        ranks.iter().map(|&r| self.blocks[r as usize]).collect()
    }
}

/// Each point's starting leaf of a walk over sorted points, pinned through
/// this backend's memory of the index's buffers (`RecentPages`: no
/// buffer-mapping lookup for a leaf read before).
pub struct Hints {
    blocks: Vec<u32>,
    recent: RecentPages,
}

impl Hints {
    pub fn of(tree: &Tree, queries: &ByteKeys, what: &'static str) -> Hints {
        Hints::from_blocks(tree, hints(tree, queries, what))
    }

    /// Hints already made (a subset of a batch's).
    pub fn from_blocks(tree: &Tree, blocks: Vec<u32>) -> Hints {
        Hints { blocks, recent: RecentPages::of(tree.rel) }
    }

    /// The leaf hinted for point i.
    pub fn block(&self, i: usize) -> u32 {
        self.blocks[i]
    }

    /// Asks the CPU for what locking point i's hinted leaf first touches
    /// (its buffer header, page header, special area and the high key
    /// before it), if there is a point i.
    pub fn prefetch(&self, i: usize) {
        if let Some(&block) = self.blocks.get(i) {
            let last = pg_sys::BLCKSZ as usize / 64 - 1;
            self.recent.prefetch_page(block, [0, last - 1, last].into_iter());
        }
    }

    /// Point i's hinted leaf, share-locked, after a check that it is one.
    pub fn leaf(&mut self, i: usize) -> Shared {
        let block = self.blocks[i];
        let g: Shared = self.recent.lock_shared(block);
        let s = g.page().special();
        if s.page_id != PAGE_ID || s.kind != KIND_LEAF {
            corrupted(format!("mirror hint {block} is not a leaf"));
        }
        g
    }
}
