//! The tree's rows in memory, for batches (rayon threads search them; they
//! cannot read pages): the shape with each leaf's range remapped to the
//! rows read from its run, cached per backend while the metapage's
//! generation and vacuum count match, with its device copy made at the
//! first GPU batch; and the delta, read at every batch.

use super::chain;
use super::page::Meta;
use super::shape;
use crate::am::common::cache;
use gpuindex_engine::gpu::{Gpu, GpuError};
use gpuindex_engine::gts::bounded;
use gpuindex_engine::gts::gpu::{DeviceTree, Way, FILTER_MAX_K};
use gpuindex_engine::gts::search::{self, Objects};
use gpuindex_engine::gts::{Metric, Shape, Vectors};
use pgrx::pg_sys;
use std::sync::{Arc, Mutex, OnceLock};

pub struct Image {
    generation: u64,
    vacuums: u64,
    pub shape: Shape,
    pub objects: Objects,
    norms: OnceLock<Vec<f64>>,
    prunes_little: OnceLock<bool>,
    device: Mutex<Option<Arc<DeviceTree>>>,
}

impl Image {
    pub fn new(generation: u64, vacuums: u64, shape: Shape, objects: Objects) -> Image {
        Image { generation, vacuums, shape, objects, norms: OnceLock::new(), prunes_little: OnceLock::new(), device: Mutex::new(None) }
    }

    /// The `want` nearest rows of each query (rows of `queries`) on all
    /// cores: the bounded brute force for L2 where the tree prunes little,
    /// else the tree's search.
    pub fn knn_cpu(&self, queries: &[f32], want: usize) -> Vec<Vec<(u64, f64)>> {
        if self.shape.metric == Metric::L2 && self.prunes_little() {
            bounded::knn_l2(&self.objects, self.norms(), queries, want)
        } else {
            search::knn(&self.shape, &self.objects, queries, want)
        }
    }

    /// The same on the GPU (`want` up to `MAX_GPU_K`): the bounded brute
    /// force straight away where the CPU would take it (the engine's own
    /// choice descends the tree's upper levels first to decide: 0.8 ms of a
    /// batch of 64 at 1M x 128 on the H100, more than half of the search).
    pub fn knn_gpu(&self, gpu: &Gpu, queries: &[f32], want: usize) -> Result<Vec<Vec<(u64, f64)>>, GpuError> {
        let way = if self.shape.metric == Metric::L2 && want <= FILTER_MAX_K && self.prunes_little() { Way::Filter } else { Way::Auto };
        self.device(gpu)?.knn_by(gpu, queries, want, way)
    }

    /// The rows' squared norms (for L2 bounds), computed at the first call
    /// (on the CPU pool).
    pub fn norms(&self) -> &[f64] {
        self.norms.get_or_init(|| bounded::norms(&self.objects))
    }

    /// Whether kNN searches of the tree open leaves holding more than
    /// `BRUTE_FORCE_SHARE` of the rows (measured once, for rows of the
    /// tree as queries), so that L2 searches take the bounded brute force.
    pub fn prunes_little(&self) -> bool {
        *self.prunes_little.get_or_init(|| {
            let n = self.objects.v.len();
            let sample: Vec<f32> = (0..8).flat_map(|i| self.objects.v.get(i * n / 8).iter().copied()).collect();
            n > 0 && search::opened_share(&self.shape, &self.objects, &sample, 10) > bounded::BRUTE_FORCE_SHARE
        })
    }

    /// The host bytes a copy of `m`'s tree would take.
    pub fn bytes_for(m: &Meta) -> usize {
        m.tree_entries as usize * (m.dim as usize * 4 + 8 + 8 + 8)
    }

    /// The device copy, uploaded at the first call.
    pub fn device(&self, gpu: &Gpu) -> Result<Arc<DeviceTree>, GpuError> {
        let mut slot = self.device.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(DeviceTree::upload(gpu, &self.shape, &self.objects)?);
        *slot = Some(d.clone());
        Ok(d)
    }
}

impl cache::Image for Image {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.shape.host_bytes()
            + self.objects.v.data.len() * 4
            + self.objects.v.ids.len() * 16
            + self.norms.get().map_or(0, |n| n.len() * 8)
    }
    fn device_bytes(&self) -> usize {
        self.device.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |d| d.bytes())
    }
}

