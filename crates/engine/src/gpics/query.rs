//! Batched queries in G-PICS's two steps, on the CPU (all cores); the GPU
//! runs the same steps (gpu.rs).
//!
//! Step I registers each query with every leaf its region may touch (a
//! logarithmic descent per query), giving (query, leaf) pairs in query
//! order and, per leaf, the list of its pairs. Step II visits each leaf
//! once, testing against every registered query the points of the leaf
//! in the query's x-window (leaves are kept in x order; the paper tests
//! every point of the leaf, which for small queries is mostly waste): a count pass
//! sizes each pair's output, a scan turns counts into offsets, a write pass
//! fills the answers in query order. Nothing is capped, nothing dropped.
//! Points outside the tree (non-finite) form one extra leaf every query
//! registers with.

use super::geom::Query;
use super::tree::{QuadTree, NONE};
use rayon::prelude::*;

/// Answers of a batch: the ids of query i are `ids[offsets[i]..offsets[i+1]]`
/// (positions in the tree's point arrays, tree points then odd points, for
/// the `_positions` searches).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hits {
    pub offsets: Vec<usize>,
    pub ids: Vec<u64>,
}

impl Hits {
    pub fn of(&self, q: usize) -> &[u64] {
        &self.ids[self.offsets[q]..self.offsets[q + 1]]
    }
    pub fn queries(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    /// Each query's ids sorted (answers are sets; their order is not fixed).
    pub fn sorted(mut self) -> Hits {
        for q in 0..self.queries() {
            let (a, b) = (self.offsets[q], self.offsets[q + 1]);
            self.ids[a..b].sort_unstable();
        }
        self
    }
}

/// Step I's output: pairs in query order, and per leaf its pairs.
pub struct Registration {
    /// Pairs of query q: `pair_leaf[qoff[q]..qoff[q+1]]`.
    pub qoff: Vec<usize>,
    pub pair_leaf: Vec<u32>,
    /// Pairs of leaf l (indices into pair_leaf): `leaf_pairs[loff[l]..loff[l+1]]`.
    pub loff: Vec<usize>,
    pub leaf_pairs: Vec<u32>,
}

impl QuadTree {
    /// Leaves a query may touch (leaf numbers; `leaves.len()` is the odd leaf).
    fn touched(&self, q: &Query, out: &mut Vec<u32>) {
        out.clear();
        if !self.pts.is_empty() {
            let mut stack = [0u32; super::tree::TRAVERSAL_STACK];
            let mut top = 1;
            while top > 0 {
                top -= 1;
                let n = &self.nodes[stack[top] as usize];
                if !q.may_touch(&n.rect()) {
                    continue;
                }
                if n.is_leaf() {
                    out.push(n.leaf - 1);
                } else {
                    for &c in n.child.iter().rev() {
                        if c != NONE {
                            stack[top] = c;
                            top += 1;
                        }
                    }
                }
            }
        }
        if !self.odd.is_empty() {
            out.push(self.leaves.len() as u32);
        }
    }

    /// Number of leaves including the odd one.
    pub(crate) fn leaf_slots(&self) -> usize {
        self.leaves.len() + 1
    }

    /// The positions of leaf l's points that may answer q: the x-window
    /// of a tree leaf (sorted by x), every point of the odd leaf.
    fn window(&self, l: usize, q: &Query, xs: &[f64]) -> std::ops::Range<usize> {
        if l == self.leaves.len() {
            0..xs.len()
        } else {
            q.x_window(xs)
        }
    }

    /// (x, y, first position) of leaf l (the odd leaf last; odd points
    /// are at positions after the tree's).
    pub(crate) fn leaf_points(&self, l: usize) -> (&[f64], &[f64], usize) {
        if l == self.leaves.len() {
            return (&self.odd.x, &self.odd.y, self.pts.len());
        }
        let n = &self.nodes[self.leaves[l] as usize];
        let r = n.start as usize..(n.start + n.count) as usize;
        (&self.pts.x[r.clone()], &self.pts.y[r], n.start as usize)
    }

    /// The point at a position: (x, y, id).
    pub fn point_at(&self, pos: usize) -> (f64, f64, u64) {
        if pos < self.pts.len() {
            (self.pts.x[pos], self.pts.y[pos], self.pts.id[pos])
        } else {
            let i = pos - self.pts.len();
            (self.odd.x[i], self.odd.y[i], self.odd.id[i])
        }
    }

    /// Replaces positions by ids.
    pub fn to_ids(&self, mut hits: Hits) -> Hits {
        hits.ids.par_iter_mut().for_each(|p| *p = self.point_at(*p as usize).2);
        hits
    }

