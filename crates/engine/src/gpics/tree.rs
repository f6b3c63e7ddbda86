//! The space-driven quadtree (a PR quadtree) of G-PICS: a node holding more
//! than MC points splits into its four quadrants at the midpoint of its box,
//! until MH levels; only non-empty nodes exist; each leaf's points are one
//! contiguous slice of SoA arrays (x[], y[], id[]).
//!
//! Points with a non-finite coordinate cannot be placed in a quadrant; they
//! are kept aside (`odd`) and every query checks them directly, so answers
//! stay PostgreSQL's for any input.

use super::geom::Rect;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

pub const NONE: u32 = u32::MAX;

/// A node in one 64-byte line: its box, its children by quadrant (NONE for
/// an empty quadrant), its slice of the point arrays when a leaf.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Node {
    pub b: [f64; 4], // lx, ly, hx, hy
    pub child: [u32; 4],
    pub start: u32,
    pub count: u32,
    /// 1 + leaf number for a leaf, 0 for a link node.
    pub leaf: u32,
    pub depth: u32,
}

// SAFETY: plain repr(C) data without padding (4 f64 + 8 u32 = 64 bytes).
unsafe impl crate::gpu::Plain for Node {}
const _: () = assert!(std::mem::size_of::<Node>() == 64);

impl Default for Node {
    fn default() -> Self {
        Node { b: [0.0; 4], child: [NONE; 4], start: 0, count: 0, leaf: 0, depth: 0 }
    }
}

impl Node {
    pub fn rect(&self) -> Rect {
        Rect { lx: self.b[0], ly: self.b[1], hx: self.b[2], hy: self.b[3] }
    }
    pub fn is_leaf(&self) -> bool {
        self.leaf != 0
    }
}

/// Which quadrant of box `b` holds (x, y): bit 0 = right half, bit 1 = top
/// half; a point on a midline goes right/up. The GPU kernels use the same
/// rule (kernels/gpics.cu, `quadrant`).
#[inline(always)]
pub fn quadrant(b: &[f64; 4], x: f64, y: f64) -> usize {
    let cx = 0.5 * (b[0] + b[2]);
    let cy = 0.5 * (b[1] + b[3]);
    ((x >= cx) as usize) | (((y >= cy) as usize) << 1)
}

/// The box of quadrant q of box b.
pub fn quadrant_box(b: &[f64; 4], q: usize) -> [f64; 4] {
    let cx = 0.5 * (b[0] + b[2]);
    let cy = 0.5 * (b[1] + b[3]);
    let (lx, hx) = if q & 1 == 0 { (b[0], cx) } else { (cx, b[2]) };
    let (ly, hy) = if q & 2 == 0 { (b[1], cy) } else { (cy, b[3]) };
    [lx, ly, hx, hy]
}

/// A span [a, a + 2^k] holding [lo, hi], with a a multiple of 2^(k-1)
/// (so that it may straddle 0); [lo, hi] itself if none fits in a float.
pub(crate) fn dyadic(lo: f64, hi: f64) -> (f64, f64) {
    let ext = (hi - lo).max(lo.abs().max(hi.abs()) * 1e-12).max(1e-300);
    let mut span = 2f64.powi(ext.log2().ceil() as i32);
    for _ in 0..4 {
        let a = (lo / (span / 2.0)).floor() * (span / 2.0);
        if a + span >= hi && a <= lo && (a + span).is_finite() {
            return (a, a + span);
        }
        span *= 2.0;
    }
    (lo, hi)
}

/// The deepest a tree may be (the root is level 1). A traversal's stack
/// holds at most 3 entries a level (4 children pushed for the one popped),
/// so `TRAVERSAL_STACK` bounds it; the kernels use the same number.
pub const MAX_HEIGHT: usize = 128;
pub const TRAVERSAL_STACK: usize = 3 * MAX_HEIGHT + 2;

