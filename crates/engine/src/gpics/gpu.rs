//! G-PICS on the GPU: the level-by-level build (one thread per point for
//! counting and moving; the few nodes of a level are made on the host, by
//! the same code as the CPU build), the device image, and the two-step
//! batch search (kernels/gpics.cu).

use super::geom::Query;
use super::query::Hits;
use super::tree::{Node, Params, Points, QuadTree, NONE};
use crate::gpu::{kernels::GPICS, scan, DeviceBuffer, Gpu, GpuError};
use crate::launch;
use rayon::prelude::*;
use std::sync::Arc;

const BLOCK: u32 = 256;

/// A query as the kernels read it (40 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GQuery {
    kind: u32,
    pad: u32,
    a: f64,
    b: f64,
    c: f64,
    d: f64,
}

// SAFETY: repr(C), no padding beyond the explicit field, plain numbers.
unsafe impl crate::gpu::Plain for GQuery {}

impl From<&Query> for GQuery {
    fn from(q: &Query) -> GQuery {
        match *q {
            Query::Range(r) => GQuery { kind: 0, pad: 0, a: r.lx, b: r.ly, c: r.hx, d: r.hy },
            Query::Within { x, y, r } => GQuery { kind: 1, pad: 0, a: x, b: y, c: r, d: 0.0 },
            Query::Point { x, y } => GQuery { kind: 2, pad: 0, a: x, b: y, c: 0.0, d: 0.0 },
        }
    }
}

/// The tree on the device: nodes, points with their ids (tree points,
/// then the odd ones) and each leaf's slice (the odd leaf last).
pub struct DeviceTree {
    nodes: DeviceBuffer<Node>,
    x: DeviceBuffer<f64>,
    y: DeviceBuffer<f64>,
    id: DeviceBuffer<u64>,
    leaf_start: DeviceBuffer<u32>,
    leaf_count: DeviceBuffer<u32>,
    tree_leaves: u32,
    has_tree: u32,
    has_odd: u32,
}

fn grid(n: usize, gpu: &Gpu) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, gpu.info().multiprocessors as usize * 32) as u32
}

impl QuadTree {
    /// Builds on the GPU: per level, one kernel counts the points of each
    /// splitting node by quadrant, the host makes the (few) nodes, a second
    /// kernel moves every point down or into its leaf. Returns the host copy
    /// (the master) with its device image attached.
    pub fn build_gpu(gpu: &Gpu, input: &Points, params: Params) -> Result<QuadTree, GpuError> {
        let (pts, odd) = Self::separate(input);
        let n = pts.len();
        let (mut root, splits) = Self::root(&pts, params);
        let stream = gpu.new_stream()?;
        let (dx, dy, did) = (gpu.upload(&pts.x)?, gpu.upload(&pts.y)?, gpu.upload(&pts.id)?);
        let mut leaves = Vec::new();
        let mut tree = if !splits {
            root.leaf = 1;
            leaves.push(0);
            QuadTree { params, nodes: vec![root], leaves, pts, odd, device: Default::default() }
        } else {
            let (ox, oy, oid) = (gpu.alloc::<f64>(n)?, gpu.alloc::<f64>(n)?, gpu.alloc::<u64>(n)?);
            let at = gpu.upload(&vec![0u32; n])?;
            let mut nodes = vec![root];
            let mut split = vec![0u32];
            let mut split_no = vec![0u32];
            let mut next_free = 0u32;
            let n64 = n as u64;
            while !split.is_empty() {
                let dnodes = gpu.upload(&nodes)?;
                let dsplit = gpu.upload(&split_no)?;
                let counts = gpu.upload(&vec![0u32; split.len() * 4])?;
                let (xp, yp, atp, sp, np, cp) = (dx.ptr(), dy.ptr(), at.ptr(), dsplit.ptr(), dnodes.ptr(), counts.ptr());
                launch!(gpu, stream, GPICS, "gpics_count", (grid(n, gpu), BLOCK, 0), [xp, yp, n64, atp, sp, np, cp])?;
                let counts = counts.download()?;
                let plan = Self::plan_level(&mut nodes, &mut leaves, &mut next_free, &split, &counts, params);
                let dnodes = gpu.upload(&nodes)?;
                let mut dsplit_ext = split_no.clone();
                dsplit_ext.resize(nodes.len(), NONE);
                let dsplit = gpu.upload(&dsplit_ext)?;
                let cursor = gpu.upload(&vec![0u32; nodes.len()])?;
                let (idp, sp, np, curp, oxp, oyp, oidp) =
                    (did.ptr(), dsplit.ptr(), dnodes.ptr(), cursor.ptr(), ox.ptr(), oy.ptr(), oid.ptr());
                launch!(gpu, stream, GPICS, "gpics_move", (grid(n, gpu), BLOCK, 0), [xp, yp, idp, n64, atp, sp, np, curp, oxp, oyp, oidp])?;
                split_no = vec![NONE; nodes.len()];
                for (i, &s) in plan.next_split.iter().enumerate() {
                    split_no[s as usize] = i as u32;
                }
                split = plan.next_split;
            }
            let out = Points { x: gpu.download_staged(&ox)?, y: gpu.download_staged(&oy)?, id: gpu.download_staged(&oid)? };
            QuadTree { params, nodes, leaves, pts: out, odd, device: Default::default() }
        };
        tree.sort_leaves();
        tree.device_image(gpu)?;
        Ok(tree)
    }

