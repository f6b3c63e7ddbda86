//! The GTS build, level by level on all cores. Every node of a level is a
//! contiguous range of the permutation; an internal node picks its pivot
//! by farthest-first traversal (the object farthest from every ancestor
//! pivot; the middle object at the root), sorts its range by (distance to
//! the pivot, object), and cuts it into `fanout` children of equal count.
//! Nodes are numbered level by level (child j of node i is
//! `i * fanout + j + 1`), so the tree is two flat arrays: nodes, and the
//! pivots of internal nodes.
//!
//! The height makes leaves hold `fanout` to `fanout²` objects (the
//! paper's "overfull last level"). Each child keeps the exact min and max
//! distance of its objects to the parent's pivot (not the next sibling's
//! min: duplicates can straddle a cut), and every object keeps its distance
//! to its leaf's routing pivot for filtering before the full distance.

use super::metric::Metric;
use rayon::prelude::*;

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Children per internal node (N_c).
    pub fanout: usize,
}

/// Vectors of one dimension with their ids (heap TIDs in the extension).
#[derive(Clone, Debug, Default)]
pub struct Vectors {
    pub dim: usize,
    pub data: Vec<f32>,
    pub ids: Vec<u64>,
}

impl Vectors {
    pub fn new(dim: usize) -> Vectors {
        Vectors { dim, data: Vec::new(), ids: Vec::new() }
    }
    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn get(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    pub fn push(&mut self, v: &[f32], id: u64) {
        assert_eq!(v.len(), self.dim);
        self.data.extend_from_slice(v);
        self.ids.push(id);
    }
}

/// A node: its range of the permutation and the [min, max] tree-metric
/// distance of its objects to its parent's pivot (unused at the root).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    pub min: f64,
    pub max: f64,
    pub offset: u64,
    pub size: u64,
}

/// What a search needs besides the leaves' objects: the nodes and the
/// internal nodes' pivots.
#[derive(Clone, Debug)]
pub struct Shape {
    pub metric: Metric,
    pub fanout: usize,
    /// Levels below the root (0: the root is the only leaf).
    pub height: usize,
    pub dim: usize,
    pub nodes: Vec<Node>,
    /// Pivot vectors of the internal nodes, in node order.
    pub pivots: Vec<f32>,
}

impl Shape {
    /// The shape of a tree without objects.
    pub fn empty(metric: Metric) -> Shape {
        Shape { metric, fanout: 2, height: 0, dim: 0, nodes: vec![Node { min: 0.0, max: 0.0, offset: 0, size: 0 }], pivots: Vec::new() }
    }
    /// Internal nodes (nodes numbered below this have children).
    pub fn internal(&self) -> usize {
        internal_nodes(self.fanout, self.height)
    }
    pub fn pivot(&self, node: usize) -> &[f32] {
        &self.pivots[node * self.dim..(node + 1) * self.dim]
    }
    pub fn child(&self, node: usize, j: usize) -> usize {
        node * self.fanout + j + 1
    }
    pub fn is_leaf(&self, node: usize) -> bool {
        node >= self.internal()
    }
    /// Leaves, as node numbers.
    pub fn leaves(&self) -> std::ops::Range<usize> {
        self.internal()..self.nodes.len()
    }
    pub fn host_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>() + self.pivots.len() * 4
    }
}

/// A built tree: its shape, the objects in leaf order (`order[p]` is the
/// input index at position p) and each position's distance to its leaf's
/// routing pivot.
#[derive(Clone, Debug)]
pub struct Tree {
    pub shape: Shape,
    pub order: Vec<u32>,
    pub pdist: Vec<f64>,
}

/// Nodes above the last level of a complete tree.
pub(super) fn internal_nodes(fanout: usize, height: usize) -> usize {
    (0..height).map(|l| fanout.pow(l as u32)).sum()
}

/// Levels below the root: as many as leave at least `fanout` objects per
/// leaf on average.
pub fn height_for(n: usize, fanout: usize) -> usize {
    let mut h = 0;
    let mut leaves = 1usize;
    while leaves.saturating_mul(fanout).saturating_mul(fanout) <= n {
        leaves *= fanout;
        h += 1;
    }
    h
}