/// Build parameters: MC (leaf capacity) and MH (maximum height, the root
/// being level 1). The paper's experiments use MC = 1024, MH = 14; on
/// skewed data (one far outlier, a dense city in a sparse country) 14
/// levels leave a leaf with most of the points, so the default is the
/// most levels: a node splits while it holds more than MC points and its
/// box can still be halved in float8, and only data that needs the depth
/// gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub mc: usize,
    pub mh: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params { mc: 1024, mh: MAX_HEIGHT }
    }
}

impl Params {
    /// Whether a node at `depth` with `count` points and box `b` splits:
    /// over capacity, above MH (and MAX_HEIGHT), and a box that halving
    /// still shrinks in x or in y (points closer than float8 can split
    /// stay together in one leaf, as exact duplicates do).
    pub fn may_split(&self, count: usize, depth: usize, b: &[f64; 4]) -> bool {
        let halves = |lo: f64, hi: f64| {
            let mid = 0.5 * (lo + hi);
            lo < mid && mid < hi
        };
        count > self.mc && depth < self.mh.min(MAX_HEIGHT) && (halves(b[0], b[2]) || halves(b[1], b[3]))
    }
}

/// Points in SoA form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Points {
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub id: Vec<u64>,
}

impl Points {
    pub fn len(&self) -> usize {
        self.x.len()
    }
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }
    pub fn push(&mut self, x: f64, y: f64, id: u64) {
        self.x.push(x);
        self.y.push(y);
        self.id.push(id);
    }
}

pub struct QuadTree {
    pub params: Params,
    /// Nodes, root first, children after their parents (level order).
    pub nodes: Vec<Node>,
    /// Node index of each leaf, by leaf number.
    pub leaves: Vec<u32>,
    /// The points, leaf by leaf.
    pub pts: Points,
    /// Points with a non-finite coordinate, outside the tree.
    pub odd: Points,
    /// The device image, made at first GPU use (or by the GPU build).
    pub(crate) device: parking_lot::Mutex<Option<std::sync::Arc<super::gpu::DeviceTree>>>,
}

/// What one level of a build decided: the children made and where points go.
pub(crate) struct LevelPlan {
    /// For each splitting node of this level (by split index), its four
    /// child node indices (NONE for empty quadrants).
    pub children: Vec<[u32; 4]>,
    /// Node indices of the next level's splitting nodes.
    pub next_split: Vec<u32>,
}

impl QuadTree {
    /// The root box: the bounding box of the finite points (a point box
    /// for none), widened on each axis to a power-of-two span aligned to
    /// that span (at most 4x wider), so that every midpoint is exact and
    /// a root grown by doubling has the old root exactly as a quadrant
    /// (bulk updates re-root instead of rebuilding).
    pub(crate) fn bounds(pts: &Points) -> [f64; 4] {
        let (lx, ly, hx, hy) =
            pts.x.par_iter().zip(pts.y.par_iter()).filter(|(x, y)| x.is_finite() && y.is_finite()).map(|(&x, &y)| (x, y, x, y)).reduce(
                || (f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY),
                |a, b| (a.0.min(b.0), a.1.min(b.1), a.2.max(b.2), a.3.max(b.3)),
            );
        if lx > hx {
            return [0.0; 4];
        }
        let (ax, bx) = dyadic(lx, hx);
        let (ay, by) = dyadic(ly, hy);
        [ax, ay, bx, by]
    }

    /// Splits the input into tree points and odd (non-finite) points.
    pub(crate) fn separate(input: &Points) -> (Points, Points) {
        if input.x.par_iter().zip(input.y.par_iter()).all(|(x, y)| x.is_finite() && y.is_finite()) {
            return (input.clone(), Points::default());
        }
        let mut tree = Points::default();
        let mut odd = Points::default();
        for i in 0..input.len() {
            let (x, y, id) = (input.x[i], input.y[i], input.id[i]);
            if x.is_finite() && y.is_finite() {
                tree.push(x, y, id)
            } else {
                odd.push(x, y, id)
            }
        }
        (tree, odd)
    }