    /// The device image, uploaded at first use and kept with the tree.
    pub fn device_image(&self, gpu: &Gpu) -> Result<Arc<DeviceTree>, GpuError> {
        let mut slot = self.device.lock();
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(self.upload(gpu)?);
        *slot = Some(d.clone());
        Ok(d)
    }

    fn upload(&self, gpu: &Gpu) -> Result<DeviceTree, GpuError> {
        let mut x = self.pts.x.clone();
        let mut y = self.pts.y.clone();
        let mut id = self.pts.id.clone();
        x.extend_from_slice(&self.odd.x);
        y.extend_from_slice(&self.odd.y);
        id.extend_from_slice(&self.odd.id);
        let mut start: Vec<u32> = self.leaves.iter().map(|&l| self.nodes[l as usize].start).collect();
        let mut count: Vec<u32> = self.leaves.iter().map(|&l| self.nodes[l as usize].count).collect();
        start.push(self.pts.len() as u32);
        count.push(self.odd.len() as u32);
        Ok(DeviceTree {
            nodes: gpu.upload(&self.nodes)?,
            x: gpu.upload(&x)?,
            y: gpu.upload(&y)?,
            id: gpu.upload(&id)?,
            leaf_start: gpu.upload(&start)?,
            leaf_count: gpu.upload(&count)?,
            tree_leaves: self.leaves.len() as u32,
            has_tree: (!self.pts.is_empty()) as u32,
            has_odd: (!self.odd.is_empty()) as u32,
        })
    }

    /// A batch of queries on the GPU (two steps); answers are ids.
    pub fn search_gpu(&self, gpu: &Gpu, queries: &[Query]) -> Result<Hits, GpuError> {
        Ok(self.search_gpu_bounded(gpu, queries, u64::MAX)?.expect("no bound"))
    }

    /// The same, or `Ok(Err(count))` where more than `limit` answers are
    /// counted (before any is written).
    pub fn search_gpu_bounded(&self, gpu: &Gpu, queries: &[Query], limit: u64) -> Result<Result<Hits, u64>, GpuError> {
        self.device_image(gpu)?.search(gpu, queries, limit)
    }

