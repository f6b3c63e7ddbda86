//! L2 kNN over every object, exact, on all cores: the CPU twin of the GPU's
//! bounded brute force (kernels/gts.cu, `gts_l2_filter`). A float4 dot
//! product gives each (query, object) an approximate squared distance
//! a = |q|^2 + |o|^2 - 2 q.o with the proven error bound `error_bound`;
//! each query keeps the objects that may be among its k nearest
//! (a - E <= the k-th smallest a + E), and only those get the exact
//! distance (`Metric::distance`), which decides. Where the tree prunes
//! little (high dimensions), this reads each object once per query in
//! float4 instead of computing float8 distances.

use super::metric::{dot, Metric};
use super::search::Objects;
use rayon::prelude::*;

/// E for the squared norms `qsq` and `osq` of n-dimensional vectors: at
/// least twice the worst error of a float4 dot product of n terms in any
/// order (gamma_n |q||o| <= gamma_n (|q|^2 + |o|^2) / 2, counted twice in
/// a), of the float8 norms and sum and of a stored as float4 (u (|q|^2 +
/// |o|^2) each), plus underflow. The GPU kernel uses the same formula.
pub fn error_bound(n: usize, qsq: f64, osq: f64) -> f64 {
    (n + 16) as f64 * (f64::powi(2.0, -23) * (qsq + osq) + f64::powi(2.0, -125))
}

/// Above this share of all objects in the leaves a kNN search opens
/// (`search::opened_share`), the bounded brute force beats the tree: on
/// the H100 host it reads several times the objects a second of the
/// tree's searches (float4, shared by a tile of queries, against float8
/// distances read by one query), on the GPU and on the CPU.
pub const BRUTE_FORCE_SHARE: f64 = 0.05;

/// Objects a work item reads at a time (a few hundred KiB: they stay in
/// cache while each query of the tile reads them).
const CHUNK: usize = 512;
/// Queries that share a pass over the objects.
const TILE: usize = 16;

/// Squared norms (`Metric::L2`'s lane sums of v * v).
pub fn norms(objects: &Objects) -> Vec<f64> {
    let dim = objects.v.dim.max(1);
    objects.v.data.par_chunks(dim).map(|v| dot(v, v)).collect()
}