    /// Decides one level from the counts of points per (splitting node,
    /// quadrant): makes the non-empty children, marks those that must split
    /// further, and gives every new leaf its slice. Shared by the CPU and
    /// GPU builds (the node work is tiny; the per-point work is theirs).
    pub(crate) fn plan_level(
        nodes: &mut Vec<Node>,
        leaves: &mut Vec<u32>,
        next_free: &mut u32,
        split: &[u32],
        counts: &[u32],
        params: Params,
    ) -> LevelPlan {
        let mut children = vec![[NONE; 4]; split.len()];
        let mut next_split = Vec::new();
        for (s, &n) in split.iter().enumerate() {
            let parent = nodes[n as usize];
            for q in 0..4 {
                let c = counts[s * 4 + q];
                if c == 0 {
                    continue;
                }
                let id = nodes.len() as u32;
                let mut child = Node { b: quadrant_box(&parent.b, q), count: c, depth: parent.depth + 1, ..Default::default() };
                if params.may_split(c as usize, child.depth as usize, &child.b) {
                    next_split.push(id);
                } else {
                    child.leaf = leaves.len() as u32 + 1;
                    child.start = *next_free;
                    *next_free += c;
                    leaves.push(id);
                }
                nodes.push(child);
                nodes[n as usize].child[q] = id;
                children[s][q] = id;
            }
        }
        LevelPlan { children, next_split }
    }

    /// The root, and whether it must split.
    pub(crate) fn root(pts: &Points, params: Params) -> (Node, bool) {
        let n = pts.len() as u32;
        let root = Node { b: Self::bounds(pts), count: n, depth: 1, ..Default::default() };
        let split = params.may_split(pts.len(), 1, &root.b);
        (root, split)
    }

    /// Builds on all CPU cores, level by level: each level counts points
    /// per quadrant of the splitting nodes (atomics, one task per point
    /// range), makes the children, then moves each point down a level or
    /// into its leaf's slice.
    pub fn build_cpu(input: &Points, params: Params) -> QuadTree {
        let (pts, odd) = Self::separate(input);
        let (root, _) = Self::root(&pts, params);
        let (nodes, leaves, pts) = Self::build_below(&pts, root, params);
        let mut tree = QuadTree { params, nodes, leaves, pts, odd, device: Default::default() };
        tree.sort_leaves();
        tree
    }

    /// Puts each leaf's points in ascending (x, y, id) order: Step II and
    /// kNN rely on the x order to test only a query's x-window of a leaf
    /// (binary searches), not all its points; kNN on the rest, to answer
    /// from the first k points of a leaf of one repeated point (the
    /// smallest ids). Leaves already in order are only scanned.
    pub(crate) fn sort_leaves(&mut self) {
        let slices: Vec<(usize, usize)> =
            self.leaves.iter().map(|&l| (self.nodes[l as usize].start as usize, self.nodes[l as usize].count as usize)).collect();
        let (px, py, pid) = (SharedMut(self.pts.x.as_mut_ptr()), SharedMut(self.pts.y.as_mut_ptr()), SharedMut(self.pts.id.as_mut_ptr()));
        slices.par_iter().for_each(|&(start, n)| {
            // SAFETY: leaf slices are disjoint ranges of the arrays.
            let (x, y, id) = unsafe {
                (
                    std::slice::from_raw_parts_mut(px.at(start), n),
                    std::slice::from_raw_parts_mut(py.at(start), n),
                    std::slice::from_raw_parts_mut(pid.at(start), n),
                )
            };
            let cmp = |a: usize, b: usize| x[a].total_cmp(&x[b]).then(y[a].total_cmp(&y[b])).then(id[a].cmp(&id[b]));
            if (1..n).all(|i| cmp(i - 1, i).is_le()) {
                return;
            }
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_unstable_by(|&a, &b| cmp(a as usize, b as usize));
            let (sx, sy, sid): (Vec<f64>, Vec<f64>, Vec<u64>) = (
                order.iter().map(|&i| x[i as usize]).collect(),
                order.iter().map(|&i| y[i as usize]).collect(),
                order.iter().map(|&i| id[i as usize]).collect(),
            );
            x.copy_from_slice(&sx);
            y.copy_from_slice(&sy);
            id.copy_from_slice(&sid);
        });
    }

