//! Exact k nearest neighbours in G-PICS's shape: one within-distance batch
//! (the two-step search, on the GPU or the CPU) for all queries, then a
//! k-selection by distance (ties by id, so answers are deterministic). The
//! radius of each query is its exact k-th nearest distance, from a
//! best-first search over the nodes on the CPU. The paper estimates the
//! radius and retries with a doubled one when short; estimates (the
//! paper's, or one from leaf density) took in whole dense clusters from
//! the sparse space between them (clustered kNN ran at 1.8e3 q/s; see
//! docs/notes.md). A query short of k (fewer than k finite points in the
//! tree) takes every point. Distances are `point <-> point` (pg_hypot);
//! NaN sorts after +Infinity, as PostgreSQL orders floats.

use super::geom::{distance, Query};
use super::query::Hits;
use super::tree::QuadTree;
use rayon::prelude::*;

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
}

/// Total order of distances: NaN last.
fn dist_key(d: f64) -> u64 {
    crate::keys::encode_f64(d)
}

impl QuadTree {
    /// The radius of a query: the distance of its k-th nearest tree
    /// point, by best-first search over nodes by the distance to their
    /// boxes (stopping when no node left is nearer than the k-th distance
    /// found). k real points lie within it (the same distance function as
    /// the within-distance predicate), so one round finds them all; a
    /// radius estimated from a leaf's density or box took in whole
    /// clusters for queries in the sparse space between them (1.8e3 q/s
    /// on clustered data). Infinity when the tree holds fewer than k
    /// points.
    fn knn_reach(&self, x: f64, y: f64, k: usize) -> f64 {
        use std::cmp::Reverse;
        let mut heap = std::collections::BinaryHeap::new();
        let key = |d: f64| Reverse(crate::keys::encode_f64(d));
        heap.push((key(0.0), 0u32));
        // The k smallest distances seen, largest first.
        let mut best: std::collections::BinaryHeap<u64> = std::collections::BinaryHeap::with_capacity(k + 1);
        while let Some((Reverse(near), n)) = heap.pop() {
            // Nothing nearer than the k-th distance is left: it is exact.
            if best.len() >= k && near > *best.peek().expect("k > 0") {
                break;
            }
            let node = &self.nodes[n as usize];
            if node.is_leaf() {
                let r = node.start as usize..(node.start + node.count) as usize;
                for (&px, &py) in self.pts.x[r.clone()].iter().zip(&self.pts.y[r]) {
                    let d = dist_key(distance(x, y, px, py));
                    if best.len() < k {
                        best.push(d);
                    } else if d < *best.peek().expect("k > 0") {
                        best.pop();
                        best.push(d);
                    }
                }
            } else {
                for &c in node.child.iter().filter(|&&c| c != super::tree::NONE) {
                    heap.push((key(self.nodes[c as usize].rect().min_dist(x, y)), c));
                }
            }
        }
        if best.len() >= k {
            crate::keys::decode_f64(*best.peek().expect("k > 0"))
        } else {
            f64::INFINITY
        }
    }

    /// Distance beyond which every tree point is inside the circle.
    fn cover_radius(&self, x: f64, y: f64) -> f64 {
        let r = self.root_rect();
        [(r.lx, r.ly), (r.lx, r.hy), (r.hx, r.ly), (r.hx, r.hy)].iter().map(|&(cx, cy)| distance(x, y, cx, cy)).fold(0.0, f64::max)
    }

    /// kNN through a within-distance batch runner (`within` is the CPU or
    /// GPU two-step search, answering positions), in chunks of queries so
    /// that candidate sets stay bounded in memory.
    pub fn knn_with<E>(
        &self,
        points: &[(f64, f64)],
        k: usize,
        mut within: impl FnMut(&[Query]) -> Result<Hits, E>,
    ) -> Result<Neighbors, E> {
        const CHUNK: usize = 1 << 14;
        let mut out = Neighbors { offsets: vec![0], ..Default::default() };
        for part in points.chunks(CHUNK) {
            let n = self.knn_chunk(part, k, &mut within)?;
            let base = out.ids.len();
            out.ids.extend_from_slice(&n.ids);
            out.dists.extend_from_slice(&n.dists);
            out.offsets.extend(n.offsets[1..].iter().map(|o| o + base));
        }
        Ok(out)
    }

