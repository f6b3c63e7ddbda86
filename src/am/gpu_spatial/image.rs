//! The whole index in the engine's form, for batches: the tree's nodes and
//! every leaf's points read back from the pages into one engine QuadTree
//! (mirrored on the GPU at its first GPU batch), cached per backend while
//! the metapage's generation and vacuum count match; and the delta, read
//! fresh at every batch into a small tree of its own.

use super::page::*;
use super::shape;
use crate::am::common::cache;
use crate::service::shmem::ImageKey;
use gpuindex_engine::gpics::{Hits, Neighbors, Params, Points, QuadTree, Query};
use pgrx::pg_sys;
use std::sync::Arc;

pub struct Image {
    generation: u64,
    vacuums: u64,
    pub tree: QuadTree,
}

impl Image {
    pub fn new(generation: u64, vacuums: u64, tree: QuadTree) -> Image {
        Image { generation, vacuums, tree }
    }
}

impl cache::Image for Image {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.tree.host_bytes()
    }
    fn device_bytes(&self) -> usize {
        self.tree.device_bytes()
    }
}

fn params(m: &Meta) -> Params {
    Params { mc: m.mc as usize, mh: m.mh as usize }
}

/// The copy of `m`'s tree this backend holds already, if it is current.
fn cached(rel: pg_sys::Relation, m: &Meta) -> Option<Arc<Image>> {
    cache::lookup::<Image>(rel, "points").filter(|i| i.generation == m.generation && i.vacuums == m.vacuums)
}

/// Whether this backend holds an image of the index (of any generation:
/// the planner's question, without reading the metapage).
pub fn held(rel: pg_sys::Relation) -> bool {
    cache::lookup::<Image>(rel, "points").is_some()
}

/// The tree part of the index `m` describes.
pub fn tree(rel: pg_sys::Relation, m: &Meta) -> Arc<Image> {
    if let Some(i) = cached(rel, m) {
        return i;
    }
    // Drop the stale copy first: two full copies need not coexist.
    cache::remove(rel, "points");
    let s = shape::shape(rel, m);
    let mut pts = Points { x: Vec::new(), y: Vec::new(), id: Vec::new() };
    let tree = if s.nodes.is_empty() {
        QuadTree::build_cpu(&pts, params(m))
    } else {
        let n = m.tree_entries as usize;
        pts.x.reserve(n);
        pts.y.reserve(n);
        pts.id.reserve(n);
        let mut nodes = s.nodes.clone();
        // Leaves in leaf-number order, so that points are laid out leaf by
        // leaf as the build lays them.
        let mut leaves: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leaf()).collect();
        leaves.sort_by_key(|&i| nodes[i].leaf);
        for i in leaves {
            let start = pts.len();
            shape::for_run(rel, (nodes[i].start, nodes[i].count), |page| {
                for e in page {
                    pts.push(e.x, e.y, e.tid);
                }
            });
            nodes[i].start = start as u32;
            nodes[i].count = (pts.len() - start) as u32;
        }
        QuadTree::from_parts(params(m), nodes, pts, Points::default())
    };
    cache::store(rel, "points", Image { generation: m.generation, vacuums: m.vacuums, tree })
}

/// The chains' non-NULL points as a tree (non-finite ones in its `odd`).
pub fn delta(rel: pg_sys::Relation, m: &Meta) -> QuadTree {
    let mut pts = Points::default();
    super::chain::for_chains(rel, m, |page| {
        for e in page.iter().filter(|e| !e.is_null()) {
            pts.push(e.x, e.y, e.tid);
        }
    });
    QuadTree::build_cpu(&pts, params(m))
}

/// Microseconds a kNN (k = 10) centre costs on all cores in a backend,
/// and on the service's GPU: 0.9e6-2.0e6 and 1.7e6-8.8e6 centres/s in
/// batches of 1K-256K over 16M points (docs/bench/gpics-knn-h100.md).
const KNN_US_PER_CENTRE: f64 = 0.6;
const KNN_US_PER_CENTRE_GPU: f64 = 0.2;
/// Microseconds per point of reading a backend's copy of the tree from
/// the index's pages.
const COPY_US_PER_POINT: f64 = 0.1;

/// Microseconds a range query (a box, circle or point, some tens of
/// rows) costs in a backend on all cores, and on the service's GPU:
/// 4e6 and 4e7 queries/s in batches of 256K over 16M points
/// (docs/bench/gpics-h100.md).
const RANGE_US_PER_QUERY: f64 = 0.25;
const RANGE_US_PER_QUERY_GPU: f64 = 0.025;
/// Rows a range query's answer is taken to hold, for the trip's cost
/// (`client::TRIP_US_PER_ROW` each, as a kNN centre's k): 10^5 boxes of
/// ~10 rows took 171 ms through the service against 86 ms in a session
/// holding its copy (docs/bench/sql-join-spatial-1e7-h100-a28ded3.md).
const RANGE_ROWS: f64 = 10.0;

