//! GTS on the GPU (kernels/gts.cu): the tree's objects on the device and
//! batched exact kNN and range search, level-synchronous over (query,
//! node) pairs as the paper has it:
//!
//! 1. every pair's pivot distance (one kernel for the whole level);
//! 2. for kNN, each query's bound tightened to the k-th smallest pivot
//!    distance of the level (pivots are objects, so k of them bound the
//!    k-th neighbour), counting only pivots some object of their node still
//!    holds (after deletions the pivot itself may be gone);
//! 3. the children that pass the ring test, counted, scanned and written
//!    as the next level's pairs, in query order;
//! 4. at the leaves, one block per query: the pivot-distance filter, exact
//!    distances (the CPU's bit for bit), the k nearest by (distance, id) or
//!    all within the radius.
//!
//! In few dimensions (up to `DEPTH_MAX_DIM`) a search opens a few small
//! leaves and that costs more than it saves: there a warp per query walks
//! the tree depth first instead (`Way::Depth`), as the CPU does.
//!
//! Memory (the paper's two-stage scheme): the whole batch goes down level
//! by level while the next level's pairs fit `pair_budget`; a level that
//! would not fit sends the batch back as query groups, each small enough,
//! run one after another. No batch size or radius can exhaust the device.

use super::bounded::BRUTE_FORCE_SHARE;
use super::search::Objects;
use super::tree::{Node, Shape};
use super::Metric;
use crate::gpu::{kernels::GTS, scan, DeviceBuffer, Gpu, GpuError};
use crate::launch;
use cudarc::driver::CudaStream;
use rayon::prelude::*;
use std::sync::Arc;

mod depth;
mod filter;
mod flat;
pub use filter::FILTER_MAX_K;
use filter::{filter_kernel, float4_filter, Space, SMALL_BATCH};
pub use flat::{FlatAnswers, Pair};

pub(super) const BLOCK: usize = 256;
/// The largest k the leaf kernel keeps in shared memory (its CAP / 2).
pub const MAX_GPU_K: usize = 1024;
/// gts.cu's CAP, PER_ROUND and OVERFLOW.
const CAP: usize = 2048;
const PER_ROUND: usize = 32;
const OVERFLOW: u32 = u32::MAX;

/// gts.cu's DEPTH_K and DEPTH_STACK: the largest k of the per-query
/// search, and its stack of nodes (a tree's fanout times height must stay
/// below it).
pub const DEPTH_MAX_K: usize = 32;
const DEPTH_STACK: usize = 128;
/// The most dimensions `Way::Auto` answers by the warp-per-query
/// searches (from 32 on, a kNN search opens so many leaves that the
/// bounded brute force is faster: docs/bench/gts-2d-1e7-h100.md).
pub const DEPTH_MAX_DIM: usize = 16;

/// Bytes of one (query, node) pair: query, node, parent distance, plus
/// the pivot distances, count and offset made for it.
const PAIR_BYTES: usize = 4 + 4 + 8 + 8 + 8 + 4 + 8;

/// The tree on the device: nodes, pivots, which pivots are still held by
/// an object of their node, and the objects in leaf order with their ids,
/// pivot distances and (cosine) squared norms.
pub struct DeviceTree {
    metric: Metric,
    fanout: usize,
    height: usize,
    dim: usize,
    objects: usize,
    empty: bool,
    nodes: DeviceBuffer<Node>,
    pivots: DeviceBuffer<f32>,
    held: DeviceBuffer<u8>,
    vectors: DeviceBuffer<f32>,
    pdist: DeviceBuffer<f64>,
    ids: DeviceBuffer<u64>,
    norms: DeviceBuffer<f64>,
    /// Bytes a query group's pairs or answers may take (None: a quarter of
    /// the device memory free when the batch starts).
    budget: Option<usize>,
    /// The bounded brute force's buffers for small batches.
    space: parking_lot::Mutex<Option<Space>>,
    /// The range search's first-pass answers (`depth.rs`), kept between
    /// batches: allocating tens of MB costs a batch of 10^5 2-d queries a
    /// share of its time.
    range_scratch: parking_lot::Mutex<Option<DeviceBuffer<Pair>>>,
    /// The flat answers of `batch` (before they become a vector per
    /// query), kept for the page-locked memory small batches' kernels
    /// write into: allocating it costs more than such a batch.
    answers: parking_lot::Mutex<FlatAnswers>,
}

