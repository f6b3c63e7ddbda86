//! The GTS build on the GPU (kernels/gts.cu's build section), level by
//! level as the paper's Alg. 1-3: per level, one block per node picks its
//! pivot (farthest-first), one kernel measures every object against its
//! node's pivot, and one global stable sort by (node, distance, object)
//! orders every node's range at once. For L2, L1 and edit distance it
//! returns the tree `Tree::build` returns, bit for bit (the distances are
//! the CPU's).
//!
//! Cosine: the device works in the operator's units (1 - cos, the CPU's
//! bits) and the host turns what it keeps (rings, pivot distances) into
//! angles with the CPU's acos, which orders alike: the tree's stored
//! values are what the CPU computes (`gpu_metric_check` recomputes them
//! bit for bit), though where two distances share one angle their order
//! (and so a pivot or a cut) may differ from the CPU build's. The GPU's
//! own acos may round otherwise.
//!
//! The node layout (every node's offset and size) depends only on the
//! number of objects, so the host lays it out first; the device fills in
//! the pivots and the rings.

use super::gpu::{grid, BLOCK};
use super::metric::Metric;
use super::tree::{child_sizes, height_for, internal_nodes, Node, Params, Shape, Tree, Vectors};
use crate::gpu::kernels::GTS;
use crate::gpu::sort::sort_pairs;
use crate::gpu::{Gpu, GpuError};
use crate::launch;
use rayon::prelude::*;

/// Every node's offset and size, as the CPU build leaves them (rings
/// unset: [0, 0] at the root, [inf, -inf] for empty nodes).
fn layout(n: usize, fanout: usize, height: usize) -> Vec<Node> {
    let total = internal_nodes(fanout, height) + fanout.pow(height as u32);
    let mut nodes = vec![Node { min: 0.0, max: 0.0, offset: 0, size: 0 }; total];
    nodes[0].size = n as u64;
    for i in 0..internal_nodes(fanout, height) {
        let mut start = nodes[i].offset;
        for (j, s) in child_sizes(nodes[i].size, fanout).enumerate() {
            let empty = s == 0;
            nodes[i * fanout + j + 1] = Node {
                min: if empty { f64::INFINITY } else { 0.0 },
                max: if empty { f64::NEG_INFINITY } else { 0.0 },
                offset: start,
                size: s,
            };
            start += s;
        }
    }
    nodes
}

