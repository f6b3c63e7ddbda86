//! The implicit HB+-tree (search-only, bulk built): an I-segment of 8-key
//! cache-line nodes stored breadth-first (child j of node i at the next
//! level is node 8i + j), and an L-segment of one-line leaves holding four
//! key-value pairs. Separators are lower-bound separators (child j holds
//! keys <= key[j]); the last slot of every node is MAX, so the GPU uses 8
//! threads per node, and every separator on the rightmost path is MAX so a
//! query above every key still lands on a real leaf.

use super::leaf::{self, LeafLevel};
use super::line::{prefetch, rank4, rank8, Line, MAX};
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use parking_lot::Mutex;
use rayon::prelude::*;
use std::sync::Arc;

/// Fanout of an implicit inner node (8 keys, the last always MAX).
pub const FANOUT: usize = 8;
/// Queries a CPU thread advances together, level by level (the paper's
/// software pipelining: 16 was best, 32 no better).
pub const CPU_GROUP: usize = 16;

/// The I-segment over `leaves` leaves.
pub struct ImplicitInner {
    nodes: Vec<Line>,
    /// First node of each level, root level first.
    level_offsets: Vec<usize>,
    leaves: usize,
    device: Mutex<Option<Arc<DeviceInner>>>,
}

/// The device mirror of an I-segment.
pub struct DeviceInner {
    nodes: DeviceBuffer<Line>,
    offsets: DeviceBuffer<u64>,
    height: u32,
}

impl DeviceInner {
    pub fn bytes(&self) -> usize {
        self.nodes.bytes() + self.offsets.bytes()
    }
}

impl ImplicitInner {
    /// Builds the inner levels over leaves whose largest keys are `maxes`
    /// (ascending; at least one leaf).
    pub fn build(maxes: &[u64]) -> Self {
        let leaves = maxes.len().max(1);
        let mut height = 1;
        while FANOUT.pow(height as u32) < leaves {
            height += 1;
        }
        // Leaves under one child of a node at level m: 8^(height - m - 1).
        let mut level_offsets = Vec::with_capacity(height);
        let mut total = 0;
        for m in 0..height {
            level_offsets.push(total);
            total += leaves.div_ceil(FANOUT.pow((height - m) as u32));
        }
        let mut nodes = super::huge_vec(total, Line::EMPTY);
        for (m, &first) in level_offsets.iter().enumerate() {
            let span = FANOUT.pow((height - m - 1) as u32);
            let count = leaves.div_ceil(span * FANOUT);
            nodes[first..first + count].par_iter_mut().enumerate().for_each(|(i, node)| {
                for j in 0..FANOUT {
                    let child = i * FANOUT + j;
                    let lo = child * span;
                    let hi = lo + span; // leaves [lo, hi) under this child
                    node.0[j] = if lo >= leaves || hi >= leaves { MAX } else { maxes[hi - 1] };
                }
            });
        }
        ImplicitInner { nodes, level_offsets, leaves, device: Mutex::new(None) }
    }

    pub fn height(&self) -> usize {
        self.level_offsets.len()
    }

    pub fn leaves(&self) -> usize {
        self.leaves
    }

