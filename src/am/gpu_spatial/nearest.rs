//! `ORDER BY p <-> q` through the GPU service (`knn.rs` walks the pages
//! instead wherever the service is not asked: `image::nearest_by_service`
//! asks under `on`; under `auto` the walk's tens of microseconds beat any
//! round trip). Each round asks the service for the k nearest points of
//! its copy of the tree, merges them with the k nearest of the delta (read
//! here) in (distance, TID) order, and returns them while the executor
//! asks; past them the next round asks for twice as many. A round returns
//! only points strictly nearer than its k-th (those tied with it may be
//! any of the tied rows: they wait for a round that holds them all); a
//! round with fewer than k holds every point. Past every point, and where
//! the service stops answering, the page walk goes on, skipping what was
//! returned (NULLs come last from it). Scans with quals besides the ORDER
//! BY, and index-only scans (which return the points), walk the pages.

use super::image;
use super::knn::Knn;
use super::shape;
use gpuindex_engine::keys::encode_f64;
use pgrx::pg_sys;
use std::collections::HashSet;

/// Points the first round asks for (an executor under `LIMIT 10` reads a
/// few past its ten), and the most a round asks for: a scan that reads
/// further walks the pages (an answer that large would not fit a
/// request).
const FIRST: usize = 16;
const MOST: usize = 1 << 16;

pub struct Nearest {
    x: f64,
    y: f64,
    asked: usize,
    /// The round's candidates (distance key, TID, distance), in order, and
    /// the next to look at.
    list: Vec<(u64, u64, f64)>,
    at: usize,
    /// Candidates at or past this key wait for the next round (None: the
    /// round holds every point).
    bound: Option<u64>,
    /// The last returned, and every TID returned (for the page walk).
    last: Option<(u64, u64)>,
    returned: HashSet<u64>,
    walk: Option<Box<Knn>>,
}

impl Nearest {
    /// The scan from (x, y), None where the service is not asked.
    pub fn start(rel: pg_sys::Relation, x: f64, y: f64) -> Option<Nearest> {
        let mut n = Nearest { x, y, asked: 0, list: Vec::new(), at: 0, bound: None, last: None, returned: HashSet::new(), walk: None };
        n.round(rel, FIRST).then_some(n)
    }

    /// Asks for the `k` nearest; false where the service did not answer.
    fn round(&mut self, rel: pg_sys::Relation, k: usize) -> bool {
        let m = shape::meta(rel);
        let Some(a) = image::nearest_by_service(rel, &m, (self.x, self.y), k) else { return false };
        let b = image::delta(rel, &m).knn_cpu(&[(self.x, self.y)], k);
        let mut list: Vec<(u64, u64, f64)> =
            [a, b].iter().flat_map(|n| n.ids.iter().zip(&n.dists).map(|(&t, &d)| (encode_f64(d), t, d)).collect::<Vec<_>>()).collect();
        list.sort_unstable_by_key(|c| (c.0, c.1));
        list.dedup_by_key(|c| c.1);
        list.truncate(k);
        self.bound = (list.len() == k).then(|| list[k - 1].0);
        self.at = self.last.map_or(0, |l| list.partition_point(|c| (c.0, c.1) <= l));
        (self.asked, self.list) = (k, list);
        true
    }

    /// The next entry's heap TID and distance (None: a NULL point).
    pub fn next(&mut self, rel: pg_sys::Relation) -> Option<(u64, Option<f64>)> {
        loop {
            if let Some(walk) = &mut self.walk {
                let (e, d) = walk.next(rel)?;
                if self.returned.insert(e.heap_tid()) {
                    return Some((e.heap_tid(), d));
                }
                continue;
            }
            if let Some(&(key, tid, d)) = self.list.get(self.at) {
                if self.bound.is_none_or(|b| key < b) {
                    self.at += 1;
                    self.last = Some((key, tid));
                    self.returned.insert(tid);
                    return Some((tid, Some(d)));
                }
            }
            // Past the round: the next, or after every point the walk.
            if self.bound.is_none() || self.asked >= MOST || !self.round(rel, self.asked * 2) {
                self.walk = Some(Box::new(Knn::start(rel, self.x, self.y, Vec::new())));
            }
        }
    }
}
