//! Exact k nearest neighbours as G-PICS does them: a within-distance search
//! with an estimated radius, repeated with a doubled radius for the queries
//! that found fewer than k points, then a k-selection by distance (ties by
//! id, so answers are deterministic). The radius comes from the nearest
//! leaf's distance and density, capped by a radius known to hold k points
//! (the paper's estimate from the query's own leaf overshoots into dense
//! clusters from sparse regions; see docs/notes.md). Distances are `point <-> point` (pg_hypot); NaN sorts
//! after +Infinity, as PostgreSQL orders floats.

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
    /// Best-first over leaves by distance to their boxes, for a query that
    /// found nothing (or too little) in its first radius. Returns (reach,
    /// bound): `reach` is the distance to the nearest non-empty leaf plus
    /// the radius that leaf's density gives for k points (the next circle
    /// just reaches into the nearest data, instead of swallowing it);
    /// `bound` is a radius surely holding k points (the farthest corner of
    /// the nearest leaves that hold k points together).
    fn knn_reach(&self, x: f64, y: f64, k: usize) -> (f64, f64) {
        use std::cmp::Reverse;
        let mut heap = std::collections::BinaryHeap::new();
        let key = |d: f64| Reverse(crate::keys::encode_f64(d));
        heap.push((key(0.0), 0u32));
        let (mut held, mut far, mut reach) = (0usize, 0.0f64, f64::NAN);
        while let Some((Reverse(d), n)) = heap.pop() {
            let node = &self.nodes[n as usize];
            if node.is_leaf() {
                let b = node.rect();
                if reach.is_nan() {
                    let near = crate::keys::decode_f64(d);
                    let density = node.count as f64 / b.area().max(f64::MIN_POSITIVE);
                    reach = near + (k as f64 / (std::f64::consts::PI * density)).sqrt() * 1.5;
                }
                held += node.count as usize;
                for (cx, cy) in [(b.lx, b.ly), (b.lx, b.hy), (b.hx, b.ly), (b.hx, b.hy)] {
                    far = far.max(distance(x, y, cx, cy));
                }
                if held >= k {
                    let bound = far * (1.0 + 1e-12);
                    return (reach.min(bound), bound);
                }
            } else {
                for &c in node.child.iter().filter(|&&c| c != super::tree::NONE) {
                    heap.push((key(self.nodes[c as usize].rect().min_dist(x, y)), c));
                }
            }
        }
        (f64::INFINITY, f64::INFINITY)
    }

    /// Distance beyond which every tree point is inside the circle.
    fn cover_radius(&self, x: f64, y: f64) -> f64 {
        let r = self.root_rect();
        [(r.lx, r.ly), (r.lx, r.hy), (r.hx, r.ly), (r.hx, r.hy)]
            .iter()
            .map(|&(cx, cy)| distance(x, y, cx, cy))
            .fold(0.0, f64::max)
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

    fn knn_chunk<E>(
        &self,
        points: &[(f64, f64)],
        k: usize,
        within: &mut impl FnMut(&[Query]) -> Result<Hits, E>,
    ) -> Result<Neighbors, E> {
        let m = points.len();
        let mut cand: Vec<Vec<u64>> = vec![Vec::new(); m];
        if k > 0 {
            // First radius: reach into the nearest leaf's data by its density
            // (the paper estimates from the distribution and k; this takes
            // the nearest data, so queries far from dense clusters do not
            // swallow them), never past a radius known to hold k points.
            let (mut radius, bound): (Vec<f64>, Vec<f64>) = points
                .par_iter()
                .map(|&(x, y)| if x.is_finite() && y.is_finite() { self.knn_reach(x, y, k) } else { (0.0, 0.0) })
                .unzip();
            let cover: Vec<f64> = points.iter().map(|&(x, y)| self.cover_radius(x, y)).collect();
            let mut pending: Vec<usize> =
                (0..m).filter(|&i| points[i].0.is_finite() && points[i].1.is_finite()).collect();
            while !pending.is_empty() {
                let qs: Vec<Query> =
                    pending.iter().map(|&i| Query::Within { x: points[i].0, y: points[i].1, r: radius[i].min(cover[i]) }).collect();
                let hits = within(&qs)?;
                let mut again = Vec::new();
                for (j, &i) in pending.iter().enumerate() {
                    let got = hits.of(j);
                    if got.len() >= k || radius[i] >= cover[i] {
                        cand[i] = got.to_vec();
                    } else if radius[i] >= bound[i] {
                        // Short even at the bound (only rounding could do
                        // that): take every point.
                        radius[i] = cover[i];
                        again.push(i);
                    } else {
                        radius[i] = (radius[i] * 2.0).min(bound[i]);
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
