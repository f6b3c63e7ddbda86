//! `gpu_btree`: the hybrid CPU-GPU B+-tree (HB+-tree) as an index access
//! method. Pages hold every entry (a B-link tree, WAL-logged with
//! GenericXLog); the inner levels are mirrored into the engine's HB+
//! I-segment, on the GPU when one is used, for batches of probes
//! (`= ANY(array)`, `gpu_btree_probe`).

pub(crate) mod build;
pub(crate) mod cost;
mod delete;
pub(crate) mod keys;
pub(crate) mod leaf_step;
pub(crate) mod mirror;
pub mod options;
pub(crate) mod page;
pub(crate) mod scan;
pub(crate) mod service;
pub(crate) mod tree;
pub(crate) mod vacuum;
pub(crate) mod validate;
pub mod wal;

pub mod check;
pub mod probe;

use crate::am::common::options::Reloptions;
use crate::am::common::validate::OpClass;
use crate::am::common::{Estimate, HeapRows, IndexAm};
use crate::storage::{Fork, Tid};
use pgrx::pg_sys;
use pgrx::prelude::*;

pub struct GpuBtree;

impl IndexAm for GpuBtree {
    const NAME: &'static str = "gpu_btree";
    const OPTIONS: &'static Reloptions = &options::OPTIONS;
    type Scan = scan::ScanState;

    fn capabilities(am: &mut pg_sys::IndexAmRoutine) {
        am.amstrategies = 5;
        am.amcanorder = true;
        am.amcanbackward = true;
        am.amsearcharray = true;
        am.amsearchnulls = true;
        // Forward range scans split their leaves among the participants
        // (scan.rs); other scans are taken whole by one.
        crate::am::common::parallel::enable(am);
    }

    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
        build::build(index, fork, rows)
    }

    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid) {
        let tree = tree::Tree::new(index);
        match value {
            None => tree.insert_null(tid),
            Some(v) => tree.insert(keys::encode(v, build::key_type(index)), tid),
        }
    }

    fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
        vacuum::bulk_delete(index, stats, dead)
    }

    fn vacuum_cleanup(info: &pg_sys::IndexVacuumInfo, stats: &mut pg_sys::IndexBulkDeleteResult, bulk_deleted: bool) {
        if !bulk_deleted {
            // No bulk delete ran: the heap's count is the best cheap estimate.
            stats.num_index_tuples = info.num_heap_tuples;
            stats.estimated_count = info.estimated_count;
        }
        vacuum::recycle_pages(info.index, stats);
    }

    const WALKS_ARRAYS_IN_KEY_ORDER: bool = true;

    fn cost(path: &pg_sys::IndexPath, generic: &pg_sys::GenericCosts) -> Estimate {
        cost::estimate(path, generic)
    }

    fn check_opclass(c: &OpClass) -> Vec<String> {
        validate::check(c)
    }
}

crate::index_am!(GpuBtree, gpu_btree_handler);

extension_sql_file!("access_method.sql", name = "gpu_btree");