    /// The subtree under `root` (its box and depth set) holding `pts`
    /// (all inside the box): nodes in level order (root first), leaf node
    /// indices by leaf number, and the points leaf by leaf.
    pub(crate) fn build_below(pts: &Points, mut root: Node, params: Params) -> (Vec<Node>, Vec<u32>, Points) {
        let n = pts.len();
        root.count = n as u32;
        let mut leaves = Vec::new();
        if !params.may_split(n, root.depth as usize, &root.b) {
            root.leaf = 1;
            root.start = 0;
            return (vec![root], vec![0], pts.clone());
        }
        let mut out = Points { x: vec![0.0; n], y: vec![0.0; n], id: vec![0; n] };
        root.leaf = 0; // a link node (it may have been a leaf before an update)
        let mut nodes = vec![root];
        let mut split = vec![0u32];
        // Current node of each point; NONE once placed in its leaf.
        let mut at: Vec<u32> = vec![0; n];
        let mut split_no: Vec<u32> = vec![0; 1];
        let mut next_free = 0u32;
        while !split.is_empty() {
            let counts: Vec<AtomicU32> = (0..split.len() * 4).map(|_| AtomicU32::new(0)).collect();
            at.par_iter().enumerate().for_each(|(t, &a)| {
                if a != NONE {
                    let s = split_no[a as usize] as usize;
                    let q = quadrant(&nodes[a as usize].b, pts.x[t], pts.y[t]);
                    counts[s * 4 + q].fetch_add(1, Ordering::Relaxed);
                }
            });
            let counts: Vec<u32> = counts.into_iter().map(|c| c.into_inner()).collect();
            let plan = Self::plan_level(&mut nodes, &mut leaves, &mut next_free, &split, &counts, params);
            let cursor: Vec<AtomicU32> = (0..nodes.len()).map(|_| AtomicU32::new(0)).collect();
            let (ox, oy, oid) = (SharedMut(out.x.as_mut_ptr()), SharedMut(out.y.as_mut_ptr()), SharedMut(out.id.as_mut_ptr()));
            at.par_iter_mut().enumerate().for_each(|(t, a)| {
                if *a == NONE {
                    return;
                }
                let s = split_no[*a as usize] as usize;
                let q = quadrant(&nodes[*a as usize].b, pts.x[t], pts.y[t]);
                let c = plan.children[s][q];
                let child = &nodes[c as usize];
                if child.is_leaf() {
                    let pos = (child.start + cursor[c as usize].fetch_add(1, Ordering::Relaxed)) as usize;
                    // SAFETY: each position is handed out once (the atomic
                    // cursor stays below the leaf's count), within `out`.
                    unsafe {
                        *ox.at(pos) = pts.x[t];
                        *oy.at(pos) = pts.y[t];
                        *oid.at(pos) = pts.id[t];
                    }
                    *a = NONE;
                } else {
                    *a = c;
                }
            });
            split_no = vec![NONE; nodes.len()];
            for (i, &s) in plan.next_split.iter().enumerate() {
                split_no[s as usize] = i as u32;
            }
            split = plan.next_split;
        }
        (nodes, leaves, out)
    }

