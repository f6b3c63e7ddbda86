//! The regular (updatable) HB+-tree.
//!
//! - An inner node is 17 cache lines: line 0 holds 8 index keys (index s is
//!   the largest key of key line s), lines 1..=8 the 64 keys, lines 9..=16
//!   the 64 child references. A visit reads 3 lines. Size and sibling live
//!   in parallel arrays (node fragmentation), so the hot lines hold only
//!   keys and references.
//! - A big leaf is 64 one-line small leaves of 4 pairs (256 pairs). Every
//!   last-level inner node is paired 1:1 with the big leaf of the same index
//!   (two pools, one index): its 64 keys are the largest keys of the 64
//!   small leaves, so `(node, slot)` names a leaf line without storing it.
//! - Keys are unique (an insert of a present key replaces its value).
//!   Separators are upper bounds: child j of a node holds exactly the keys
//!   in (key[j-1], key[j]]; the rightmost path's bounds are MAX.
//! - Updates come in batches: small ones are applied one by one and the
//!   changed nodes copied to the GPU one by one (the paper's synchronous
//!   method); large ones are applied in parallel, one thread per last-level
//!   node, structural changes afterwards on one thread, and the whole
//!   I-segment is copied (the asynchronous method).

use super::leaf::{self, LeafLevel};
use super::line::{prefetch, rank4, rank8, Line, MAX};
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, PinnedBuffer, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use parking_lot::Mutex;
use rayon::prelude::*;
use std::sync::Arc;

pub const FANOUT: usize = 64;
pub const LEAF_CAPACITY: usize = 256;
const NONE: u32 = u32::MAX;
/// Node ids must fit the GPU's answer, `(node << 6) | slot`, in a u32.
const MAX_NODES: usize = 1 << 26;
/// Default of `RegularTree::parallel_threshold`.
pub const PARALLEL_THRESHOLD: usize = 8192;
/// Queries a CPU thread advances together (software pipelining).
const CPU_GROUP: usize = 16;

/// An inner node: 17 lines, 1088 bytes.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Node {
    lines: [Line; 17],
}

impl Default for Node {
    fn default() -> Self {
        let mut lines = [Line::EMPTY; 17];
        for l in &mut lines[9..] {
            l.0 = [0; 8];
        }
        Node { lines }
    }
}

// SAFETY: 17 lines of plain u64, no padding.
unsafe impl gpu::Plain for Node {}

impl Node {
    #[inline(always)]
    fn key(&self, j: usize) -> u64 {
        self.lines[1 + j / 8].0[j % 8]
    }
    #[inline(always)]
    fn set_key(&mut self, j: usize, k: u64) {
        self.lines[1 + j / 8].0[j % 8] = k;
    }
    #[inline(always)]
    fn child(&self, j: usize) -> u32 {
        self.lines[9 + j / 8].0[j % 8] as u32
    }
    #[inline(always)]
    fn set_child(&mut self, j: usize, c: u32) {
        self.lines[9 + j / 8].0[j % 8] = c as u64;
    }
    /// First slot with q <= key: index line, then one key line.
    #[inline(always)]
    fn find(&self, q: u64) -> usize {
        let s = rank8(&self.lines[0].0, q);
        s * 8 + rank8(&self.lines[1 + s].0, q)
    }
    fn rebuild_index(&mut self) {
        for s in 0..8 {
            self.lines[0].0[s] = self.lines[1 + s].0[7];
        }
    }
}

/// A big leaf: 64 small leaves of one line, `[k0..k3, v0..v3]`, entries
/// packed from the front.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct BigLeaf {
    lines: [Line; 64],
}

impl Default for BigLeaf {
    fn default() -> Self {
        BigLeaf { lines: [Line::EMPTY; 64] }
    }
}

impl BigLeaf {
    #[inline(always)]
    fn key(&self, e: usize) -> u64 {
        self.lines[e / 4].0[e % 4]
    }
    #[inline(always)]
    fn value(&self, e: usize) -> u64 {
        self.lines[e / 4].0[4 + e % 4]
    }
    #[inline(always)]
    fn set(&mut self, e: usize, k: u64, v: u64) {
        self.lines[e / 4].0[e % 4] = k;
        self.lines[e / 4].0[4 + e % 4] = v;
    }
}