/// Every tree point matching each query, from the GPU service (shipping
/// it the tree if it lacks it), or `Err(rows so far)` past `limit` rows;
/// None where this backend searches itself, as for `knn_by_service`.
pub fn range_by_service(rel: pg_sys::Relation, m: &Meta, queries: &[Query], what: &'static str, limit: u64) -> Option<Result<Hits, u64>> {
    use crate::service::{client, served};
    let n = queries.len() as f64;
    let key = asking(client::worth_asking, rel, m, n * RANGE_US_PER_QUERY, n * RANGE_US_PER_QUERY_GPU, n * RANGE_ROWS)?;
    let words = served::query_words(queries);
    let rows = client::range_within(key, served::QUERY_WORDS, &words, &|path| ship(rel, m, path), what, limit)?;
    Some(rows.map(|rows| Hits { offsets: rows.start, ids: rows.ids }))
}

/// One of `client`'s rules for whether a search goes to the service:
/// `worth_asking`, or quietly `would_ask`.
type Rule = fn(pg_sys::Relation, u64, u64, f64, f64, f64) -> Option<ImageKey>;

/// The image's key where `rule` sends a search that takes `search_us` in
/// this backend (and `service_us` on the service) to the service,
/// counting the copy of the tree this backend would read first if it
/// holds none.
fn asking(rule: Rule, rel: pg_sys::Relation, m: &Meta, search_us: f64, service_us: f64, rows: f64) -> Option<ImageKey> {
    let copy = if cached(rel, m).is_some() { 0.0 } else { m.tree_entries as f64 * COPY_US_PER_POINT };
    rule(rel, m.generation, m.vacuums, copy + search_us, service_us, rows)
}

/// `asking` for a kNN batch of `n` centres.
fn asking_knn(rule: Rule, rel: pg_sys::Relation, m: &Meta, n: usize, k: usize) -> Option<ImageKey> {
    let n = n as f64;
    asking(rule, rel, m, n * KNN_US_PER_CENTRE, n * KNN_US_PER_CENTRE_GPU, n * k as f64)
}

/// Writes the tree for the service, which holds it from then on (this
/// backend's copy is dropped).
fn ship(rel: pg_sys::Relation, m: &Meta, path: &std::path::Path) -> std::io::Result<()> {
    let written = crate::service::images::write_spatial(path, &tree(rel, m));
    cache::remove(rel, "points");
    written
}

/// The `k` nearest tree points of each centre from the GPU service,
/// shipping it the tree if it lacks it; None where this backend searches
/// itself (`gpuindex.service`; under `auto` also where this backend would
/// answer as soon, or the service failed).
pub fn knn_by_service(rel: pg_sys::Relation, m: &Meta, centres: &[(f64, f64)], k: usize, what: &'static str) -> Option<Neighbors> {
    use crate::service::{client, served};
    let words = served::centre_words(centres);
    let key = client::key_of(rel, m.generation, m.vacuums);
    if let Some(rows) = client::answer_ahead(key, served::CENTRE_WORDS, &words, k, what) {
        return Some(Neighbors { offsets: rows.start, ids: rows.ids, dists: rows.dists });
    }
    let key = asking_knn(client::worth_asking, rel, m, centres.len(), k)?;
    knn_from(key, rel, m, &words, k, what)
}

/// Whether a kNN batch of `n` centres would be posted ahead
/// (`knn_ahead`): where the GPU service would answer it in one request.
pub fn posts_knn_ahead(rel: pg_sys::Relation, m: &Meta, n: usize, k: usize) -> bool {
    use crate::service::{client, served};
    client::knn_in_one_request(served::CENTRE_WORDS, n, k) && asking_knn(client::would_ask, rel, m, n, k).is_some()
}

/// Posts the kNN request `knn_by_service` would send for `centres`, to be
/// searched by the service while the caller works; `knn_by_service` of
/// the same centres and k takes its answer.
pub fn knn_ahead(rel: pg_sys::Relation, m: &Meta, centres: &[(f64, f64)], k: usize) {
    use crate::service::{client, served};
    if let Some(key) = asking_knn(client::would_ask, rel, m, centres.len(), k) {
        client::knn_ahead(key, served::CENTRE_WORDS, &served::centre_words(centres), k);
    }
}

/// Microseconds an ordered index scan's page walk takes to its first rows
/// (a few leaves: tens of microseconds), the alternative to asking.
const WALK_US: f64 = 50.0;

/// The `k` nearest tree points of one centre from the GPU service, for an
/// ordered index scan: asked where the service's round trip beats the
/// scan's page walk (which needs no copy of the tree), so under `auto`
/// practically never; under `on` always.
pub fn nearest_by_service(rel: pg_sys::Relation, m: &Meta, centre: (f64, f64), k: usize) -> Option<Neighbors> {
    let key = crate::service::client::worth_asking(rel, m.generation, m.vacuums, WALK_US, KNN_US_PER_CENTRE_GPU, k as f64)?;
    knn_from(key, rel, m, &crate::service::served::centre_words(&[centre]), k, "gpu_spatial index scan")
}

/// The kNN answer of the centres `words` (`served::centre_words`).
fn knn_from(key: ImageKey, rel: pg_sys::Relation, m: &Meta, words: &[f32], k: usize, what: &'static str) -> Option<Neighbors> {
    use crate::service::{client, served};
    let rows = client::knn(key, served::CENTRE_WORDS, words, k, &|path| ship(rel, m, path), what)?;
    Some(Neighbors { offsets: rows.start, ids: rows.ids, dists: rows.dists })
}