/// The sizes of `fanout` equal-count children of `size` objects (the first
/// `size % fanout` one larger).
pub(super) fn child_sizes(size: u64, fanout: usize) -> impl Iterator<Item = u64> {
    let (q, r) = (size / fanout as u64, size % fanout as u64);
    (0..fanout as u64).map(move |j| q + u64::from(j < r))
}

impl Tree {
    /// Builds the tree of `v` on all cores.
    pub fn build(metric: Metric, v: &Vectors, params: Params) -> Tree {
        assert!(params.fanout >= 2);
        assert!(v.len() < u32::MAX as usize);
        let n = v.len();
        let fanout = params.fanout;
        let height = height_for(n, fanout);
        let internal = internal_nodes(fanout, height);
        let total = internal + fanout.pow(height as u32);
        let mut nodes = vec![Node { min: 0.0, max: 0.0, offset: 0, size: 0 }; total];
        nodes[0].size = n as u64;
        let mut pivots = vec![0f32; internal * v.dim];
        let mut order: Vec<u32> = (0..n as u32).collect();
        let mut pdist = vec![0f64; n];
        // Each object's distance to its nearest ancestor pivot (FFT).
        let mut nearest = vec![f64::INFINITY; n];
        let mut first = 0;
        for level in 0..height {
            let count = fanout.pow(level as u32);
            // The level's nodes own consecutive, disjoint ranges.
            let mut parts = Vec::with_capacity(count);
            let (mut o, mut p, mut d) = (&mut order[..], &mut pdist[..], &mut nearest[..]);
            for (node, n) in nodes.iter().enumerate().skip(first).take(count) {
                let size = n.size as usize;
                let (o1, o2) = std::mem::take(&mut o).split_at_mut(size);
                let (p1, p2) = std::mem::take(&mut p).split_at_mut(size);
                let (d1, d2) = std::mem::take(&mut d).split_at_mut(size);
                parts.push((node, o1, p1, d1));
                (o, p, d) = (o2, p2, d2);
            }
            let splits: Vec<(usize, Vec<f32>, Vec<Node>)> = parts
                .into_par_iter()
                .map(|(node, o, p, d)| {
                    let (pivot, children) = split(metric, v, o, p, d, nodes[node].offset, fanout, level == 0);
                    (node, pivot, children)
                })
                .collect();
            for (node, pivot, children) in splits {
                pivots[node * v.dim..(node + 1) * v.dim].copy_from_slice(&pivot);
                for (j, c) in children.into_iter().enumerate() {
                    nodes[node * fanout + j + 1] = c;
                }
            }
            first += count;
        }
        Tree { shape: Shape { metric, fanout, height, dim: v.dim, nodes, pivots }, order, pdist }
    }
}

/// Splits one node: picks its pivot, sorts its range by distance to it,
/// cuts it into children. Returns the pivot and the children.
fn split(
    metric: Metric,
    v: &Vectors,
    order: &mut [u32],
    pdist: &mut [f64],
    nearest: &mut [f64],
    offset: u64,
    fanout: usize,
    root: bool,
) -> (Vec<f32>, Vec<Node>) {
    let size = order.len();
    let empty = Node { min: f64::INFINITY, max: f64::NEG_INFINITY, offset, size: 0 };
    if size == 0 {
        return (vec![0.0; v.dim], vec![empty; fanout]);
    }
    // Farthest first: the object farthest from every ancestor pivot (the
    // first such position on ties).
    let at = if root { size / 2 } else { (0..size).fold(0, |best, i| if nearest[i] > nearest[best] { i } else { best }) };
    let pivot = v.get(order[at] as usize).to_vec();
    let mut rows: Vec<(f64, u32, f64)> = order
        .par_iter()
        .zip(nearest.par_iter())
        .map(|(&o, &near)| {
            let d = metric.metric_distance(v.get(o as usize), &pivot);
            (d, o, near.min(d))
        })
        .collect();
    rows.par_sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (i, (d, o, near)) in rows.into_iter().enumerate() {
        (pdist[i], order[i], nearest[i]) = (d, o, near);
    }
    let mut children = Vec::with_capacity(fanout);
    let mut start = 0usize;
    for s in child_sizes(size as u64, fanout) {
        let s = s as usize;
        children.push(if s == 0 {
            Node { offset: offset + start as u64, ..empty }
        } else {
            Node { min: pdist[start], max: pdist[start + s - 1], offset: offset + start as u64, size: s as u64 }
        });
        start += s;
    }
    (pivot, children)
}