    /// Step I on the CPU.
    pub fn register_cpu(&self, queries: &[Query]) -> Registration {
        let per: Vec<Vec<u32>> = queries
            .par_iter()
            .map_init(Vec::new, |buf, q| {
                self.touched(q, buf);
                buf.clone()
            })
            .collect();
        let mut qoff = Vec::with_capacity(queries.len() + 1);
        qoff.push(0);
        for p in &per {
            qoff.push(qoff.last().unwrap() + p.len());
        }
        let pair_leaf: Vec<u32> = per.into_iter().flatten().collect();
        let mut loff = vec![0usize; self.leaf_slots() + 1];
        for &l in &pair_leaf {
            loff[l as usize + 1] += 1;
        }
        for i in 0..self.leaf_slots() {
            loff[i + 1] += loff[i];
        }
        let mut cursor = loff.clone();
        let mut leaf_pairs = vec![0u32; pair_leaf.len()];
        for (p, &l) in pair_leaf.iter().enumerate() {
            leaf_pairs[cursor[l as usize]] = p as u32;
            cursor[l as usize] += 1;
        }
        Registration { qoff, pair_leaf, loff, leaf_pairs }
    }

    /// Step II on the CPU: one task per leaf with registered queries;
    /// answers are positions.
    pub fn process_cpu(&self, queries: &[Query], reg: &Registration) -> Hits {
        self.process_cpu_bounded(queries, reg, u64::MAX).expect("no bound")
    }

    /// The same, or `Err(count)` where more than `limit` answers are
    /// counted (before any is written).
    pub fn process_cpu_bounded(&self, queries: &[Query], reg: &Registration, limit: u64) -> Result<Hits, u64> {
        let leaves: Vec<usize> = (0..self.leaf_slots()).filter(|&l| reg.loff[l + 1] > reg.loff[l]).collect();
        let pair_query = pair_queries(&reg.qoff);
        // Count pass.
        let counts: Vec<Vec<(u32, u32)>> = leaves
            .par_iter()
            .map(|&l| {
                let (xs, ys, _) = self.leaf_points(l);
                reg.leaf_pairs[reg.loff[l]..reg.loff[l + 1]]
                    .iter()
                    .map(|&p| {
                        let q = &queries[pair_query[p as usize] as usize];
                        let w = self.window(l, q, xs);
                        (p, xs[w.clone()].iter().zip(&ys[w]).filter(|(&x, &y)| q.matches(x, y)).count() as u32)
                    })
                    .collect()
            })
            .collect();
        let mut pair_off = vec![0usize; reg.pair_leaf.len() + 1];
        for (p, c) in counts.iter().flatten() {
            pair_off[*p as usize + 1] = *c as usize;
        }
        for i in 0..reg.pair_leaf.len() {
            pair_off[i + 1] += pair_off[i];
        }
        let total = *pair_off.last().unwrap() as u64;
        if total > limit {
            return Err(total);
        }
        // Write pass: pairs own disjoint ranges of `ids`.
        let mut ids = vec![0u64; *pair_off.last().unwrap()];
        let out = super::tree::SharedMut(ids.as_mut_ptr());
        leaves.par_iter().for_each(|&l| {
            let (xs, ys, first) = self.leaf_points(l);
            for &p in &reg.leaf_pairs[reg.loff[l]..reg.loff[l + 1]] {
                let q = &queries[pair_query[p as usize] as usize];
                let mut w = pair_off[p as usize];
                if pair_off[p as usize + 1] == w {
                    continue;
                }
                for i in self.window(l, q, xs) {
                    if q.matches(xs[i], ys[i]) {
                        // SAFETY: w stays inside pair p's range, which no
                        // other task writes.
                        unsafe { *out.at(w) = (first + i) as u64 };
                        w += 1;
                    }
                }
            }
        });
        let offsets = reg.qoff.iter().map(|&p| pair_off[p]).collect();
        Ok(Hits { offsets, ids })
    }

    /// A batch of queries on all CPU cores (both steps); answers are ids.
    pub fn search_cpu(&self, queries: &[Query]) -> Hits {
        self.search_cpu_bounded(queries, u64::MAX).expect("no bound")
    }

    /// The same, or `Err(count)` where more than `limit` answers are
    /// counted (before any is gathered). An empty tree (an index's usual
    /// delta) answers at once, as `knn_cpu` does.
    pub fn search_cpu_bounded(&self, queries: &[Query], limit: u64) -> Result<Hits, u64> {
        if self.is_empty() {
            return Ok(Hits { offsets: vec![0; queries.len() + 1], ids: Vec::new() });
        }
        let reg = self.register_cpu(queries);
        Ok(self.to_ids(self.process_cpu_bounded(queries, &reg, limit)?))
    }

    /// The same, answers as positions.
    pub fn search_cpu_positions(&self, queries: &[Query]) -> Hits {
        let reg = self.register_cpu(queries);
        self.process_cpu(queries, &reg)
    }
}

/// The query of each pair, from the query offsets.
pub(crate) fn pair_queries(qoff: &[usize]) -> Vec<u32> {
    let mut pq = vec![0u32; *qoff.last().unwrap_or(&0)];
    for q in 0..qoff.len().saturating_sub(1) {
        pq[qoff[q]..qoff[q + 1]].fill(q as u32);
    }
    pq
}
