//! Exact search over a GTS tree. Nodes are opened best first by their
//! ring lower bound (the triangle inequality on both sides of the parent
//! pivot's distance); a leaf's objects are filtered by the same bound on
//! their stored pivot distance before the full distance is computed. All
//! bounds are loosened for rounding (`Metric::lower_bound`), and answers
//! are decided by `Metric::distance` alone, so they are exact: ties in
//! distance are broken by id.
//!
//! - `Nearest`: every object in distance order, one at a time, for as long
//!   as the caller asks (an index scan never says k);
//! - `knn` / `range`: a batch of queries on all cores.

use super::tree::{Shape, Vectors};
use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Where a search reads a leaf's objects.
pub trait Leaves {
    /// Calls `f(vector, id, pivot distance)` for each object of leaf
    /// `node`.
    fn for_leaf(&self, shape: &Shape, node: usize, f: &mut dyn FnMut(&[f32], u64, f64));
}

/// The objects of a built tree in leaf order, in memory.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub v: Vectors,
    pub pdist: Vec<f64>,
}

impl Objects {
    /// The objects of `v` in the order `tree` laid them out.
    pub fn of(tree: &super::Tree, v: &Vectors) -> Objects {
        let mut o = Vectors::new(v.dim);
        o.data.reserve(v.data.len());
        o.ids.reserve(v.len());
        for &i in &tree.order {
            o.push(v.get(i as usize), v.ids[i as usize]);
        }
        Objects { v: o, pdist: tree.pdist.clone() }
    }
}

impl Leaves for Objects {
    fn for_leaf(&self, shape: &Shape, node: usize, f: &mut dyn FnMut(&[f32], u64, f64)) {
        let n = &shape.nodes[node];
        for p in n.offset as usize..(n.offset + n.size) as usize {
            f(self.v.get(p), self.v.ids[p], self.pdist[p]);
        }
    }
}

/// (distance, id), ordered by distance then id.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Hit(f64, u64);
impl Eq for Hit {}
impl Ord for Hit {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}
impl PartialOrd for Hit {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug)]
enum Item {
    /// A node, and its parent pivot's tree-metric distance to the query.
    Node(usize, f64),
    Object(u64),
    /// Objects not queued yet, none nearer than the item's key, and how
    /// many to queue when it is popped.
    Rest(Vec<Hit>, usize),
}

#[derive(Debug)]
struct Queued {
    key: f64,
    /// Nodes and rests before objects at equal keys, and objects by id.
    rank: (u8, u64),
    item: Item,
}
impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl Ord for Queued {
    // Reversed: BinaryHeap pops the greatest.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.total_cmp(&self.key).then(o.rank.cmp(&self.rank))
    }
}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Objects a leaf queues one by one at first (the rest wait as one item).
const FIRST_CHUNK: usize = 16;

/// Every object in (distance, id) order from a query, incrementally.
pub struct Nearest {
    query: Vec<f32>,
    heap: BinaryHeap<Queued>,
}

impl Nearest {
    /// A walk from `query` (of the shape's dimension, unless the tree is
    /// empty) over `shape`'s objects.
    pub fn new(shape: &Shape, query: &[f32]) -> Nearest {
        let mut heap = BinaryHeap::new();
        if shape.nodes[0].size > 0 {
            heap.push(Queued { key: 0.0, rank: (0, 0), item: Item::Node(0, 0.0) });
        }
        Nearest { query: query.to_vec(), heap }
    }

    /// Adds objects held outside the tree (the extension's inserted rows),
    /// with their distances.
    pub fn add(&mut self, hits: impl IntoIterator<Item = (u64, f64)>) {
        self.push_rest(hits.into_iter().map(|(id, d)| Hit(d, id)).collect(), FIRST_CHUNK);
    }