    fn knn_chunk<E>(&self, points: &[(f64, f64)], k: usize, within: &mut impl FnMut(&[Query]) -> Result<Hits, E>) -> Result<Neighbors, E> {
        let m = points.len();
        let mut cand: Vec<Vec<u64>> = vec![Vec::new(); m];
        if k > 0 {
            // The radius: the k-th distance among the nearest leaves'
            // points (the paper estimates it from the distribution and k,
            // and retries with a doubled radius when short; a radius that
            // holds k real points needs no retry, and does not swallow
            // dense clusters from the sparse space between them).
            let mut radius: Vec<f64> = points
                .par_iter()
                .map(|&(x, y)| if x.is_finite() && y.is_finite() && !self.pts.is_empty() { self.knn_reach(x, y, k) } else { 0.0 })
                .collect();
            let cover: Vec<f64> = points.iter().map(|&(x, y)| self.cover_radius(x, y)).collect();
            let mut pending: Vec<usize> = (0..m).filter(|&i| points[i].0.is_finite() && points[i].1.is_finite()).collect();
            while !pending.is_empty() {
                let qs: Vec<Query> =
                    pending.iter().map(|&i| Query::Within { x: points[i].0, y: points[i].1, r: radius[i].min(cover[i]) }).collect();
                let hits = within(&qs)?;
                let mut again = Vec::new();
                for (j, &i) in pending.iter().enumerate() {
                    let got = hits.of(j);
                    if got.len() >= k || radius[i] >= cover[i] {
                        cand[i] = got.to_vec();
                    } else {
                        // Short (the tree holds fewer than k finite
                        // points): take every point.
                        radius[i] = cover[i];
                        again.push(i);
                    }
                }
                pending = again;
            }
        }
        // Too few finite points in reach (the tree holds fewer than k), or
        // a non-finite query point: every point is a candidate.
        let everything: Vec<u64> = (0..self.len() as u64).collect();
        let picked: Vec<Vec<(u64, f64)>> = cand
            .into_par_iter()
            .zip(points.par_iter())
            .map(|(c, &(qx, qy))| {
                let c = if c.len() < k { &everything } else { &c };
                let mut with_d: Vec<(u64, u64, f64)> = c
                    .iter()
                    .map(|&pos| {
                        let (x, y, id) = self.point_at(pos as usize);
                        let d = distance(qx, qy, x, y);
                        (dist_key(d), id, d)
                    })
                    .collect();
                let by = |a: &(u64, u64, f64), b: &(u64, u64, f64)| (a.0, a.1).cmp(&(b.0, b.1));
                if with_d.len() > k {
                    with_d.select_nth_unstable_by(k - 1, by);
                    with_d.truncate(k);
                }
                with_d.sort_unstable_by(by);
                with_d.into_iter().map(|(_, id, d)| (id, d)).collect()
            })
            .collect();
        let mut out = Neighbors { offsets: vec![0], ..Default::default() };
        for p in picked {
            for (id, d) in p {
                out.ids.push(id);
                out.dists.push(d);
            }
            out.offsets.push(out.ids.len());
        }
        Ok(out)
    }

    /// kNN on all CPU cores.
    pub fn knn_cpu(&self, points: &[(f64, f64)], k: usize) -> Neighbors {
        self.knn_with(points, k, |qs| Ok::<_, std::convert::Infallible>(self.search_cpu_positions(qs))).unwrap_or_else(|e| match e {})
    }
}