/// One query against the objects `range`: pushes (a, position) of those
/// whose lower bound is within `limit` (fused multiply-adds where the CPU
/// has them).
fn scan(q: &[f32], qsq: f64, objects: &Objects, norms: &[f64], range: std::ops::Range<usize>, limit: f64, out: &mut Vec<(f32, u32)>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the features were just detected.
        return unsafe { scan_fma(q, qsq, objects, norms, range, limit, out) };
    }
    scan_with(q, qsq, objects, norms, range, limit, out, false)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scan_fma(
    q: &[f32],
    qsq: f64,
    objects: &Objects,
    norms: &[f64],
    range: std::ops::Range<usize>,
    limit: f64,
    out: &mut Vec<(f32, u32)>,
) {
    scan_with(q, qsq, objects, norms, range, limit, out, true)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scan_with(
    q: &[f32],
    qsq: f64,
    objects: &Objects,
    norms: &[f64],
    range: std::ops::Range<usize>,
    limit: f64,
    out: &mut Vec<(f32, u32)>,
    fma: bool,
) {
    let dim = q.len();
    // error_bound, split into its two terms.
    let (rel, abs) = ((dim + 16) as f64 * f64::powi(2.0, -23), (dim + 16) as f64 * f64::powi(2.0, -125));
    for o in range {
        let v = objects.v.get(o);
        let mut acc = [0f32; 16];
        let (cq, cv) = (q.chunks_exact(16), v.chunks_exact(16));
        let (rq, rv) = (cq.remainder(), cv.remainder());
        for (x, y) in cq.zip(cv) {
            for l in 0..16 {
                acc[l] = if fma { x[l].mul_add(y[l], acc[l]) } else { acc[l] + x[l] * y[l] };
            }
        }
        let mut d: f32 = acc.iter().sum();
        for (x, y) in rq.iter().zip(rv) {
            d += x * y;
        }
        let a = qsq + norms[o] - 2.0 * d as f64;
        // Unknown (NaN) where the dot product or a is not finite in float4.
        let a = if d.is_finite() && a <= f32::MAX as f64 { a as f32 } else { f32::NAN };
        if a.is_nan() || a as f64 - (rel * (qsq + norms[o]) + abs) <= limit {
            out.push((a, o as u32));
        }
    }
}

/// One query's candidates: (a, position), and the k-th smallest upper
/// bound seen so far.
struct Candidates {
    list: Vec<(f32, u32)>,
    limit: f64,
}

/// Lower and upper bounds of a (NaN: unknown, not finite in float4).
fn bounds(a: f32, e: f64) -> (f64, f64) {
    if a.is_nan() {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else {
        (a as f64 - e, a as f64 + e)
    }
}

impl Candidates {
    /// Keeps those whose lower bound is within the k-th smallest upper.
    fn cut(&mut self, k: usize, e: impl Fn(u32) -> f64) {
        if self.list.len() >= k {
            let mut upper: Vec<f64> = self.list.iter().map(|&(a, o)| bounds(a, e(o)).1).collect();
            let (_, kth, _) = upper.select_nth_unstable_by(k - 1, |x, y| x.total_cmp(y));
            self.limit = self.limit.min(*kth);
        }
        let limit = self.limit;
        self.list.retain(|&(a, o)| bounds(a, e(o)).0 <= limit);
    }
}

/// The k nearest objects of each query (rows of `queries`) by L2, as
/// `search::knn` answers them: (id, distance), nearest first, ties by id.
/// `norms` are the objects' squared norms (`norms`).
pub fn knn_l2(objects: &Objects, norms: &[f64], queries: &[f32], k: usize) -> Vec<Vec<(u64, f64)>> {
    let dim = objects.v.dim.max(1);
    let n = objects.v.len();
    let m = queries.len() / dim;
    if k == 0 || n == 0 {
        return vec![Vec::new(); m];
    }
    let qsq: Vec<f64> = queries.par_chunks(dim).map(|q| dot(q, q)).collect();
    let tiles = m.div_ceil(TILE);
    // Enough work items for every core, in slices of whole chunks.
    let slices = (2 * rayon::current_num_threads()).div_ceil(tiles).clamp(1, n.div_ceil(CHUNK));
    let slice = n.div_ceil(slices).next_multiple_of(CHUNK);
    let items: Vec<(usize, usize)> = (0..tiles).flat_map(|t| (0..slices).map(move |s| (t, s))).collect();
    let found: Vec<Vec<Vec<(f32, u32)>>> = items
        .par_iter()
        .map(|&(t, s)| {
            let qs = t * TILE..(t * TILE + TILE).min(m);
            let mut cands: Vec<Candidates> = qs.clone().map(|_| Candidates { list: Vec::new(), limit: f64::INFINITY }).collect();
            let (start, end) = (s * slice, ((s + 1) * slice).min(n));
            for c in (start..end).step_by(CHUNK) {
                for (qi, cand) in qs.clone().zip(cands.iter_mut()) {
                    let q = &queries[qi * dim..(qi + 1) * dim];
                    scan(q, qsq[qi], objects, norms, c..(c + CHUNK).min(end), cand.limit, &mut cand.list);
                    if cand.list.len() >= (4 * k).max(64) {
                        cand.cut(k, |o| error_bound(dim, qsq[qi], norms[o as usize]));
                    }
                }
            }
            for (qi, cand) in qs.zip(cands.iter_mut()) {
                cand.cut(k, |o| error_bound(dim, qsq[qi], norms[o as usize]));
            }
            cands.into_iter().map(|c| c.list).collect()
        })
        .collect();
    (0..m)
        .into_par_iter()
        .map(|qi| {
            let (t, j) = (qi / TILE, qi % TILE);
            let mut all = Candidates { list: Vec::new(), limit: f64::INFINITY };
            for s in 0..slices {
                all.list.extend_from_slice(&found[t * slices + s][j]);
            }
            all.cut(k, |o| error_bound(dim, qsq[qi], norms[o as usize]));
            let q = &queries[qi * dim..(qi + 1) * dim];
            let mut hits: Vec<(f64, u64)> =
                all.list.iter().map(|&(_, o)| (Metric::L2.distance(q, objects.v.get(o as usize)), objects.v.ids[o as usize])).collect();
            hits.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            hits.truncate(k);
            hits.into_iter().map(|(d, id)| (id, d)).collect()
        })
        .collect()
}