    /// Queues the nearest `chunk` of `rest` one by one and the others as
    /// one item keyed by the farthest of those queued.
    fn push_rest(&mut self, mut rest: Vec<Hit>, chunk: usize) {
        if rest.len() > chunk {
            rest.select_nth_unstable(chunk - 1);
            let later = rest.split_off(chunk);
            self.heap.push(Queued { key: rest[chunk - 1].0, rank: (0, 0), item: Item::Rest(later, chunk * 2) });
        }
        for h in rest {
            self.heap.push(Queued { key: h.0, rank: (1, h.1), item: Item::Object(h.1) });
        }
    }

    /// The next (id, distance), or None when every object was returned.
    pub fn next(&mut self, shape: &Shape, leaves: &impl Leaves) -> Option<(u64, f64)> {
        let m = shape.metric;
        while let Some(q) = self.heap.pop() {
            match q.item {
                Item::Object(id) => return Some((id, q.key)),
                Item::Rest(rest, chunk) => self.push_rest(rest, chunk),
                Item::Node(node, _) if shape.is_leaf(node) => {
                    let mut hits = Vec::new();
                    leaves.for_leaf(shape, node, &mut |v, id, _| hits.push(Hit(m.distance(&self.query, v), id)));
                    self.push_rest(hits, FIRST_CHUNK);
                }
                Item::Node(node, _) => {
                    let dq = m.metric_distance(&self.query, shape.pivot(node));
                    for j in 0..shape.fanout {
                        let c = shape.child(node, j);
                        let n = &shape.nodes[c];
                        if n.size > 0 {
                            let key = m.ring_bound(dq, n.min, n.max).max(q.key);
                            self.heap.push(Queued { key, rank: (0, 0), item: Item::Node(c, dq) });
                        }
                    }
                }
            }
        }
        None
    }
}

/// Whether an object at pivot distance `pd` can be within `bound` of a
/// query at pivot distance `dq`.
fn may_be_within(shape: &Shape, pd: f64, dq: f64, bound: f64) -> bool {
    shape.metric.lower_bound((pd - dq).abs(), pd + dq) <= bound
}

/// The k nearest objects of one query, nearest first, ties by id.
pub fn knn_one(shape: &Shape, leaves: &impl Leaves, q: &[f32], k: usize) -> Vec<(u64, f64)> {
    let m = shape.metric;
    let mut best = Best::new(k);
    let mut open = BinaryHeap::new();
    open.push(Queued { key: 0.0, rank: (0, 0), item: Item::Node(0, 0.0) });
    if k == 0 {
        return Vec::new();
    }
    while let Some(Queued { key, item: Item::Node(node, dp), .. }) = open.pop() {
        if key > best.bound() {
            break;
        }
        if shape.is_leaf(node) {
            best.offer_leaf(shape, leaves, q, node, dp);
            continue;
        }
        let dq = m.metric_distance(q, shape.pivot(node));
        for j in 0..shape.fanout {
            let c = shape.child(node, j);
            let n = &shape.nodes[c];
            let key = m.ring_bound(dq, n.min, n.max).max(key);
            if n.size > 0 && key <= best.bound() {
                open.push(Queued { key, rank: (0, 0), item: Item::Node(c, dq) });
            }
        }
    }
    let mut out: Vec<Hit> = best.heap.into_vec();
    out.sort();
    out.into_iter().map(|h| (h.1, h.0)).collect()
}

/// The k nearest hits seen so far, the farthest on top.
struct Best {
    k: usize,
    heap: BinaryHeap<Hit>,
}