/// A batch's answers: for each query, (id, distance) pairs (kNN nearest
/// first, ties by id; range by id), as `search::knn` / `search::range`.
pub type Answers = Vec<Vec<(u64, f64)>>;

pub(super) fn grid(n: usize, per_block: usize, gpu: &Gpu) -> usize {
    n.div_ceil(per_block).clamp(1, gpu.info().multiprocessors as usize * 32)
}

fn sync(gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
    gpu.guarded(|| stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize")))
}

/// For each internal node, whether an object of its subtree (its leaves'
/// objects, which lie contiguously in leaf order) has the pivot's vector
/// bit for bit: such an object is at the pivot's distance from any query,
/// so the pivot still counts as an object for the kNN bound.
pub fn held_pivots(shape: &Shape, objects: &Objects) -> Vec<u8> {
    let internal = shape.internal();
    let mut level_start = 0;
    let mut level = 0;
    let mut depth = vec![0usize; internal];
    for (i, d) in depth.iter_mut().enumerate() {
        while i >= level_start + shape.fanout.pow(level as u32) {
            level_start += shape.fanout.pow(level as u32);
            level += 1;
        }
        *d = level;
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    (0..internal)
        .into_par_iter()
        .map(|i| {
            let (mut first, mut last) = (i, i);
            for _ in depth[i]..shape.height {
                first = first * shape.fanout + 1;
                last = last * shape.fanout + shape.fanout;
            }
            let (a, b) = (shape.nodes[first].offset as usize, (shape.nodes[last].offset + shape.nodes[last].size) as usize);
            let p = bits(shape.pivot(i));
            u8::from((a..b.max(a)).any(|o| objects.v.get(o).iter().zip(&p).all(|(x, y)| x.to_bits() == *y)))
        })
        .collect()
}

impl DeviceTree {
    /// Uploads `shape` and `objects` (laid out as `shape`'s leaves say).
    pub fn upload(gpu: &Gpu, shape: &Shape, objects: &Objects) -> Result<DeviceTree, GpuError> {
        let n = objects.v.len();
        let stream = gpu.new_stream()?;
        let vectors = gpu.upload_staged(&objects.v.data)?;
        // Squared norms: cosine distances and L2 bounds use them.
        let norms = gpu.alloc::<f64>(n)?;
        let (vp, n64, dim, op) = (vectors.ptr(), n as u64, shape.dim as u32, norms.ptr());
        if n > 0 {
            launch!(gpu, stream, GTS, "gts_norms", (grid(n, BLOCK / 8, gpu), BLOCK, 0), [vp, n64, dim, op])?;
            sync(gpu, &stream)?;
        }
        Ok(DeviceTree {
            metric: shape.metric,
            fanout: shape.fanout,
            height: shape.height,
            dim: shape.dim,
            objects: n,
            empty: shape.nodes[0].size == 0 || n == 0,
            nodes: gpu.upload(&shape.nodes)?,
            pivots: gpu.upload(&shape.pivots)?,
            held: gpu.upload(&held_pivots(shape, objects))?,
            vectors,
            pdist: gpu.upload(&objects.pdist)?,
            ids: gpu.upload(&objects.v.ids)?,
            norms,
            budget: None,
            space: parking_lot::Mutex::new(None),
            range_scratch: parking_lot::Mutex::new(None),
            answers: parking_lot::Mutex::new(FlatAnswers::default()),
        })
    }

    /// Caps the bytes a query group's pairs or answers may take (tests:
    /// forces the batch into groups).
    pub fn limit_memory(&mut self, bytes: usize) {
        self.budget = Some(bytes);
    }

    pub fn bytes(&self) -> usize {
        self.nodes.bytes()
            + self.pivots.bytes()
            + self.held.bytes()
            + self.vectors.bytes()
            + self.pdist.bytes()
            + self.ids.bytes()
            + self.norms.bytes()
            + self.range_scratch.lock().as_ref().map_or(0, |b| b.bytes())
    }

    /// The k nearest objects of each query (rows of `queries`), as
    /// `search::knn`, k up to `MAX_GPU_K`: the tree's search, or for L2
    /// where the tree's leaves would hold more than a `BRUTE_FORCE_SHARE` of
    /// all objects per query, the bounded brute force (`Way::Filter`).
    pub fn knn(&self, gpu: &Gpu, queries: &[f32], k: usize) -> Result<Answers, GpuError> {
        self.batch(gpu, queries, Ask::Knn(k), Way::Auto)
    }

    /// The same, by one way only (benchmarks and tests).
    pub fn knn_by(&self, gpu: &Gpu, queries: &[f32], k: usize, way: Way) -> Result<Answers, GpuError> {
        self.batch(gpu, queries, Ask::Knn(k), way)
    }

    /// Every object within `r` of each query, as `search::range`.
    pub fn range(&self, gpu: &Gpu, queries: &[f32], r: f64) -> Result<Answers, GpuError> {
        self.range_each(gpu, queries, &vec![r; queries.len() / self.dim.max(1)])
    }

    /// Every object within `radii[i]` of query i, as `search::range_each`.
    pub fn range_each(&self, gpu: &Gpu, queries: &[f32], radii: &[f64]) -> Result<Answers, GpuError> {
        self.batch(gpu, queries, Ask::Range(radii, &Limit::new(usize::MAX)), Way::Auto)
    }

    /// `range_each`, or Err(answers found) once they pass `cap`: each way
    /// counts a group's or chunk's answers before it takes them to the
    /// host and stops there, so host memory stays bounded whatever the
    /// radii (as `search::range_rows_capped` on the CPU).
    pub fn range_each_capped(&self, gpu: &Gpu, queries: &[f32], radii: &[f64], cap: usize) -> Result<Result<Answers, usize>, GpuError> {
        let limit = Limit::new(cap);
        let answers = self.batch(gpu, queries, Ask::Range(radii, &limit), Way::Auto)?;
        Ok(limit.over().map_or(Ok(answers), Err))
    }

    /// The same, by one way only (`Tree` or `Depth`; benchmarks and tests).
    pub fn range_each_by(&self, gpu: &Gpu, queries: &[f32], radii: &[f64], way: Way) -> Result<Answers, GpuError> {
        self.batch(gpu, queries, Ask::Range(radii, &Limit::new(usize::MAX)), way)
    }

    /// `knn` into `out` (cleared first; its memory kept between batches):
    /// the answers of the warp-per-query search go there flat, with no
    /// vector per query.
    pub fn knn_into(&self, gpu: &Gpu, queries: &[f32], k: usize, out: &mut FlatAnswers) -> Result<(), GpuError> {
        self.batch_into(gpu, queries, Ask::Knn(k), Way::Auto, out)
    }

    /// `range_each` into `out`, as `knn_into`.
    pub fn range_each_into(&self, gpu: &Gpu, queries: &[f32], radii: &[f64], out: &mut FlatAnswers) -> Result<(), GpuError> {
        self.batch_into(gpu, queries, Ask::Range(radii, &Limit::new(usize::MAX)), Way::Auto, out)
    }

    fn batch_into(&self, gpu: &Gpu, queries: &[f32], ask: Ask, way: Way, out: &mut FlatAnswers) -> Result<(), GpuError> {
        out.clear();
        if !self.flat(gpu, queries, ask, way, out)? {
            out.extend_nested(&self.batch(gpu, queries, ask, way)?);
        }
        Ok(())
    }

    /// Answers the batch into `out` where the warp-per-query searches take
    /// it (false: not theirs).
    fn flat(&self, gpu: &Gpu, queries: &[f32], ask: Ask, way: Way, out: &mut FlatAnswers) -> Result<bool, GpuError> {
        let k = match ask {
            Ask::Knn(k) => Some(k),
            Ask::Range(..) => None,
        };
        let theirs = match way {
            Way::Depth => true,
            Way::Auto => self.auto_depth(k),
            _ => false,
        };
        if !theirs || self.empty || queries.is_empty() || k == Some(0) || self.check(ask, way).is_err() {
            return Ok(false);
        }
        match ask {
            Ask::Knn(k) => self.knn_depth(gpu, queries, k, out)?,
            Ask::Range(radii, limit) => {
                let (free, _) = gpu.memory()?;
                self.range_depth(gpu, queries, radii, self.budget.unwrap_or((free / 4).max(64 << 20)), limit, out)?
            }
        }
        Ok(true)
    }

    /// Refuses what a way cannot answer.
    fn check(&self, ask: Ask, way: Way) -> Result<(), GpuError> {
        if let Ask::Knn(k) = ask {
            if k > MAX_GPU_K {
                return Err(GpuError::Unavailable(format!("k = {k} is above the GPU search's limit of {MAX_GPU_K}")));
            }
            if matches!(way, Way::Filter | Way::FilterFloat4) && !self.filters(k) {
                return Err(GpuError::Unavailable(format!("the bounded brute force is for L2 and k <= {FILTER_MAX_K}")));
            }
            if way == Way::Depth && k > DEPTH_MAX_K {
                return Err(GpuError::Unavailable(format!("the per-query search is for k <= {DEPTH_MAX_K}")));
            }
        }
        if way == Way::Depth && !self.walks_depth() {
            return Err(GpuError::Unavailable(format!(
                "the per-query search is for vectors, fanout <= 32 and fanout x height below {DEPTH_STACK}"
            )));
        }
        Ok(())
    }

    fn batch(&self, gpu: &Gpu, queries: &[f32], ask: Ask, way: Way) -> Result<Answers, GpuError> {
        let m = queries.len() / self.dim.max(1);
        self.check(ask, way)?;
        if matches!(ask, Ask::Knn(0)) {
            return Ok(vec![Vec::new(); m]);
        }
        // (Another thread's batch holding the kept answers: fresh ones.)
        let mut own = FlatAnswers::default();
        let mut kept = self.answers.try_lock();
        let flat = kept.as_deref_mut().unwrap_or(&mut own);
        flat.clear();
        if self.flat(gpu, queries, ask, way, flat)? {
            return Ok(flat.nested());
        }
        if self.empty || m == 0 {
            return Ok(vec![Vec::new(); m]);
        }
        // (An explicit budget, tests' way to force query groups, keeps to
        // the way that honours it.)
        if let (Way::Filter | Way::FilterFloat4, Ask::Knn(k)) = (way, ask) {
            if m <= SMALL_BATCH && self.budget.is_none() {
                if let Some(answers) = self.filtered_small(gpu, queries, k, self.filter(gpu, way))? {
                    return Ok(answers);
                }
            }
        }
        let (free, _) = gpu.memory()?;
        // A quarter of what is free for the pairs of one level and the
        // next; the answers of one group get the same.
        let budget = self.budget.unwrap_or((free / 4).max(64 << 20));
        let mut out: Answers = Vec::with_capacity(m);
        // Query groups still to run, as (start, end).
        let mut groups = vec![(0, m)];
        while let Some((a, b)) = groups.pop() {
            let part = match ask {
                Ask::Range(radii, limit) => Ask::Range(&radii[a..b], limit),
                knn => knn,
            };
            match self.group(gpu, &queries[a * self.dim..b * self.dim], part, way, budget)? {
                // Past a range batch's limit the rest is not searched.
                Some(_) if ask.over() => break,
                Some(answers) => out.extend(answers),
                None if b - a > 1 => {
                    // Too many pairs or answers: halves, first half first.
                    let mid = a + (b - a) / 2;
                    groups.push((mid, b));
                    groups.push((a, mid));
                }
                None => return Err(GpuError::OutOfMemory { requested: budget + 1, free, total: free }),
            }
        }
        Ok(out)
    }

    /// The bounded brute force's kernel for `way` (`FilterFloat4`: the
    /// float4 one; else the one for this GPU).
    fn filter(&self, gpu: &Gpu, way: Way) -> filter::Filter {
        if way == Way::FilterFloat4 {
            float4_filter(self.dim)
        } else {
            filter_kernel(gpu, self.dim)
        }
    }

    fn filters(&self, k: usize) -> bool {
        self.metric == Metric::L2 && k <= FILTER_MAX_K
    }

    /// Whether the warp-per-query searches can walk this tree.
    fn walks_depth(&self) -> bool {
        self.metric != Metric::Levenshtein && self.fanout <= 32 && self.fanout * self.height.max(1) < DEPTH_STACK
    }

    /// Whether `Way::Auto` takes the warp-per-query search for kNN of `k`
    /// (or a range search, k None).
    fn auto_depth(&self, k: Option<usize>) -> bool {
        self.dim <= DEPTH_MAX_DIM && self.walks_depth() && k.is_none_or(|k| k <= DEPTH_MAX_K)
    }

    /// One query group; None when its pairs or answers would not fit
    /// `budget` bytes (a group of one query is always tried).
    fn group(&self, gpu: &Gpu, queries: &[f32], ask: Ask, way: Way, budget: usize) -> Result<Option<Answers>, GpuError> {
        let m = queries.len() / self.dim;
        let budget = if m == 1 { usize::MAX } else { budget };
        if let Ask::Knn(k) = ask {
            if m.saturating_mul(k * (8 + 8)) > budget {
                return Ok(None);
            }
        }
        let stream = gpu.new_stream()?;
        let dq = gpu.upload(queries)?;
        let qnorms = gpu.alloc::<f64>(m)?;
        let (dim, qp, m64, np) = (self.dim as u32, dq.ptr(), m as u64, qnorms.ptr());
        launch!(gpu, stream, GTS, "gts_norms", (grid(m, BLOCK / 8, gpu), BLOCK, 0), [qp, m64, dim, np])?;
        let g = Group { host: queries, m, stream, queries: dq, qnorms };
        match (way, ask) {
            (Way::Filter | Way::FilterFloat4, Ask::Knn(k)) => self.filtered(gpu, &g, k, budget, self.filter(gpu, way)),
            (Way::Naive, _) => self.leaves(gpu, &g, ask, None, budget),
            _ => {
                // Auto: L2 kNN takes the bounded brute force where the
                // tree's upper levels (descended once, for either way)
                // leave too much, or too many pairs to hold.
                let brute = |k| way == Way::Auto && self.filters(k);
                match (self.descend(gpu, &g, ask, budget)?, ask) {
                    (Some(d), Ask::Knn(k)) if brute(k) && !self.prunes_well(&g, &d) => {
                        self.filtered(gpu, &g, k, budget, self.filter(gpu, way))
                    }
                    (Some(d), _) => self.leaves(gpu, &g, ask, Some(&d), budget),
                    (None, Ask::Knn(k)) if brute(k) => self.filtered(gpu, &g, k, budget, self.filter(gpu, way)),
                    (None, _) => Ok(None),
                }
            }
        }
    }

    /// Whether the tree's leaves for this group hold at most a
    /// `BRUTE_FORCE_SHARE` of all objects per query (estimated from the
    /// leaf pairs of descent `d`), so that its search beats the bounded
    /// brute force.
    fn prunes_well(&self, g: &Group, d: &Descent) -> bool {
        let leaves = self.fanout.pow(self.height as u32);
        let per_query = d.pairs.len as f64 / g.m as f64 * self.objects as f64 / leaves as f64;
        per_query <= self.objects as f64 * BRUTE_FORCE_SHARE
    }

    /// The tree's levels for a group: the leaf pairs and each query's
    /// bound; None when a level's pairs would not fit `budget`.
    fn descend(&self, gpu: &Gpu, g: &Group, ask: Ask, budget: usize) -> Result<Option<Descent>, GpuError> {
        let m = g.m;
        let stream = &g.stream;
        let (metric, dim) = (self.metric as u32, self.dim as u32);
        let bound = match ask {
            Ask::Knn(_) => gpu.upload(&vec![f64::INFINITY; m])?,
            Ask::Range(radii, _) => gpu.upload(radii)?,
        };
        let mut pairs = Pairs {
            q: gpu.upload(&(0..m as u32).collect::<Vec<u32>>())?,
            node: gpu.upload(&vec![0u32; m])?,
            dp: gpu.upload(&vec![0f64; m])?,
            len: m,
        };
        let seg = gpu.alloc::<u64>(m + 1)?;
        let (m32, segp, bp) = (m as u32, seg.ptr(), bound.ptr());
        for _ in 0..self.height {
            let n = pairs.len;
            let n64 = n as u64;
            let d_op = gpu.alloc::<f64>(n)?;
            let d_metric = gpu.alloc::<f64>(n)?;
            let (qp, qnp, pp, hp, pq, pn, dop, dmp) = (
                g.queries.ptr(),
                g.qnorms.ptr(),
                self.pivots.ptr(),
                self.held.ptr(),
                pairs.q.ptr(),
                pairs.node.ptr(),
                d_op.ptr(),
                d_metric.ptr(),
            );
            launch!(
                gpu,
                stream,
                GTS,
                "gts_pivot_dist",
                (grid(n, BLOCK / 8, gpu), BLOCK, 0),
                [qp, qnp, pp, hp, dim, metric, pq, pn, n64, dop, dmp]
            )?;
            if let Ask::Knn(k) = ask {
                let k32 = k as u32;
                launch!(gpu, stream, GTS, "gts_segments", (grid(n + 1, BLOCK, gpu), BLOCK, 0), [pq, n64, m32, segp])?;
                launch!(gpu, stream, GTS, "gts_kth", (m, BLOCK, 0), [dop, segp, k32, bp])?;
            }
            let counts = gpu.alloc::<u32>(n)?;
            let (np, fanout, cp, null) = (self.nodes.ptr(), self.fanout as u32, counts.ptr(), 0u64);
            let eg = grid(n, BLOCK, gpu);
            launch!(
                gpu,
                stream,
                GTS,
                "gts_expand",
                (eg, BLOCK, 0),
                [pq, pn, dmp, n64, np, fanout, metric, bp, cp, null, null, null, null]
            )?;
            let (off, total) = scan(gpu, stream, &counts, n)?;
            let total = total as usize;
            if total.saturating_mul(PAIR_BYTES) > budget {
                return Ok(None);
            }
            let next = Pairs { q: gpu.alloc(total)?, node: gpu.alloc(total)?, dp: gpu.alloc(total)?, len: total };
            let (op, oq, on, od) = (off.ptr(), next.q.ptr(), next.node.ptr(), next.dp.ptr());
            launch!(gpu, stream, GTS, "gts_expand", (eg, BLOCK, 0), [pq, pn, dmp, n64, np, fanout, metric, bp, cp, op, oq, on, od])?;
            sync(gpu, stream)?;
            pairs = next;
        }
        let (n64, pq) = (pairs.len as u64, pairs.q.ptr());
        launch!(gpu, stream, GTS, "gts_segments", (grid(pairs.len + 1, BLOCK, gpu), BLOCK, 0), [pq, n64, m32, segp])?;
        Ok(Some(Descent { pairs, seg, bound }))
    }

    /// The leaf stage: exact distances of the objects of each query's leaf
    /// pairs (or, without a descent, of every object), block per query.
    fn leaves(&self, gpu: &Gpu, g: &Group, ask: Ask, d: Option<&Descent>, budget: usize) -> Result<Option<Answers>, GpuError> {
        let (m, stream) = (g.m, &g.stream);
        let (metric, dim) = (self.metric as u32, self.dim as u32);
        let (qp, qnp, vp, nop, pdp, idp, nodep) =
            (g.queries.ptr(), g.qnorms.ptr(), self.vectors.ptr(), self.norms.ptr(), self.pdist.ptr(), self.ids.ptr(), self.nodes.ptr());
        let (pnp, pdpp, segp, bp) = d.map_or((0, 0, 0, 0), |d| (d.pairs.node.ptr(), d.pairs.dp.ptr(), d.seg.ptr(), d.bound.ptr()));
        let objects = self.objects as u64;
        match ask {
            Ask::Knn(k) => {
                // Room for one round's candidates past keep_at (edit
                // distance: a thread an object, BLOCK a round).
                let per_round = if self.metric == Metric::Levenshtein { BLOCK } else { PER_ROUND };
                let (k32, keep_at) = (k as u32, (4 * k).clamp(512, CAP - per_round) as u32);
                let out_d = gpu.alloc::<f64>(m * k)?;
                let out_id = gpu.alloc::<u64>(m * k)?;
                let out_n = gpu.alloc::<u32>(m)?;
                let (odp, oip, onp) = (out_d.ptr(), out_id.ptr(), out_n.ptr());
                launch!(
                    gpu,
                    stream,
                    GTS,
                    "gts_knn_leaves",
                    (m, BLOCK, 0),
                    [qp, qnp, dim, metric, vp, nop, pdp, idp, nodep, pnp, pdpp, segp, objects, k32, keep_at, bp, odp, oip, onp]
                )?;
                Ok(Some(nearest(gpu, &out_d, &out_id, &out_n, k)?.into_iter().map(Option::unwrap_or_default).collect()))
            }
            Ask::Range(radii, limit) => {
                let radii = gpu.upload(radii)?;
                let rp = radii.ptr();
                self.gather_range(gpu, m, budget, limit, |cap, curp, oqp, oip, odp| {
                    launch!(
                        gpu,
                        stream,
                        GTS,
                        "gts_range_leaves",
                        (m, BLOCK, 0),
                        [qp, qnp, dim, metric, vp, nop, pdp, idp, nodep, pnp, pdpp, segp, objects, rp, cap, curp, oqp, oip, odp]
                    )
                })
            }
        }
    }

    /// A range search's answers, written by `launch(cap, cursor, out_q,
    /// out_id, out_d)` at a cursor (up to cap of them; the cursor counts
    /// all): run again with room for all when they did not fit, None when
    /// they would not fit `budget`; none taken (empty answers) past `limit`.
    fn gather_range(
        &self,
        gpu: &Gpu,
        m: usize,
        budget: usize,
        limit: &Limit,
        launch: impl Fn(u64, u64, u64, u64, u64) -> Result<(), GpuError>,
    ) -> Result<Option<Answers>, GpuError> {
        let room = budget / (4 + 8 + 8);
        let mut cap = room.min(m.saturating_mul(64)).max(1024);
        loop {
            let cursor = gpu.upload(&[0u64])?;
            let (out_q, out_id, out_d) = (gpu.alloc::<u32>(cap)?, gpu.alloc::<u64>(cap)?, gpu.alloc::<f64>(cap)?);
            launch(cap as u64, cursor.ptr(), out_q.ptr(), out_id.ptr(), out_d.ptr())?;
            let total = cursor.download()?[0] as usize;
            if total > cap {
                if total > room {
                    return Ok(None);
                }
                cap = total;
                continue;
            }
            if !limit.take(total) {
                return Ok(Some(vec![Vec::new(); m]));
            }
            let q = gpu.download_staged_first(&out_q, total)?;
            let id = gpu.download_staged_first(&out_id, total)?;
            let d = gpu.download_staged_first(&out_d, total)?;
            // By query then id, on all cores; then each query's run.
            let mut rows: Vec<(u32, u64, f64)> = (0..total).into_par_iter().map(|i| (q[i], id[i], d[i])).collect();
            rows.par_sort_unstable_by_key(|r| (r.0, r.1));
            let answers = (0..m as u32)
                .into_par_iter()
                .map(|qq| {
                    let (a, b) = (rows.partition_point(|r| r.0 < qq), rows.partition_point(|r| r.0 <= qq));
                    rows[a..b].iter().map(|r| (r.1, r.2)).collect()
                })
                .collect();
            return Ok(Some(answers));
        }
    }
}

/// Each query's k nearest as the kernels wrote them (None: the query's
/// candidates overflowed).
fn nearest(
    gpu: &Gpu,
    d: &DeviceBuffer<f64>,
    id: &DeviceBuffer<u64>,
    n: &DeviceBuffer<u32>,
    k: usize,
) -> Result<Vec<Option<Vec<(u64, f64)>>>, GpuError> {
    let (d, id, n) = (gpu.download_staged(d)?, gpu.download_staged(id)?, gpu.download_staged(n)?);
    Ok(n.par_iter()
        .enumerate()
        .map(|(q, &c)| (c != OVERFLOW).then(|| (0..c as usize).map(|i| (id[q * k + i], d[q * k + i])).collect()))
        .collect())
}

/// How a batch is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// The tree, or for L2 kNN where the tree prunes little, `Filter`.
    Auto,
    /// GTS: level by level, then the leaves.
    Tree,
    /// Every object through the leaf kernel (the plain floor).
    Naive,
    /// L2 kNN over every object: a matrix-multiply pass bounds each
    /// distance (float8 products on sm_90's tensor cores, float4 products
    /// elsewhere), an exact recheck decides among the few that may be in.
    Filter,
    /// `Filter` with the float4 kernel whatever the GPU (tests and
    /// benchmarks: on an H100 it is the one other GPUs run).
    FilterFloat4,
    /// kNN (k <= `DEPTH_MAX_K`) or range search by a warp per query
    /// walking the tree depth first (vectors, fanout <= 32); `Auto` takes
    /// it up to `DEPTH_MAX_DIM` dimensions.
    Depth,
}

/// A query group on the device: its queries and their squared norms.
struct Group<'a> {
    host: &'a [f32],
    m: usize,
    stream: Arc<CudaStream>,
    queries: DeviceBuffer<f32>,
    qnorms: DeviceBuffer<f64>,
}