    /// kNN on the GPU, one warp per query (kernels/gpics.cu `gpics_knn_*`,
    /// the walk of knn.rs). The host answers what the kernel leaves:
    /// non-finite query points, the odd points where the tree holds fewer
    /// than k, and k beyond GPU_MAX_K (the CPU walk, all cores).
    pub fn knn_gpu(&self, gpu: &Gpu, points: &[(f64, f64)], k: usize) -> Result<super::Neighbors, GpuError> {
        if k == 0 || k > GPU_MAX_K || self.pts.is_empty() {
            return Ok(self.knn_cpu(points, k));
        }
        let dev = self.device_image(gpu)?;
        let mut out = super::Neighbors { offsets: vec![0], ..Default::default() };
        // Bounded answer buffers: at most 2^16 queries a launch.
        for part in points.chunks(1 << 16) {
            let (positions, counts) = dev.knn(gpu, part, k)?;
            // What the host answers: non-finite points, and the odd points
            // of a tree holding fewer than k.
            let host: Vec<Option<Vec<(u64, u64)>>> = part
                .par_iter()
                .enumerate()
                .map(|(q, &(x, y))| {
                    if !(x.is_finite() && y.is_finite()) {
                        return Some(self.knn_one(x, y, k));
                    }
                    if counts[q] as usize == k || self.odd.is_empty() {
                        return None;
                    }
                    let mut best = super::knn::Best::new(k);
                    for &p in &positions[q * k..q * k + counts[q] as usize] {
                        let p = p as usize;
                        best.offer(super::knn::dist_key(super::geom::distance(x, y, self.pts.x[p], self.pts.y[p])), self.pts.id[p]);
                    }
                    self.complete_with_odd(x, y, &mut best);
                    Some(best.into_sorted())
                })
                .collect();
            let len = |q: usize| host[q].as_ref().map_or(counts[q] as usize, |h| h.len());
            out.append(super::Neighbors::gather(part.len(), len, |q, ids, dists| {
                if let Some(h) = &host[q] {
                    for (j, &(key, id)) in h.iter().enumerate() {
                        ids[j] = id;
                        dists[j] = crate::keys::decode_f64(key);
                    }
                    return;
                }
                // The kernel's distance, recomputed from the point.
                let (x, y) = part[q];
                for (j, &p) in positions[q * k..q * k + ids.len()].iter().enumerate() {
                    let p = p as usize;
                    ids[j] = self.pts.id[p];
                    dists[j] = super::geom::distance(x, y, self.pts.x[p], self.pts.y[p]);
                }
            }));
        }
        Ok(out)
    }
}

/// The largest k the kNN kernels hold in registers (four 32-lane rows).
pub const GPU_MAX_K: usize = 128;

impl DeviceTree {
    /// One launch of the kNN kernel over finite and non-finite query
    /// points alike (the latter answered empty): each query's nearest
    /// points' positions at q * k, nearest first, and their count (4
    /// bytes a neighbour cross the bus; the host recomputes distances).
    fn knn(&self, gpu: &Gpu, points: &[(f64, f64)], k: usize) -> Result<(Vec<u32>, Vec<u32>), GpuError> {
        let m = points.len();
        if m == 0 {
            return Ok(Default::default());
        }
        let stream = gpu.new_stream()?;
        let flat: Vec<f64> = points.iter().flat_map(|&(x, y)| [x, y]).collect();
        let dq = gpu.upload(&flat)?;
        let out_pos = gpu.alloc::<u32>(m * k)?;
        let out_count = gpu.alloc::<u32>(m)?;
        let name = match k {
            0..=32 => "gpics_knn_32",
            33..=64 => "gpics_knn_64",
            _ => "gpics_knn_128",
        };
        const WARPS: usize = 4; // KNN_WARPS
        let blocks = m.div_ceil(WARPS).clamp(1, gpu.info().multiprocessors as usize * 64) as u32;
        let (np, xp, yp, idp, qp, pp, cp) =
            (self.nodes.ptr(), self.x.ptr(), self.y.ptr(), self.id.ptr(), dq.ptr(), out_pos.ptr(), out_count.ptr());
        let (m64, k32) = (m as u64, k as u32);
        launch!(gpu, stream, GPICS, name, (blocks, WARPS * 32, 0), [np, xp, yp, idp, qp, m64, k32, pp, cp])?;
        Ok((gpu.download_staged(&out_pos)?, gpu.download_staged(&out_count)?))
    }

    pub fn bytes(&self) -> usize {
        self.nodes.bytes() + self.x.bytes() + self.y.bytes() + self.id.bytes() + self.leaf_start.bytes() + self.leaf_count.bytes()
    }