/// Whether this backend holds a copy of the index's tree (of any
/// generation: the planner's guess that the next batch finds one).
pub fn held(rel: pg_sys::Relation) -> bool {
    cache::lookup::<Image>(rel, "rows").is_some()
}

/// The copy of `m`'s tree this backend holds already, if it is current.
pub fn cached(rel: pg_sys::Relation, m: &Meta) -> Option<Arc<Image>> {
    cache::lookup::<Image>(rel, "rows").filter(|i| i.generation == m.generation && i.vacuums == m.vacuums)
}

/// The tree part of the index `m` describes, in memory.
pub fn tree(rel: pg_sys::Relation, m: &Meta) -> Arc<Image> {
    if let Some(i) = cached(rel, m) {
        return i;
    }
    cache::remove(rel, "rows");
    let dim = m.dim as usize;
    let mut objects = Objects { v: Vectors::new(dim), pdist: Vec::new() };
    let shape = if m.tree_entries > 0 {
        let mut s = shape::shape(rel, m).shape.clone();
        for leaf in s.leaves() {
            let start = objects.v.len();
            chain::for_run(rel, dim, s.nodes[leaf].offset as u32, |e| {
                objects.v.push(e.v, e.tid);
                objects.pdist.push(e.pdist);
            });
            s.nodes[leaf].offset = start as u64;
            s.nodes[leaf].size = (objects.v.len() - start) as u64;
        }
        s
    } else {
        Shape::empty(shape::metric(m))
    };
    cache::store(rel, "rows", Image::new(m.generation, m.vacuums, shape, objects))
}

/// Microseconds a backend spends per tree row and query float on a
/// search of its own copy: one query of 128 floats over 1M rows took
/// 7.2 ms (p50, H100 host, 16 cores; docs/bench/sql-service-1e6-h100.md).
/// Trees that prune well take less; the estimates only decide whether the
/// service's round trip is worth it (`client::worth_asking`).
const SESSION_US_PER_ROW_FLOAT: f64 = 5.6e-5;
/// The same on the service's GPU: 10^4 queries of 128 floats over 1M rows
/// at 1.1e5 queries/s (docs/bench/gts-small-h100.md).
const SERVICE_US_PER_ROW_FLOAT: f64 = 7e-8;
/// Microseconds per row float of reading a backend's copy of the tree
/// from the index's pages (about half a second for 1M x 128).
const COPY_US_PER_ROW_FLOAT: f64 = 4e-3;

/// The `k` nearest tree rows of each query (rows of `queries`) from the
/// GPU service, shipping it the tree's rows if it lacks them; None where
/// this backend searches itself (`gpuindex.service`; under `auto` also
/// where this backend would answer sooner, or the service failed).
pub fn knn_by_service(rel: pg_sys::Relation, m: &Meta, queries: &[f32], k: usize, what: &'static str) -> Option<Vec<Vec<(u64, f64)>>> {
    use crate::service::{client, images};
    let rows = m.tree_entries as f64;
    let copy = if cached(rel, m).is_some() { 0.0 } else { rows * m.dim.max(1) as f64 * COPY_US_PER_ROW_FLOAT };
    let work = queries.len() as f64 * rows;
    let key =
        client::worth_asking(rel, m.generation, m.vacuums, copy + work * SESSION_US_PER_ROW_FLOAT, work * SERVICE_US_PER_ROW_FLOAT, 0.0)?;
    let ship = |path: &std::path::Path| {
        let written = images::write_metric(path, &tree(rel, m));
        // The service holds it now; this backend need not.
        cache::remove(rel, "rows");
        written
    };
    client::knn(key, m.dim as usize, queries, k, &ship, what).map(|rows| rows.nested())
}

/// The delta's rows (and a frozen delta's).
pub fn delta(rel: pg_sys::Relation, m: &Meta) -> Vectors {
    let mut v = Vectors::new(m.dim as usize);
    for c in m.vector_chains() {
        chain::for_run(rel, m.dim as usize, c.head, |e| v.push(e.v, e.tid));
    }
    v
}
