//! Exact k nearest neighbours: per query, a depth-first walk of the
//! quadtree, nearest child first, that keeps the k best points by
//! (distance, id) and prunes every node whose box lies farther than the
//! k-th (ties by id, so answers are deterministic and equal on the CPU and
//! the GPU, kernels/gpics.cu `gpics_knn_*`). In a leaf (points in x order)
//! the 32 points around the query's x come first, then only the x-window
//! of the k-th distance. Distances are `point <-> point` (pg_hypot); NaN
//! sorts after +Infinity, as PostgreSQL orders floats.
//!
//! The earlier shape (a best-first search for each query's k-th distance,
//! then a within-distance batch and a selection) did the work twice and
//! read every point of a leaf of duplicates twice; see docs/notes.md.
//!
//! Points outside the tree (a non-finite coordinate) count only when the
//! tree holds fewer than k points; a non-finite query point (every
//! distance NaN or infinite) takes every point as a candidate.

use super::geom::{distance, Query};
use super::tree::{QuadTree, SharedMut, NONE, TRAVERSAL_STACK};
use crate::keys::{decode_f64, encode_f64};
use rayon::prelude::*;
use std::collections::BinaryHeap;

/// The k nearest of each query: `ids`/`dists` of query i at
/// `offsets[i]..offsets[i+1]`, nearest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Neighbors {
    pub offsets: Vec<usize>,
    pub ids: Vec<u64>,
    pub dists: Vec<f64>,
}

impl Neighbors {
    pub fn of(&self, q: usize) -> (&[u64], &[f64]) {
        let r = self.offsets[q]..self.offsets[q + 1];
        (&self.ids[r.clone()], &self.dists[r])
    }

    /// The answers of `m` queries, query q's `len(q)` neighbours written
    /// by `fill(q, ids, dists)`, on all cores.
    pub(crate) fn gather(m: usize, len: impl Fn(usize) -> usize, fill: impl Fn(usize, &mut [u64], &mut [f64]) + Sync) -> Neighbors {
        let mut offsets = Vec::with_capacity(m + 1);
        offsets.push(0);
        for q in 0..m {
            offsets.push(offsets[q] + len(q));
        }
        let total = offsets[m];
        let mut out = Neighbors { offsets, ids: vec![0; total], dists: vec![0.0; total] };
        let (ids, dists) = (SharedMut(out.ids.as_mut_ptr()), SharedMut(out.dists.as_mut_ptr()));
        let offsets = &out.offsets;
        (0..m).into_par_iter().for_each(|q| {
            let (at, n) = (offsets[q], offsets[q + 1] - offsets[q]);
            // SAFETY: query ranges [at, at + n) are disjoint and in bounds.
            let (i, d) = unsafe { (std::slice::from_raw_parts_mut(ids.at(at), n), std::slice::from_raw_parts_mut(dists.at(at), n)) };
            fill(q, i, d);
        });
        out
    }

    /// From each query's (distance key, id) pairs, nearest first.
    pub(crate) fn of_answers(answers: &[Vec<(u64, u64)>]) -> Neighbors {
        Neighbors::gather(
            answers.len(),
            |q| answers[q].len(),
            |q, ids, dists| {
                for (j, &(key, id)) in answers[q].iter().enumerate() {
                    ids[j] = id;
                    dists[j] = decode_f64(key);
                }
            },
        )
    }

    /// Appends another batch's answers.
    pub(crate) fn append(&mut self, o: Neighbors) {
        let base = self.ids.len();
        self.ids.extend_from_slice(&o.ids);
        self.dists.extend_from_slice(&o.dists);
        self.offsets.extend(o.offsets[1..].iter().map(|x| x + base));
    }
}

/// Total order of distances: NaN last.
#[inline(always)]
pub(crate) fn dist_key(d: f64) -> u64 {
    encode_f64(d)
}

/// The k best (distance key, id) pairs seen so far.
pub(crate) struct Best {
    k: usize,
    heap: BinaryHeap<(u64, u64)>,
    /// The k-th distance and its square, once k are held (a cheap test
    /// before the exact distance: only where the square is a normal,
    /// finite float, so its relative error stays tiny).
    thr: f64,
    thr2: Option<f64>,
}

impl Best {
    pub(crate) fn new(k: usize) -> Best {
        Best { k, heap: BinaryHeap::with_capacity(k + 1), thr: f64::INFINITY, thr2: None }
    }

    pub(crate) fn full(&self) -> bool {
        self.heap.len() >= self.k
    }

    /// The k-th key, once full.
    fn worst_key(&self) -> Option<u64> {
        if self.full() {
            self.heap.peek().map(|w| w.0)
        } else {
            None
        }
    }

    pub(crate) fn offer(&mut self, key: u64, id: u64) {
        if !self.full() {
            self.heap.push((key, id));
        } else if (key, id) < *self.heap.peek().expect("k > 0") {
            self.heap.pop();
            self.heap.push((key, id));
        } else {
            return;
        }
        if self.full() {
            self.thr = decode_f64(self.heap.peek().expect("k > 0").0);
            let t2 = self.thr * self.thr;
            self.thr2 = (t2.is_finite() && t2 >= 1e-290).then_some(t2);
        }
    }

