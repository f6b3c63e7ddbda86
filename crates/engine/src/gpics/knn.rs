//! Exact k nearest neighbours as G-PICS does them: a within-distance search
//! with a radius estimated from the density of the query's leaf, repeated
//! with a doubled radius for the queries that found fewer than k points,
//! then a k-selection by distance (ties by id, so answers are
//! deterministic). Distances are `point <-> point` (pg_hypot); NaN sorts
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
    /// A first radius for (x, y): the disc that should hold k points at the
    /// density of the leaf around it.
    fn knn_radius(&self, x: f64, y: f64, k: usize) -> f64 {
        let extent = { let r = self.root_rect(); (r.hx - r.lx).max(r.hy - r.ly) };
        let floor = 1e-12 * (1.0 + extent);
        match self.home_leaf(x, y) {
            Some(n) if n.rect().area() > 0.0 => {
                let density = n.count.max(1) as f64 / n.rect().area();
                ((k as f64 / (std::f64::consts::PI * density)).sqrt() * 1.5).max(floor)
            }
            _ => floor.max(extent / 1024.0),
        }
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
    /// GPU two-step search, answering positions).
    pub fn knn_with<E>(
        &self,
        points: &[(f64, f64)],
        k: usize,
        mut within: impl FnMut(&[Query]) -> Result<Hits, E>,
    ) -> Result<Neighbors, E> {
        let m = points.len();
        let mut cand: Vec<Vec<u64>> = vec![Vec::new(); m];
        if k > 0 {
            let mut radius: Vec<f64> = points.par_iter().map(|&(x, y)| self.knn_radius(x, y, k)).collect();
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
                    } else {
                        // Nothing in reach yet: grow faster.
                        radius[i] *= if got.is_empty() { 4.0 } else { 2.0 };
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
                with_d.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
                with_d.truncate(k);
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