    /// A batch of queries in G-PICS's two steps, answering ids (gathered
    /// on the device).
    fn search(&self, gpu: &Gpu, queries: &[Query], limit: u64) -> Result<Result<Hits, u64>, GpuError> {
        let m = queries.len();
        if m == 0 {
            return Ok(Ok(Hits { offsets: vec![0], ids: Vec::new() }));
        }
        let stream = gpu.new_stream()?;
        let slots = self.tree_leaves as usize + 1;
        let gq: Vec<GQuery> = queries.par_iter().map(GQuery::from).collect();
        let dq = gpu.upload(&gq)?;
        let m64 = m as u64;
        // Step I: count, scan, fill.
        let qcount = gpu.alloc::<u32>(m)?;
        let lcount = gpu.upload(&vec![0u32; slots])?;
        let (np, qp, qcp, lcp) = (self.nodes.ptr(), dq.ptr(), qcount.ptr(), lcount.ptr());
        let (ht, ho, tl) = (self.has_tree, self.has_odd, self.tree_leaves);
        launch!(gpu, stream, GPICS, "gpics_register_count", (grid(m, gpu), BLOCK, 0), [np, ht, ho, tl, qp, m64, qcp, lcp])?;
        let (qoff, pairs) = scan(gpu, &stream, &qcount, m)?;
        let (loff, _) = scan(gpu, &stream, &lcount, slots)?;
        let pairs = pairs as usize;
        let pair_query = gpu.alloc::<u32>(pairs)?;
        let pair_leaf = gpu.alloc::<u32>(pairs)?;
        let leaf_pairs = gpu.alloc::<u32>(pairs)?;
        let lcursor = gpu.upload(&vec![0u32; slots])?;
        let (qop, lop, lcurp, pqp, plp, lpp) = (qoff.ptr(), loff.ptr(), lcursor.ptr(), pair_query.ptr(), pair_leaf.ptr(), leaf_pairs.ptr());
        launch!(
            gpu,
            stream,
            GPICS,
            "gpics_register_fill",
            (grid(m, gpu), BLOCK, 0),
            [np, ht, ho, tl, qp, m64, qop, lop, lcurp, pqp, plp, lpp]
        )?;
        // Step II, one thread per pair in leaf order: count, scan, write.
        let pair_count = gpu.alloc::<u32>(pairs)?;
        let (xp, yp, lsp, lnp, pcp) = (self.x.ptr(), self.y.ptr(), self.leaf_start.ptr(), self.leaf_count.ptr(), pair_count.ptr());
        let (null, p64) = (0u64, pairs as u64);
        let idp = self.id.ptr();
        if pairs > 0 {
            launch!(
                gpu,
                stream,
                GPICS,
                "gpics_process",
                (grid(pairs, gpu), BLOCK, 0),
                [xp, yp, lsp, lnp, tl, lpp, plp, pqp, qp, p64, pcp, null, null, null]
            )?;
        }
        let (pair_off, total) = scan(gpu, &stream, &pair_count, pairs)?;
        if total > limit {
            return Ok(Err(total));
        }
        let out = gpu.alloc::<u64>(total as usize)?;
        let (pop, outp) = (pair_off.ptr(), out.ptr());
        if total > 0 {
            launch!(
                gpu,
                stream,
                GPICS,
                "gpics_process",
                (grid(pairs, gpu), BLOCK, 0),
                [xp, yp, lsp, lnp, tl, lpp, plp, pqp, qp, p64, pcp, pop, outp, idp]
            )?;
        }
        let res_off = gpu.alloc::<u64>(m + 1)?;
        let rop = res_off.ptr();
        launch!(gpu, stream, GPICS, "gpics_query_offsets", (grid(m + 1, gpu), BLOCK, 0), [qop, pop, m64, rop])?;
        let offsets = gpu.download_staged(&res_off)?.into_iter().map(|o| o as usize).collect();
        let ids = if total > 0 { gpu.download_staged(&out)? } else { Vec::new() };
        Ok(Ok(Hits { offsets, ids }))
    }
}