/// The leaf pairs of a group, their segments by query, each query's bound.
struct Descent {
    pairs: Pairs,
    seg: DeviceBuffer<u64>,
    bound: DeviceBuffer<f64>,
}

#[derive(Clone, Copy, Debug)]
enum Ask<'a> {
    Knn(usize),
    /// One radius per query; the answers the batch may take.
    Range(&'a [f64], &'a Limit),
}

impl Ask<'_> {
    /// Whether a range batch has passed its limit.
    fn over(&self) -> bool {
        matches!(self, Ask::Range(_, l) if l.over().is_some())
    }
}

/// The most answers a range batch takes to the host (`range_each_capped`),
/// and how many its groups and chunks found so far.
#[derive(Debug)]
struct Limit {
    cap: usize,
    found: std::cell::Cell<usize>,
}

impl Limit {
    fn new(cap: usize) -> Limit {
        Limit { cap, found: std::cell::Cell::new(0) }
    }

    /// Counts `n` more answers: whether they are still within the cap
    /// (then the caller takes them).
    fn take(&self, n: usize) -> bool {
        self.found.set(self.found.get().saturating_add(n));
        self.found.get() <= self.cap
    }

    /// The answers found, once past the cap.
    fn over(&self) -> Option<usize> {
        (self.found.get() > self.cap).then_some(self.found.get())
    }
}

/// One level's (query, node) pairs, in query order, with each pair's
/// parent pivot distance (tree metric).
struct Pairs {
    q: DeviceBuffer<u32>,
    node: DeviceBuffer<u32>,
    dp: DeviceBuffer<f64>,
    len: usize,
}