/// One update of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Insert, or replace the value of a present key.
    Insert(u64, u64),
    Delete(u64),
}

impl Update {
    fn key(&self) -> u64 {
        match *self {
            Update::Insert(k, _) | Update::Delete(k) => k,
        }
    }
}

/// How a batch reached the GPU mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorSync {
    /// No device mirror exists (nothing to copy).
    None,
    /// Changed nodes copied one by one (the synchronous method).
    PerNode { nodes: usize },
    /// The whole I-segment copied (the asynchronous method).
    WholeSegment { bytes: usize },
}

struct DeviceMirror {
    nodes: DeviceBuffer<Node>,
    /// Pinned staging for per-node copies, kept between batches.
    staging: Option<PinnedBuffer<Node>>,
}

pub struct RegularTree {
    nodes: Vec<Node>,
    leaves: Vec<BigLeaf>,
    /// Children of an upper node, entries of a last-level node's big leaf.
    size: Vec<u16>,
    /// Right sibling on the same level.
    next: Vec<u32>,
    root: u32,
    /// Inner levels, counting the root's.
    height: u32,
    len: usize,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    device: Mutex<Option<DeviceMirror>>,
    /// Batches of at least this many updates use the parallel method and
    /// the whole-segment copy. The paper's crossover was 64K-128K; on an
    /// H100 host (2^26 keys) per-node copies won at 1K updates (16 ms vs
    /// 45 ms) and lost at 16K (158 ms vs 74 ms), hence 8K.
    pub parallel_threshold: usize,
}

/// Raw access to distinct nodes from several threads at once.
struct Disjoint<'a> {
    nodes: *mut Node,
    leaves: *mut BigLeaf,
    size: *mut u16,
    _life: std::marker::PhantomData<&'a mut ()>,
}
// SAFETY: only used with distinct node ids per thread (see apply_parallel).
unsafe impl Send for Disjoint<'_> {}
unsafe impl Sync for Disjoint<'_> {}

impl RegularTree {
    /// An empty tree: one last-level root with an empty big leaf.
    pub fn new() -> Self {
        let mut t = RegularTree {
            nodes: Vec::new(),
            leaves: Vec::new(),
            size: Vec::new(),
            next: Vec::new(),
            root: 0,
            height: 1,
            len: 0,
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            device: Mutex::new(None),
            parallel_threshold: PARALLEL_THRESHOLD,
        };
        t.root = t.alloc();
        t
    }