impl Best {
    fn new(k: usize) -> Best {
        Best { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    /// The k-th distance: what a hit must not exceed (infinite until k).
    fn bound(&self) -> f64 {
        if self.heap.len() < self.k {
            f64::INFINITY
        } else {
            self.heap.peek().map_or(f64::INFINITY, |h| h.0)
        }
    }

    /// Offers the objects of a leaf whose routing pivot is at `dp` from
    /// `q`: the pivot-distance filter, then the distance within the bound.
    fn offer_leaf(&mut self, shape: &Shape, leaves: &impl Leaves, q: &[f32], leaf: usize, dp: f64) {
        let m = shape.metric;
        leaves.for_leaf(shape, leaf, &mut |v, id, pd| {
            // (The root as the only leaf has no routing pivot.)
            if leaf != 0 && !may_be_within(shape, pd, dp, self.bound()) {
                return;
            }
            let h = Hit(m.distance_within(q, v, self.bound()), id);
            if self.heap.len() < self.k {
                self.heap.push(h);
            } else if h < *self.heap.peek().expect("k > 0") {
                self.heap.pop();
                self.heap.push(h);
            }
        });
    }
}

/// Every object within `r` of one query (operator units), by id.
pub fn range_one(shape: &Shape, leaves: &impl Leaves, q: &[f32], r: f64) -> Vec<(u64, f64)> {
    let m = shape.metric;
    let mut out = Vec::new();
    let mut stack = vec![(0usize, 0.0f64)];
    while let Some((node, dp)) = stack.pop() {
        if shape.is_leaf(node) {
            leaves.for_leaf(shape, node, &mut |v, id, pd| {
                if node == 0 || may_be_within(shape, pd, dp, r) {
                    let d = m.distance_within(q, v, r);
                    if d <= r {
                        out.push(Hit(d, id));
                    }
                }
            });
            continue;
        }
        let dq = m.metric_distance(q, shape.pivot(node));
        for j in 0..shape.fanout {
            let c = shape.child(node, j);
            let n = &shape.nodes[c];
            if n.size > 0 && m.ring_bound(dq, n.min, n.max) <= r {
                stack.push((c, dq));
            }
        }
    }
    out.sort_by_key(|h| h.1);
    out.into_iter().map(|h| (h.1, h.0)).collect()
}

/// Leaves that count the objects read through them.
struct Counting<'a, L> {
    leaves: &'a L,
    read: std::cell::Cell<usize>,
}

impl<L: Leaves> Leaves for Counting<'_, L> {
    fn for_leaf(&self, shape: &Shape, node: usize, f: &mut dyn FnMut(&[f32], u64, f64)) {
        let n = &shape.nodes[node];
        self.read.set(self.read.get() + n.size as usize);
        self.leaves.for_leaf(shape, node, f)
    }
}

/// The share of all objects that the leaves a k-nearest search opens
/// hold, on average over `queries` (on all cores): near 1 where the tree
/// prunes little (high dimensions), and a brute force costs no more.
pub fn opened_share(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], k: usize) -> f64 {
    let total = shape.nodes[0].size.max(1) as f64;
    let shares: Vec<f64> = queries
        .par_chunks(shape.dim.max(1))
        .map(|q| {
            let counting = Counting { leaves, read: std::cell::Cell::new(0) };
            knn_one(shape, &counting, q, k);
            counting.read.get() as f64 / total
        })
        .collect();
    shares.iter().sum::<f64>() / shares.len().max(1) as f64
}

/// `knn_one` for each query (rows of `queries`), on all cores: a query
/// per core, or for edit distance with fewer queries than cores every
/// core on each query (`knn_wide`).
pub fn knn(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], k: usize) -> Vec<Vec<(u64, f64)>> {
    knn_rows(shape, leaves, queries, shape.dim, k)
}

/// `knn` for queries of `width` elements each: the tree's dimension, or
/// for strings any width (zero-padded: a query longer than the tree's
/// strings).
pub fn knn_rows(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], width: usize, k: usize) -> Vec<Vec<(u64, f64)>> {
    let qs = queries.chunks(width.max(1));
    // Edit distance only: its searches read most leaves, so measuring
    // every pivot and ordering every leaf first costs little beside them
    // (for vectors in low dimensions, where a search opens a few leaves,
    // it would cost more than the search).
    if shape.metric == super::Metric::Levenshtein && qs.len() < rayon::current_num_threads() && shape.height > 0 {
        return qs.map(|q| knn_wide(shape, leaves, q, k)).collect();
    }
    queries.par_chunks(width.max(1)).map(|q| knn_one(shape, leaves, q, k)).collect()
}