/// Builds the tree of `v` on the GPU.
pub fn build_gpu(gpu: &Gpu, metric: Metric, v: &Vectors, params: Params) -> Result<Tree, GpuError> {
    assert!(params.fanout >= 2);
    assert!(v.len() < u32::MAX as usize);
    let (n, dim, fanout) = (v.len(), v.dim, params.fanout);
    let height = height_for(n, fanout);
    let mut nodes = layout(n, fanout, height);
    let internal = internal_nodes(fanout, height);
    if height == 0 {
        return Ok(Tree {
            shape: Shape { metric, fanout, height, dim, nodes, pivots: Vec::new() },
            order: (0..n as u32).collect(),
            pdist: vec![0.0; n],
        });
    }
    let stream = gpu.new_stream()?;
    let vectors = gpu.upload_staged(&v.data)?;
    let norms = gpu.alloc::<f64>(if metric == Metric::Cosine { n } else { 0 })?;
    let (vp, n64, dim32, metric32) = (vectors.ptr(), n as u64, dim as u32, metric as u32);
    if metric == Metric::Cosine {
        let np = norms.ptr();
        launch!(gpu, stream, GTS, "gts_norms", (grid(n, BLOCK / 8, gpu), BLOCK, 0), [vp, n64, dim32, np])?;
    }
    let pivots = gpu.alloc::<f32>(internal * dim)?;
    let (mut order, mut nearest) = (gpu.alloc::<u32>(n)?, gpu.alloc::<f64>(n)?);
    let (ordp, nearp) = (order.ptr(), nearest.ptr());
    launch!(gpu, stream, GTS, "gts_build_init", (grid(n, BLOCK, gpu), BLOCK, 0), [ordp, nearp, n64])?;
    let pdist = gpu.alloc::<f64>(n)?;
    let dist = gpu.alloc::<f64>(n)?;
    let piv = gpu.alloc::<u32>(fanout.pow(height as u32 - 1))?;
    let (mut order2, mut nearest2) = (gpu.alloc::<u32>(n)?, gpu.alloc::<f64>(n)?);
    // Every node's offset and size, once: a level's nodes, and the next
    // level's (their children), are slices of them.
    let offsets = gpu.upload(&nodes.iter().map(|x| x.offset).collect::<Vec<_>>())?;
    let sizes = gpu.upload(&nodes.iter().map(|x| x.size).collect::<Vec<_>>())?;
    let at = |buf: &crate::gpu::DeviceBuffer<u64>, node: usize| buf.ptr() + (node * 8) as u64;
    let mut first = 0;
    for level in 0..height {
        let count = fanout.pow(level as u32);
        let (op, sp, ordp, nearp, pp) = (at(&offsets, first), at(&sizes, first), order.ptr(), nearest.ptr(), piv.ptr());
        let pivp = pivots.ptr() + (first * dim * 4) as u64;
        let root = u32::from(level == 0);
        launch!(gpu, stream, GTS, "gts_build_pivots", (count, BLOCK, 0), [vp, dim32, ordp, nearp, op, sp, root, pp, pivp])?;
        let keys = gpu.alloc::<u64>(n)?;
        let vals = gpu.alloc::<u32>(n)?;
        let (count32, dp, kp, valp, normp) = (count as u32, dist.ptr(), keys.ptr(), vals.ptr(), norms.ptr());
        let per = if metric == Metric::Levenshtein { 1 } else { 8 };
        launch!(
            gpu,
            stream,
            GTS,
            "gts_build_distances",
            (grid(n, BLOCK / per, gpu), BLOCK, 0),
            [vp, normp, dim32, metric32, ordp, n64, op, count32, pp, dp, nearp, kp, valp]
        )?;
        // By distance (ties stay in object order), then by node.
        let (_, perm) = sort_pairs(gpu, &stream, keys, vals, n, 64)?;
        let perm = if count > 1 {
            let node_keys = gpu.alloc::<u64>(n)?;
            let (permp, nkp) = (perm.ptr(), node_keys.ptr());
            launch!(gpu, stream, GTS, "gts_build_node_keys", (grid(n, BLOCK, gpu), BLOCK, 0), [permp, n64, op, count32, nkp])?;
            sort_pairs(gpu, &stream, node_keys, perm, n, u64::BITS - (count as u64 - 1).leading_zeros())?.1
        } else {
            perm
        };
        let (permp, o2, pdp, n2) = (perm.ptr(), order2.ptr(), pdist.ptr(), nearest2.ptr());
        launch!(gpu, stream, GTS, "gts_build_gather", (grid(n, BLOCK, gpu), BLOCK, 0), [permp, n64, ordp, dp, nearp, o2, pdp, n2])?;
        std::mem::swap(&mut order, &mut order2);
        std::mem::swap(&mut nearest, &mut nearest2);
        // The children's rings, from the sorted distances.
        let m = count * fanout;
        let rings = gpu.alloc::<f64>(2 * m)?;
        let (cop, csp, rp, m64) = (at(&offsets, first + count), at(&sizes, first + count), rings.ptr(), m as u64);
        launch!(gpu, stream, GTS, "gts_build_rings", (grid(m, BLOCK, gpu), BLOCK, 0), [pdp, cop, csp, m64, rp])?;
        for (c, r) in nodes[first + count..first + count + m].iter_mut().zip(rings.download()?.chunks_exact(2)) {
            if c.size > 0 {
                (c.min, c.max) = (metric.to_metric(r[0]), metric.to_metric(r[1]));
            }
        }
        first += count;
    }
    let shape = Shape { metric, fanout, height, dim, nodes, pivots: gpu.download_staged(&pivots)? };
    let mut pdist = gpu.download_staged(&pdist)?;
    if metric == Metric::Cosine {
        pdist.par_iter_mut().for_each(|d| *d = metric.to_metric(*d));
    }
    Ok(Tree { shape, order: gpu.download_staged(&order)?, pdist })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's layout is the CPU build's: offsets, sizes, and the rings
    /// of empty nodes.
    #[test]
    fn layout_is_the_cpu_builds() {
        let mut rng = crate::rng::SplitMix64::new(3);
        for (n, fanout) in [(0, 2), (3, 2), (4, 2), (15, 4), (16, 4), (17, 4), (401, 4), (1000, 3), (4000, 20), (9999, 7)] {
            let mut v = Vectors::new(2);
            for i in 0..n {
                v.push(&[rng.unit() as f32, rng.unit() as f32], i as u64);
            }
            let tree = Tree::build(Metric::L2, &v, Params { fanout });
            let got = layout(n, fanout, tree.shape.height);
            assert_eq!(got.len(), tree.shape.nodes.len(), "n = {n}, fanout = {fanout}");
            for (i, (g, w)) in got.iter().zip(&tree.shape.nodes).enumerate() {
                assert_eq!((g.offset, g.size), (w.offset, w.size), "n = {n}, fanout = {fanout}, node {i}");
                if w.size == 0 {
                    assert_eq!((g.min, g.max), (w.min, w.max), "n = {n}, fanout = {fanout}, empty node {i}");
                }
            }
        }
    }
}