    /// Whether a point at offsets (dx, dy) surely lies beyond the k-th
    /// distance: pg_hypot(dx, dy) is within a few ulps of the root of the
    /// squares, far inside the slack.
    #[inline(always)]
    fn surely_beyond(&self, dx: f64, dy: f64) -> bool {
        matches!(self.thr2, Some(t2) if dx * dx + dy * dy > t2 * (1.0 + 1e-12))
    }

    pub(crate) fn into_sorted(self) -> Vec<(u64, u64)> {
        self.heap.into_sorted_vec()
    }
}

impl QuadTree {
    /// The k nearest points of (x, y), (distance key, id) nearest first.
    pub(crate) fn knn_one(&self, x: f64, y: f64, k: usize) -> Vec<(u64, u64)> {
        let mut best = Best::new(k);
        if k == 0 {
            return Vec::new();
        }
        if !(x.is_finite() && y.is_finite()) {
            for pos in 0..self.len() {
                let (px, py, id) = self.point_at(pos);
                best.offer(dist_key(distance(x, y, px, py)), id);
            }
            return best.into_sorted();
        }
        if !self.pts.is_empty() {
            self.walk(x, y, &mut best);
        }
        self.complete_with_odd(x, y, &mut best);
        best.into_sorted()
    }

    /// Where the tree holds fewer than k points, the odd ones come next.
    pub(crate) fn complete_with_odd(&self, x: f64, y: f64, best: &mut Best) {
        if !best.full() {
            for i in 0..self.odd.len() {
                best.offer(dist_key(distance(x, y, self.odd.x[i], self.odd.y[i])), self.odd.id[i]);
            }
        }
    }

    /// The depth-first walk over the tree's points.
    fn walk(&self, x: f64, y: f64, best: &mut Best) {
        let mut stack = [0u32; TRAVERSAL_STACK];
        let mut top = 1;
        while top > 0 {
            top -= 1;
            let node = &self.nodes[stack[top] as usize];
            if best.worst_key().is_some_and(|w| dist_key(node.rect().min_dist(x, y)) > w) {
                continue;
            }
            if node.is_leaf() {
                self.scan_leaf(node.start as usize, node.count as usize, x, y, best);
                continue;
            }
            // Children nearest last, so that the nearest is walked first.
            let mut kids = [(0.0f64, 0u32); 4];
            let mut nk = 0;
            for &c in node.child.iter().filter(|&&c| c != NONE) {
                kids[nk] = (self.nodes[c as usize].rect().min_dist(x, y), c);
                nk += 1;
            }
            kids[..nk].sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
            for &(_, c) in &kids[..nk] {
                stack[top] = c;
                top += 1;
            }
        }
    }

    /// A leaf's points (sorted by (x, y, id)): the 32 around x first, then
    /// the rest of the x-window of the k-th distance. A leaf of one
    /// repeated point (first and last the same bits) offers its first k:
    /// the rest are as far and have larger ids.
    fn scan_leaf(&self, start: usize, count: usize, x: f64, y: f64, best: &mut Best) {
        let xs = &self.pts.x[start..start + count];
        let ys = &self.pts.y[start..start + count];
        if one_point(xs, ys) {
            for j in 0..count.min(best.k) {
                best.offer(dist_key(distance(x, y, xs[j], ys[j])), self.pts.id[start + j]);
            }
            return;
        }
        let (c0, c1) = first_chunk(xs, x);
        let offer = |j: usize, best: &mut Best| {
            let (px, py) = (xs[j], ys[j]);
            let (dx, dy) = (x - px, y - py);
            if !best.surely_beyond(dx, dy) {
                best.offer(dist_key(distance(x, y, px, py)), self.pts.id[start + j]);
            }
        };
        for j in c0..c1 {
            offer(j, best);
        }
        let window = if best.full() { Query::Within { x, y, r: best.thr }.x_window(xs) } else { 0..count };
        for j in window.filter(|&j| j < c0 || j >= c1) {
            offer(j, best);
        }
    }

    /// kNN on all CPU cores. An empty tree (an index's usual delta)
    /// answers at once: the pool's round trip and a vector a query cost a
    /// batch of 10^4 centres ~1 ms for nothing (H200 host).
    pub fn knn_cpu(&self, points: &[(f64, f64)], k: usize) -> Neighbors {
        if self.is_empty() {
            return Neighbors { offsets: vec![0; points.len() + 1], ids: Vec::new(), dists: Vec::new() };
        }
        let answers: Vec<Vec<(u64, u64)>> = points.par_iter().map(|&(x, y)| self.knn_one(x, y, k)).collect();
        Neighbors::of_answers(&answers)
    }
}

/// Whether a leaf's points are all one point, bit for bit (sorted, so the
/// first and the last tell).
pub(crate) fn one_point(xs: &[f64], ys: &[f64]) -> bool {
    let n = xs.len();
    n > 1 && xs[0].to_bits() == xs[n - 1].to_bits() && ys[0].to_bits() == ys[n - 1].to_bits()
}

/// The 32 positions of `xs` (ascending) around x: the GPU's first chunk
/// (kernels/gpics.cu, `first_chunk`).
pub(crate) fn first_chunk(xs: &[f64], x: f64) -> (usize, usize) {
    let at = xs.partition_point(|&px| px < x);
    let c0 = at.saturating_sub(16).min(xs.len().saturating_sub(32));
    (c0, (c0 + 32).min(xs.len()))
}