    pub fn bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Line>()
    }

    /// Bytes of the device mirror, if one was made.
    pub fn device_bytes(&self) -> usize {
        self.device.lock().as_ref().map_or(0, |d| d.bytes())
    }

    /// The leaf that holds the lower bound of `q` (the last leaf when `q` is
    /// above every key).
    #[inline]
    pub fn descend(&self, q: u64) -> u32 {
        let mut node = 0usize;
        for &off in &self.level_offsets {
            node = node * FANOUT + rank8(&self.nodes[off + node].0, q);
        }
        node as u32
    }

    /// `descend` for a group of queries advanced level by level, prefetching
    /// each next node before moving to the next query.
    #[inline]
    fn descend_group(&self, qs: &[u64], out: &mut [u32]) {
        let mut node = [0usize; CPU_GROUP];
        let g = qs.len();
        for (l, &off) in self.level_offsets.iter().enumerate() {
            let next = self.level_offsets.get(l + 1).copied();
            for i in 0..g {
                node[i] = node[i] * FANOUT + rank8(&self.nodes[off + node[i]].0, qs[i]);
                if let Some(n) = next {
                    prefetch(self.nodes.as_ptr().wrapping_add(n + node[i]));
                }
            }
        }
        for i in 0..g {
            out[i] = node[i] as u32;
        }
    }

    /// Inner search of a batch on all CPU cores.
    pub fn descend_cpu(&self, queries: &[u64], out: &mut [u32]) {
        out.par_chunks_mut(4096).zip(queries.par_chunks(4096)).for_each(|(o, q)| {
            for (o, q) in o.chunks_mut(CPU_GROUP).zip(q.chunks(CPU_GROUP)) {
                self.descend_group(q, o);
            }
        });
    }

    /// The device mirror, uploaded at first use (the host copy is the master).
    pub fn device_image(&self, gpu: &Gpu) -> Result<Arc<DeviceInner>, GpuError> {
        let mut slot = self.device.lock();
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let offsets: Vec<u64> = self.level_offsets.iter().map(|&o| o as u64).collect();
        let d = Arc::new(DeviceInner { nodes: gpu.upload(&self.nodes)?, offsets: gpu.upload(&offsets)?, height: self.height() as u32 });
        *slot = Some(d.clone());
        Ok(d)
    }

    /// Drops the device mirror (after the host copy changed).
    pub fn invalidate_device(&self) {
        *self.device.lock() = None;
    }

    /// Enqueues the inner search of `m` queries (device address `queries`)
    /// writing leaf numbers (u32) to `out`.
    pub fn launch_descend(&self, gpu: &Gpu, stream: &Arc<CudaStream>, queries: u64, out: u64, m: usize) -> Result<(), GpuError> {
        if m == 0 {
            return Ok(());
        }
        let d = self.device_image(gpu)?;
        let block = 256u32;
        // 8 threads per query; each warp walks 4 queries per step of its loop.
        let grid = (m * FANOUT).div_ceil(block as usize).min(gpu.info().multiprocessors as usize * 32).max(1) as u32;
        let (nodes, offsets, m64) = (d.nodes.ptr(), d.offsets.ptr(), m as u64);
        gpu.guarded(|| {
            let f = gpu.function(&kernels::HBTREE, "hb_implicit_descend")?;
            let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: arguments match the kernel; buffers hold the nodes, height offsets, m queries, m outputs.
            unsafe { stream.launch_builder(&f).arg(&nodes).arg(&offsets).arg(&d.height).arg(&queries).arg(&m64).arg(&out).launch(cfg) }
                .map(|_| ())
                .map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// GPU inner search of a batch through the bucket pipeline; `consume`
    /// gets each bucket's leaf numbers in order while later buckets run.
    pub fn descend_gpu(&self, gpu: &Gpu, queries: &[u64], schedule: Schedule, consume: impl FnMut(usize, &[u32])) -> Result<(), GpuError> {
        self.device_image(gpu)?;
        gpu.pipeline(queries, schedule, |s, q, o, m| self.launch_descend(gpu, s, q, o, m), consume)
    }
}

/// The L-segment: one-line leaves of four key-value pairs,
/// `[k0, k1, k2, k3, v0, v1, v2, v3]`, the last one MAX-padded.
pub struct LineLeaves {
    lines: Vec<Line>,
    n: usize,
}

impl LineLeaves {
    fn build(keys: &[u64], values: &[u64]) -> Self {
        let n = keys.len();
        let mut lines = super::huge_vec(n.div_ceil(4).max(1), Line::EMPTY);
        lines.par_iter_mut().enumerate().for_each(|(l, line)| {
            for s in 0..4 {
                if let Some(&k) = keys.get(l * 4 + s) {
                    line.0[s] = k;
                    line.0[4 + s] = values[l * 4 + s];
                }
            }
        });
        LineLeaves { lines, n }
    }

    fn maxes(&self) -> Vec<u64> {
        self.lines.iter().map(|l| l.0[3]).collect()
    }
}

/// A leaf-step answer: the lower-bound position, and the value there when
/// the key equals the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hit {
    pub position: u64,
    pub value: Option<u64>,
}

impl LeafLevel for LineLeaves {
    type Hit = Hit;

    #[inline]
    fn search(&self, leaf: u32, q: u64) -> Hit {
        let line = &self.lines[leaf as usize];
        let keys: &[u64; 4] = line.0[..4].try_into().expect("4 keys");
        let slot = rank4(keys, q);
        let position = ((leaf as usize * 4 + slot).min(self.n)) as u64;
        let value = (slot < 4 && (position as usize) < self.n && keys[slot] == q).then(|| line.0[4 + slot]);
        Hit { position, value }
    }

    #[inline(always)]
    fn prefetch(&self, leaf: u32) {
        prefetch(self.lines.as_ptr().wrapping_add(leaf as usize));
    }
}

/// The implicit HB+-tree: I-segment (mirrored on the GPU) + L-segment
/// (host memory only).
pub struct ImplicitTree {
    pub inner: ImplicitInner,
    pub leaves: LineLeaves,
}

impl ImplicitTree {
    /// Bulk-builds from keys in ascending order (duplicates allowed) and
    /// their values.
    pub fn build(keys: &[u64], values: &[u64]) -> Result<Self, crate::sorted_array::NotSorted> {
        assert_eq!(keys.len(), values.len());
        if let Some(position) = keys.par_windows(2).position_any(|w| w[0] > w[1]) {
            return Err(crate::sorted_array::NotSorted { position });
        }
        let leaves = LineLeaves::build(keys, values);
        let inner = ImplicitInner::build(&leaves.maxes());
        Ok(ImplicitTree { inner, leaves })
    }

    pub fn len(&self) -> usize {
        self.leaves.n
    }

    pub fn is_empty(&self) -> bool {
        self.leaves.n == 0
    }

    /// Bytes of the I-segment (host and device) and of the L-segment (host).
    pub fn sizes(&self) -> (usize, usize) {
        (self.inner.bytes(), self.leaves.lines.len() * std::mem::size_of::<Line>())
    }

    pub fn search(&self, q: u64) -> Hit {
        self.leaves.search(self.inner.descend(q), q)
    }

    /// Entry at a position (position < len).
    pub fn entry(&self, position: usize) -> (u64, u64) {
        let l = &self.leaves.lines[position / 4];
        (l.0[position % 4], l.0[4 + position % 4])
    }

    /// Entries with lo <= key <= hi, in key order: the inner search finds
    /// the start, then the leaves are walked.
    pub fn range(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let start = self.search(lo).position as usize;
        (start..self.len()).map(|p| self.entry(p)).take_while(move |&(k, _)| k <= hi)
    }

    /// The CPU-only tree: inner and leaf search of a batch on all cores.
    pub fn search_cpu(&self, queries: &[u64], out: &mut [Hit]) {
        assert_eq!(queries.len(), out.len());
        out.par_chunks_mut(4096).zip(queries.par_chunks(4096)).for_each(|(o, q)| {
            let mut refs = [0u32; CPU_GROUP];
            for (o, q) in o.chunks_mut(CPU_GROUP).zip(q.chunks(CPU_GROUP)) {
                self.inner.descend_group(q, &mut refs[..q.len()]);
                for &r in &refs[..q.len()] {
                    prefetch(self.leaves.lines.as_ptr().wrapping_add(r as usize));
                }
                for ((o, &r), &q) in o.iter_mut().zip(&refs).zip(q) {
                    *o = self.leaves.search(r, q);
                }
            }
        });
    }

    /// HB+: the GPU walks the inner levels bucket by bucket; the CPU does the
    /// leaf step of each bucket on all cores while the next buckets run.
    pub fn search_gpu(&self, gpu: &Gpu, queries: &[u64], out: &mut [Hit], schedule: Schedule) -> Result<(), GpuError> {
        assert_eq!(queries.len(), out.len());
        self.inner.descend_gpu(gpu, queries, schedule, |off, refs| {
            let n = refs.len();
            leaf::leaf_step_par(&self.leaves, refs, &queries[off..off + n], &mut out[off..off + n]);
        })
    }
}