    /// A tree from its parts (a copy read back from storage): the nodes
    /// in level order, leaf slices into `pts`; `odd` holds the points
    /// outside the tree. Node counts are recomputed from the leaves'.
    pub fn from_parts(params: Params, mut nodes: Vec<Node>, pts: Points, odd: Points) -> QuadTree {
        let mut leaves = vec![0u32; nodes.iter().filter(|n| n.is_leaf()).count()];
        for i in (0..nodes.len()).rev() {
            if nodes[i].is_leaf() {
                leaves[nodes[i].leaf as usize - 1] = i as u32;
            } else {
                let c = nodes[i].child;
                nodes[i].count = c.iter().filter(|&&c| c != NONE).map(|&c| nodes[c as usize].count).sum();
            }
        }
        let mut tree = QuadTree { params, nodes, leaves, pts, odd, device: Default::default() };
        tree.sort_leaves();
        tree
    }

    /// Bytes held in host memory (nodes, leaf numbers, points).
    pub fn host_bytes(&self) -> usize {
        let points = |p: &Points| p.x.len() * 8 + p.y.len() * 8 + p.id.len() * 8;
        self.nodes.len() * std::mem::size_of::<Node>() + self.leaves.len() * 4 + points(&self.pts) + points(&self.odd)
    }

    /// Bytes of the device image, if one was made.
    pub fn device_bytes(&self) -> usize {
        self.device.lock().as_ref().map_or(0, |d| d.bytes())
    }

    pub fn len(&self) -> usize {
        self.pts.len() + self.odd.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn height(&self) -> usize {
        self.nodes.iter().map(|n| n.depth as usize).max().unwrap_or(0)
    }

    /// Every point with its id, sorted by id (for tests).
    pub fn all_sorted(&self) -> Vec<(u64, f64, f64)> {
        let mut v: Vec<(u64, f64, f64)> = (0..self.pts.len()).map(|i| (self.pts.id[i], self.pts.x[i], self.pts.y[i])).collect();
        v.extend((0..self.odd.len()).map(|i| (self.odd.id[i], self.odd.x[i], self.odd.y[i])));
        v.sort_by_key(|a| a.0);
        v
    }

    /// Checks the invariants (for tests): every leaf's points in its box and in x order,
    /// counts adding up, slices covering the arrays once, capacity kept
    /// unless at MH, no empty node.
    pub fn check(&self) -> Result<(), String> {
        let mut covered = 0usize;
        for (no, &li) in self.leaves.iter().enumerate() {
            let l = &self.nodes[li as usize];
            if l.leaf as usize != no + 1 {
                return Err(format!("leaf {li} numbered {} not {}", l.leaf, no + 1));
            }
            if self.params.may_split(l.count as usize, l.depth as usize, &l.b) {
                return Err(format!("leaf {li} holds {} > MC below MH", l.count));
            }
            let r = l.rect();
            if !self.pts.x[l.start as usize..(l.start + l.count) as usize].is_sorted_by(|a, b| a <= b) {
                return Err(format!("leaf {li} not in x order"));
            }
            for i in l.start as usize..(l.start + l.count) as usize {
                if !r.contains(self.pts.x[i], self.pts.y[i]) {
                    return Err(format!("point {i} outside leaf {li}"));
                }
            }
            covered += l.count as usize;
        }
        if covered != self.pts.len() {
            return Err(format!("leaves cover {covered} of {} points", self.pts.len()));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.count == 0 && !self.pts.is_empty() {
                return Err(format!("empty node {i}"));
            }
            if !n.is_leaf() {
                let sum: u32 = n.child.iter().filter(|&&c| c != NONE).map(|&c| self.nodes[c as usize].count).sum();
                if sum != n.count {
                    return Err(format!("node {i}: children hold {sum}, node {}", n.count));
                }
            }
        }
        Ok(())
    }
}

/// A raw pointer shared by rayon tasks that write disjoint positions.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T>(pub *mut T);

impl<T> SharedMut<T> {
    /// The pointer (a method, so closures capture the Sync wrapper).
    pub fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}
// SAFETY: used only for disjoint writes (see the build).
unsafe impl<T> Send for SharedMut<T> {}
unsafe impl<T> Sync for SharedMut<T> {}