    /// Bulk-loads ascending unique keys, filling big leaves with
    /// `leaf_fill` entries and upper nodes with `node_fill` children.
    pub fn bulk_load(keys: &[u64], values: &[u64], leaf_fill: usize, node_fill: usize) -> Self {
        assert_eq!(keys.len(), values.len());
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "bulk_load needs ascending unique keys");
        let leaf_fill = leaf_fill.clamp(1, LEAF_CAPACITY);
        let node_fill = node_fill.clamp(2, FANOUT);
        let nleaves = keys.len().div_ceil(leaf_fill).max(1);
        let mut per_level = vec![nleaves];
        while *per_level.last().unwrap() > 1 {
            per_level.push(per_level.last().unwrap().div_ceil(node_fill));
        }
        let total: usize = per_level.iter().sum();
        assert!(total <= MAX_NODES, "too many nodes for the GPU's 32-bit answers");
        let mut t = RegularTree {
            nodes: super::huge_vec(total, Node::default()),
            leaves: super::huge_vec(total, BigLeaf::default()),
            size: vec![0; total],
            next: vec![NONE; total],
            root: 0,
            height: per_level.len() as u32,
            len: keys.len(),
            dirty: Vec::new(),
            is_dirty: vec![false; total],
            device: Mutex::new(None),
            parallel_threshold: PARALLEL_THRESHOLD,
        };
        // Last level: nodes 0..nleaves, each with its big leaf.
        {
            let (nodes, leaves, size) = (&mut t.nodes[..nleaves], &mut t.leaves[..nleaves], &mut t.size[..nleaves]);
            nodes.par_iter_mut().zip(leaves.par_iter_mut()).zip(size.par_iter_mut()).enumerate().for_each(|(i, ((node, leaf), size))| {
                let lo = (i * leaf_fill).min(keys.len());
                let hi = ((i + 1) * leaf_fill).min(keys.len());
                for (e, p) in (lo..hi).enumerate() {
                    leaf.set(e, keys[p], values[p]);
                }
                *size = (hi - lo) as u16;
                rebuild_leaf_keys(node, leaf, hi - lo);
            });
        }
        // Upper levels, bottom-up; bounds[i] = bound of the i-th node of the level below.
        let mut bounds: Vec<u64> = (0..nleaves).map(|i| if i + 1 == nleaves { MAX } else { keys[((i + 1) * leaf_fill) - 1] }).collect();
        let mut below = 0usize; // first node id of the level below
        let mut count = nleaves;
        for w in 0..count.saturating_sub(1) {
            t.next[below + w] = (below + w + 1) as u32;
        }
        for _ in 1..per_level.len() {
            let first = below + count;
            let parents = count.div_ceil(node_fill);
            let mut up_bounds = Vec::with_capacity(parents);
            for p in 0..parents {
                let id = first + p;
                let node = &mut t.nodes[id];
                let lo = p * node_fill;
                let hi = ((p + 1) * node_fill).min(count);
                for (j, c) in (lo..hi).enumerate() {
                    node.set_key(j, bounds[c]);
                    node.set_child(j, (below + c) as u32);
                }
                for j in hi - lo..FANOUT {
                    node.set_child(j, (below + hi - 1) as u32);
                }
                node.rebuild_index();
                t.size[id] = (hi - lo) as u16;
                if p + 1 < parents {
                    t.next[id] = (id + 1) as u32;
                }
                up_bounds.push(bounds[hi - 1]);
            }
            below = first;
            count = parents;
            bounds = up_bounds;
        }
        t.root = below as u32;
        t
    }

    fn alloc(&mut self) -> u32 {
        let id = self.nodes.len();
        assert!(id < MAX_NODES, "too many nodes for the GPU's 32-bit answers");
        self.nodes.push(Node::default());
        self.leaves.push(BigLeaf::default());
        self.size.push(0);
        self.next.push(NONE);
        self.is_dirty.push(false);
        self.mark(id as u32);
        id as u32
    }

    fn mark(&mut self, id: u32) {
        if !self.is_dirty[id as usize] {
            self.is_dirty[id as usize] = true;
            self.dirty.push(id);
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// Bytes of the I-segment (host and device) and of the L-segment (host).
    pub fn sizes(&self) -> (usize, usize) {
        (self.nodes.len() * std::mem::size_of::<Node>(), self.leaves.len() * std::mem::size_of::<BigLeaf>())
    }

    /// The last-level node and small-leaf slot for `q`, recording the upper
    /// nodes and slots passed in `path` when given.
    #[inline]
    fn descend(&self, q: u64, mut path: Option<&mut Vec<(u32, usize)>>) -> (u32, usize) {
        let mut node = self.root;
        for _ in 1..self.height {
            let n = &self.nodes[node as usize];
            let j = n.find(q);
            if let Some(p) = path.as_deref_mut() {
                p.push((node, j));
            }
            node = n.child(j);
        }
        (node, self.nodes[node as usize].find(q))
    }

    /// Entry index of the lower bound of `q` in node's big leaf, from the
    /// small-leaf slot (may equal the leaf's size: the bound is further right).
    #[inline(always)]
    fn entry_in(&self, node: u32, slot: usize, q: u64) -> usize {
        let line = &self.leaves[node as usize].lines[slot];
        let keys: &[u64; 4] = line.0[..4].try_into().expect("4 keys");
        (slot * 4 + rank4(keys, q)).min(self.size[node as usize] as usize)
    }

    pub fn get(&self, q: u64) -> Option<u64> {
        let (node, slot) = self.descend(q, None);
        self.search((node << 6) | slot as u32, q)
    }

    /// Entries with lo <= key <= hi, in key order.
    pub fn range(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let (node, slot) = self.descend(lo, None);
        self.walk(node, self.entry_in(node, slot, lo), hi, |k, v| out.push((k, v)));
        out
    }

    /// Visits entries from (node, e) rightwards while key <= hi.
    fn walk(&self, mut node: u32, mut e: usize, hi: u64, mut visit: impl FnMut(u64, u64)) {
        while node != NONE {
            let leaf = &self.leaves[node as usize];
            for i in e..self.size[node as usize] as usize {
                let k = leaf.key(i);
                if k > hi {
                    return;
                }
                visit(k, leaf.value(i));
            }
            node = self.next[node as usize];
            e = 0;
        }
    }

    /// Every entry in key order (for tests and checks).
    pub fn entries(&self) -> Vec<(u64, u64)> {
        self.range(0, MAX)
    }

    pub fn insert(&mut self, k: u64, v: u64) {
        let mut path = Vec::with_capacity(self.height as usize);
        let (node, slot) = self.descend(k, Some(&mut path));
        let e = self.entry_in(node, slot, k);
        let size = self.size[node as usize] as usize;
        if e < size && self.leaves[node as usize].key(e) == k {
            self.leaves[node as usize].set(e, k, v);
            return;
        }
        self.len += 1;
        if size < LEAF_CAPACITY {
            leaf_insert(&mut self.nodes[node as usize], &mut self.leaves[node as usize], size, e, k, v);
            self.size[node as usize] += 1;
            self.mark(node);
            return;
        }
        // Split the big leaf: 128 entries stay, 129 move to a new right sibling.
        let mut entries: Vec<(u64, u64)> = (0..size).map(|i| self.leaf_entry(node, i)).collect();
        entries.insert(e, (k, v));
        let right = self.alloc();
        let half = entries.len() / 2;
        self.fill_leaf(node, &entries[..half]);
        self.fill_leaf(right, &entries[half..]);
        self.next[right as usize] = self.next[node as usize];
        self.next[node as usize] = right;
        self.mark(node);
        self.insert_in_parent(path, node, entries[half - 1].0, right);
    }

    fn leaf_entry(&self, node: u32, e: usize) -> (u64, u64) {
        let l = &self.leaves[node as usize];
        (l.key(e), l.value(e))
    }

    fn fill_leaf(&mut self, node: u32, entries: &[(u64, u64)]) {
        let leaf = &mut self.leaves[node as usize];
        *leaf = BigLeaf::default();
        for (e, &(k, v)) in entries.iter().enumerate() {
            leaf.set(e, k, v);
        }
        self.size[node as usize] = entries.len() as u16;
        rebuild_leaf_keys(&mut self.nodes[node as usize], leaf, entries.len());
    }

    /// After `left` split into `left` (keys <= sep) and `right`, records the
    /// split in the parent (the last element of `path`), splitting upwards.
    fn insert_in_parent(&mut self, mut path: Vec<(u32, usize)>, left: u32, sep: u64, right: u32) {
        let Some((parent, j)) = path.pop() else {
            // The root split: a new root over the two halves.
            let root = self.alloc();
            let n = &mut self.nodes[root as usize];
            n.set_key(0, sep);
            n.set_child(0, left);
            n.set_key(1, MAX);
            for s in 1..FANOUT {
                n.set_child(s, right);
            }
            n.rebuild_index();
            self.size[root as usize] = 2;
            self.root = root;
            self.height += 1;
            return;
        };
        let p = parent as usize;
        let size = self.size[p] as usize;
        let mut keys: Vec<u64> = (0..size).map(|i| self.nodes[p].key(i)).collect();
        let mut kids: Vec<u32> = (0..size).map(|i| self.nodes[p].child(i)).collect();
        // Slot j held (bound, left); now (sep, left), (bound, right).
        keys.insert(j, sep);
        kids.insert(j + 1, right);
        if keys.len() <= FANOUT {
            self.fill_node(parent, &keys, &kids);
            return;
        }
        let other = self.alloc();
        let half = keys.len() / 2;
        self.fill_node(parent, &keys[..half], &kids[..half]);
        self.fill_node(other, &keys[half..], &kids[half..]);
        self.next[other as usize] = self.next[p];
        self.next[p] = other;
        self.insert_in_parent(path, parent, keys[half - 1], other);
    }

    fn fill_node(&mut self, id: u32, keys: &[u64], kids: &[u32]) {
        let n = &mut self.nodes[id as usize];
        for j in 0..FANOUT {
            n.set_key(j, keys.get(j).copied().unwrap_or(MAX));
            n.set_child(j, kids.get(j).copied().unwrap_or(*kids.last().expect("a child")));
        }
        n.rebuild_index();
        self.size[id as usize] = keys.len() as u16;
        self.mark(id);
    }

    /// Removes `k`; returns whether it was present. Leaves are not merged.
    pub fn delete(&mut self, k: u64) -> bool {
        let (node, slot) = self.descend(k, None);
        let e = self.entry_in(node, slot, k);
        let size = self.size[node as usize] as usize;
        if e >= size || self.leaves[node as usize].key(e) != k {
            return false;
        }
        leaf_delete(&mut self.nodes[node as usize], &mut self.leaves[node as usize], size, e);
        self.size[node as usize] -= 1;
        self.len -= 1;
        self.mark(node);
        true
    }

    /// Applies a batch in order (for equal keys) and brings the GPU mirror,
    /// if there is one, up to date: small batches one by one with per-node
    /// copies, large ones in parallel with a whole-segment copy.
    pub fn apply(&mut self, updates: &[Update], gpu: Option<&Gpu>) -> Result<MirrorSync, GpuError> {
        let parallel = updates.len() >= self.parallel_threshold;
        if parallel {
            self.apply_parallel(updates);
        } else {
            for u in updates {
                match *u {
                    Update::Insert(k, v) => self.insert(k, v),
                    Update::Delete(k) => {
                        self.delete(k);
                    }
                }
            }
        }
        match gpu {
            Some(g) if self.device.lock().is_some() => self.sync_mirror(g, parallel),
            _ => Ok(MirrorSync::None),
        }
    }

    /// The asynchronous method: updates sorted by key (stably), grouped by
    /// their last-level node, each group applied by one thread; what would
    /// overflow a big leaf is applied afterwards on this thread.
    fn apply_parallel(&mut self, updates: &[Update]) {
        let mut order: Vec<u32> = (0..updates.len() as u32).collect();
        order.par_sort_by_key(|&i| updates[i as usize].key());
        let targets: Vec<u32> = order.par_iter().map(|&i| self.descend(updates[i as usize].key(), None).0).collect();
        let mut groups = Vec::new(); // (node, range in order)
        let mut start = 0;
        for i in 1..=order.len() {
            if i == order.len() || targets[i] != targets[start] {
                groups.push((targets[start], start..i));
                start = i;
            }
        }
        let raw = Disjoint {
            nodes: self.nodes.as_mut_ptr(),
            leaves: self.leaves.as_mut_ptr(),
            size: self.size.as_mut_ptr(),
            _life: std::marker::PhantomData,
        };
        let raw = &raw;
        let results: Vec<(bool, isize, Vec<Update>)> = groups
            .par_iter()
            .map(|(node, r)| {
                // SAFETY: groups have distinct nodes (consecutive runs of a
                // sorted target list), so each thread touches its own node,
                // leaf and size only; the vectors are not resized meanwhile.
                let (n, l, sz) = unsafe {
                    (&mut *raw.nodes.add(*node as usize), &mut *raw.leaves.add(*node as usize), &mut *raw.size.add(*node as usize))
                };
                let mut changed = false;
                let mut delta = 0isize;
                let mut deferred = Vec::new();
                for &i in &order[r.clone()] {
                    let u = updates[i as usize];
                    if !deferred.is_empty() {
                        deferred.push(u); // keep the batch's order for equal keys
                        continue;
                    }
                    let k = u.key();
                    let size = *sz as usize;
                    let e = (0..size).position(|e| l.key(e) >= k).unwrap_or(size);
                    let present = e < size && l.key(e) == k;
                    match u {
                        Update::Insert(_, v) if present => l.set(e, k, v),
                        Update::Insert(_, v) if size < LEAF_CAPACITY => {
                            leaf_insert(n, l, size, e, k, v);
                            *sz += 1;
                            delta += 1;
                            changed = true;
                        }
                        Update::Insert(..) => deferred.push(u),
                        Update::Delete(_) if present => {
                            leaf_delete(n, l, size, e);
                            *sz -= 1;
                            delta -= 1;
                            changed = true;
                        }
                        Update::Delete(_) => {}
                    }
                }
                (changed, delta, deferred)
            })
            .collect();
        for ((node, _), (changed, delta, deferred)) in groups.iter().zip(results) {
            if changed {
                self.mark(*node);
            }
            self.len = (self.len as isize + delta) as usize;
            for u in deferred {
                match u {
                    Update::Insert(k, v) => self.insert(k, v),
                    Update::Delete(k) => {
                        self.delete(k);
                    }
                }
            }
        }
    }

    /// Copies changed nodes to the device mirror: the whole segment when
    /// `whole` (or the pool outgrew the device buffer), else node by node.
    fn sync_mirror(&mut self, gpu: &Gpu, whole: bool) -> Result<MirrorSync, GpuError> {
        let mut dev = self.device.lock();
        let Some(d) = dev.as_mut() else { return Ok(MirrorSync::None) };
        let report = if whole || self.nodes.len() > d.nodes.len() {
            if self.nodes.len() > d.nodes.len() {
                d.nodes = gpu.alloc(self.nodes.len() + self.nodes.len() / 4)?;
            }
            let stream = gpu.new_stream()?;
            d.nodes.write_async(&self.nodes, &stream)?;
            gpu.guarded(|| stream.synchronize().map_err(gpu::driver_error("cuStreamSynchronize")))?;
            MirrorSync::WholeSegment { bytes: self.nodes.len() * std::mem::size_of::<Node>() }
        } else {
            if d.staging.as_ref().is_none_or(|s| s.len() < self.dirty.len()) {
                let n = self.dirty.len().next_power_of_two();
                d.staging = Some(gpu.guarded(|| PinnedBuffer::<Node>::alloc(gpu.context(), n))?);
            }
            let staging = d.staging.as_mut().expect("staging");
            for (s, &id) in staging.as_mut_slice().iter_mut().zip(&self.dirty) {
                *s = self.nodes[id as usize];
            }
            let stream = gpu.new_stream()?;
            for (i, &id) in self.dirty.iter().enumerate() {
                d.nodes.write_at_async(id as usize, &staging.as_slice()[i..i + 1], &stream)?;
            }
            gpu.guarded(|| stream.synchronize().map_err(gpu::driver_error("cuStreamSynchronize")))?;
            MirrorSync::PerNode { nodes: self.dirty.len() }
        };
        for &id in &self.dirty {
            self.is_dirty[id as usize] = false;
        }
        self.dirty.clear();
        Ok(report)
    }

    /// Uploads the I-segment to the GPU (at first use; later changes reach
    /// it through `apply`).
    pub fn upload(&mut self, gpu: &Gpu) -> Result<usize, GpuError> {
        let mut dev = self.device.lock();
        if dev.is_none() {
            *dev = Some(DeviceMirror { nodes: gpu.upload(&self.nodes)?, staging: None });
            for &id in &self.dirty {
                self.is_dirty[id as usize] = false;
            }
            self.dirty.clear();
        }
        Ok(self.nodes.len() * std::mem::size_of::<Node>())
    }

    /// The CPU-only tree: inner and leaf search of a batch on all cores,
    /// groups of queries advanced level by level with prefetching.
    pub fn search_cpu(&self, queries: &[u64], out: &mut [Option<u64>]) {
        assert_eq!(queries.len(), out.len());
        out.par_chunks_mut(4096).zip(queries.par_chunks(4096)).for_each(|(o, q)| {
            for (o, q) in o.chunks_mut(CPU_GROUP).zip(q.chunks(CPU_GROUP)) {
                let mut node = [self.root; CPU_GROUP];
                let mut slot = [0usize; CPU_GROUP];
                for l in 0..self.height {
                    for i in 0..q.len() {
                        let n = &self.nodes[node[i] as usize];
                        slot[i] = n.find(q[i]);
                        if l + 1 < self.height {
                            node[i] = n.child(slot[i]);
                            prefetch(&self.nodes[node[i] as usize].lines[0]);
                        } else {
                            prefetch(&self.leaves[node[i] as usize].lines[slot[i]]);
                        }
                    }
                }
                for i in 0..q.len() {
                    o[i] = self.search((node[i] << 6) | slot[i] as u32, q[i]);
                }
            }
        });
    }

    /// Enqueues the GPU inner search of `m` queries; answers are
    /// `(last-level node << 6) | small-leaf slot`.
    pub fn launch_descend(&self, gpu: &Gpu, stream: &Arc<CudaStream>, queries: u64, out: u64, m: usize) -> Result<(), GpuError> {
        if m == 0 {
            return Ok(());
        }
        let dev = self.device.lock();
        let d = dev.as_ref().ok_or_else(|| GpuError::Unavailable("the regular tree was not uploaded".into()))?;
        let nodes = d.nodes.ptr();
        let block = 256u32;
        let grid = (m * 8).div_ceil(block as usize).min(gpu.info().multiprocessors as usize * 32).max(1) as u32;
        let m64 = m as u64;
        gpu.guarded(|| {
            let f = gpu.function(&kernels::HBTREE, "hb_regular_descend")?;
            let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: arguments match the kernel; the mirror holds every node id reachable from root.
            unsafe { stream.launch_builder(&f).arg(&nodes).arg(&self.root).arg(&self.height).arg(&queries).arg(&m64).arg(&out).launch(cfg) }
                .map(|_| ())
                .map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// HB+: the GPU walks the inner levels bucket by bucket; the CPU does the
    /// leaf step on all cores while the next buckets run. The mirror must be
    /// uploaded (`upload`) and current (`apply` keeps it so).
    pub fn search_gpu(&self, gpu: &Gpu, queries: &[u64], out: &mut [Option<u64>], schedule: Schedule) -> Result<(), GpuError> {
        assert_eq!(queries.len(), out.len());
        gpu.pipeline(
            queries,
            schedule,
            |s, q, o, m| self.launch_descend(gpu, s, q, o, m),
            |off, refs: &[u32]| {
                let n = refs.len();
                leaf::leaf_step_par(self, refs, &queries[off..off + n], &mut out[off..off + n]);
            },
        )
    }

    /// Range scans of a batch: the GPU finds each range's start leaf, the
    /// CPU walks from there on all cores; `visit(query, key, value)`.
    pub fn ranges_gpu(
        &self,
        gpu: &Gpu,
        ranges: &[(u64, u64)],
        schedule: Schedule,
        visit: impl Fn(usize, u64, u64) + Sync,
    ) -> Result<(), GpuError> {
        let los: Vec<u64> = ranges.iter().map(|r| r.0).collect();
        gpu.pipeline(
            &los,
            schedule,
            |s, q, o, m| self.launch_descend(gpu, s, q, o, m),
            |off, refs: &[u32]| {
                refs.par_iter().enumerate().for_each(|(i, &r)| {
                    let (lo, hi) = ranges[off + i];
                    let node = r >> 6;
                    self.walk(node, self.entry_in(node, (r & 63) as usize, lo), hi, |k, v| visit(off + i, k, v));
                });
            },
        )
    }

    /// The same on the CPU only.
    pub fn ranges_cpu(&self, ranges: &[(u64, u64)], visit: impl Fn(usize, u64, u64) + Sync) {
        ranges.par_iter().enumerate().for_each(|(i, &(lo, hi))| {
            let (node, slot) = self.descend(lo, None);
            self.walk(node, self.entry_in(node, slot, lo), hi, |k, v| visit(i, k, v));
        });
    }

    /// Checks the structure's invariants (for tests): sorted unique keys,
    /// bounds, sizes, the index lines and the leaf line keys.
    pub fn check(&self) -> Result<(), String> {
        let entries = self.entries();
        if entries.len() != self.len {
            return Err(format!("len {} but {} entries reachable", self.len, entries.len()));
        }
        if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(format!("keys out of order: {:?}", w));
        }
        self.check_node(self.root, 1, None, MAX)
    }

    /// Checks the subtree of `id`, whose keys must lie in (lo, hi].
    fn check_node(&self, id: u32, level: u32, lo: Option<u64>, hi: u64) -> Result<(), String> {
        let n = &self.nodes[id as usize];
        let size = self.size[id as usize] as usize;
        for s in 0..8 {
            if n.lines[0].0[s] != n.lines[1 + s].0[7] {
                return Err(format!("node {id}: index line out of date"));
            }
        }
        if level == self.height {
            let leaf = &self.leaves[id as usize];
            for e in 0..size {
                let k = leaf.key(e);
                if lo.is_some_and(|lo| k <= lo) || k > hi {
                    return Err(format!("leaf {id}: key {k} outside ({lo:?}, {hi}]"));
                }
            }
            let mut expect = Node::default();
            rebuild_leaf_keys(&mut expect, leaf, size);
            if (0..FANOUT).any(|j| expect.key(j) != n.key(j)) {
                return Err(format!("leaf {id}: line keys out of date"));
            }
            return Ok(());
        }
        if size == 0 || n.key(size - 1) != hi {
            return Err(format!("node {id}: last key {} is not its bound {hi}", n.key(size.max(1) - 1)));
        }
        let mut prev = lo;
        for j in 0..size {
            self.check_node(n.child(j), level + 1, prev, n.key(j))?;
            prev = Some(n.key(j));
        }
        Ok(())
    }
}

impl Default for RegularTree {
    fn default() -> Self {
        Self::new()
    }
}

impl LeafLevel for RegularTree {
    type Hit = Option<u64>;

    /// `leaf` is `(node << 6) | slot`; the value of `q` if present.
    #[inline]
    fn search(&self, leaf: u32, q: u64) -> Option<u64> {
        let node = leaf >> 6;
        let e = self.entry_in(node, (leaf & 63) as usize, q);
        let l = &self.leaves[node as usize];
        (e < self.size[node as usize] as usize && l.key(e) == q).then(|| l.value(e))
    }

    #[inline(always)]
    fn prefetch(&self, leaf: u32) {
        if let Some(l) = self.leaves.get((leaf >> 6) as usize) {
            prefetch(&l.lines[(leaf & 63) as usize]);
        }
    }
}

/// Recomputes a last-level node's keys from its big leaf: the largest key
/// of each full line, MAX for the last non-empty line (any query up to the
/// node's bound stops there at the latest) and for empty lines.
fn rebuild_leaf_keys(node: &mut Node, leaf: &BigLeaf, size: usize) {
    let last = size.saturating_sub(1) / 4;
    for j in 0..FANOUT {
        node.set_key(j, if j < last && j * 4 + 3 < size { leaf.key(j * 4 + 3) } else { MAX });
    }
    node.rebuild_index();
}

fn leaf_insert(node: &mut Node, leaf: &mut BigLeaf, size: usize, e: usize, k: u64, v: u64) {
    for i in (e..size).rev() {
        let (kk, vv) = (leaf.key(i), leaf.value(i));
        leaf.set(i + 1, kk, vv);
    }
    leaf.set(e, k, v);
    rebuild_leaf_keys(node, leaf, size + 1);
}

fn leaf_delete(node: &mut Node, leaf: &mut BigLeaf, size: usize, e: usize) {
    for i in e + 1..size {
        let (kk, vv) = (leaf.key(i), leaf.value(i));
        leaf.set(i - 1, kk, vv);
    }
    leaf.set(size - 1, MAX, MAX);
    rebuild_leaf_keys(node, leaf, size - 1);
}