/// The k nearest objects of one query with every core on it: every
/// leaf's lower bound from the rings on its path (all pivots measured
/// first), then the leaves nearest first dealt round-robin to the cores,
/// each keeping its own k nearest (and its k-th as the bound it filters
/// and measures within); merged. Exact as `knn_one`: an object among the
/// k nearest of all is among the k nearest of its core's share.
pub fn knn_wide(shape: &Shape, leaves: &(impl Leaves + Sync), q: &[f32], k: usize) -> Vec<(u64, f64)> {
    let m = shape.metric;
    if k == 0 {
        return Vec::new();
    }
    // Each node's lower bound and its parent pivot's distance to q.
    let mut lb = vec![0f64; shape.nodes.len()];
    let mut dp = vec![0f64; shape.nodes.len()];
    let dq: Vec<f64> = (0..shape.internal()).into_par_iter().map(|node| m.metric_distance(q, shape.pivot(node))).collect();
    for node in 0..shape.internal() {
        for j in 0..shape.fanout {
            let c = shape.child(node, j);
            let n = &shape.nodes[c];
            lb[c] = m.ring_bound(dq[node], n.min, n.max).max(lb[node]);
            dp[c] = dq[node];
        }
    }
    let mut order: Vec<usize> = shape.leaves().filter(|&l| shape.nodes[l].size > 0).collect();
    order.sort_by(|a, b| lb[*a].total_cmp(&lb[*b]).then(a.cmp(b)));
    let cores = rayon::current_num_threads().max(1);
    let parts: Vec<Vec<Hit>> = (0..cores)
        .into_par_iter()
        .map(|t| {
            let mut best = Best::new(k);
            for &leaf in order.iter().skip(t).step_by(cores) {
                if lb[leaf] > best.bound() {
                    break; // the rest are farther still
                }
                best.offer_leaf(shape, leaves, q, leaf, dp[leaf]);
            }
            best.heap.into_vec()
        })
        .collect();
    let mut out: Vec<Hit> = parts.into_iter().flatten().collect();
    out.sort();
    out.truncate(k);
    out.into_iter().map(|h| (h.1, h.0)).collect()
}

/// `range_one` for each query, on all cores.
pub fn range(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], r: f64) -> Vec<Vec<(u64, f64)>> {
    queries.par_chunks(shape.dim.max(1)).map(|q| range_one(shape, leaves, q, r)).collect()
}

/// `range_one` for query i with radius `radii[i]`, on all cores.
pub fn range_each(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], radii: &[f64]) -> Vec<Vec<(u64, f64)>> {
    range_rows(shape, leaves, queries, shape.dim, radii)
}

/// `range_each` for queries of `width` elements each (as `knn_rows`).
pub fn range_rows(shape: &Shape, leaves: &(impl Leaves + Sync), queries: &[f32], width: usize, radii: &[f64]) -> Vec<Vec<(u64, f64)>> {
    queries.par_chunks(width.max(1)).zip(radii).map(|(q, &r)| range_one(shape, leaves, q, r)).collect()
}

/// `range_rows`, or Err(answers found) once they pass `cap`: the queries
/// not yet searched then are not (memory stays within `cap` answers and
/// one query's a thread, whatever the radii).
pub fn range_rows_capped(
    shape: &Shape,
    leaves: &(impl Leaves + Sync),
    queries: &[f32],
    width: usize,
    radii: &[f64],
    cap: usize,
) -> Result<Vec<Vec<(u64, f64)>>, usize> {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let found = AtomicUsize::new(0);
    let answers = queries
        .par_chunks(width.max(1))
        .zip(radii)
        .map(|(q, &r)| {
            if found.load(Relaxed) > cap {
                return Vec::new();
            }
            let a = range_one(shape, leaves, q, r);
            found.fetch_add(a.len(), Relaxed);
            a
        })
        .collect();
    match found.into_inner() {
        n if n > cap => Err(n),
        _ => Ok(answers),
    }
}
