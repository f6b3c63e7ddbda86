//! `gpu_metric`: GTS's pivot tree (`gpuindex_engine::gts`) over `real[]`
//! vectors and `text` as an index access method, for exact
//! `ORDER BY v <op> q LIMIT k` by L2 (`<->`), L1 (`<+>`), cosine (`<=>`)
//! or edit distance (`<~>`, text), and for `WHERE v <@ l2_ball(q, r)` (and
//! `l1_ball`, `cosine_ball`, `levenshtein_ball`). Each leaf is a
//! run of entry pages, the nodes and pivots are on their own pages (cached
//! per backend), inserts go to a WAL-logged delta that every scan also
//! searches (GTS's cache list), folded into a rebuilt tree by VACUUM once
//! it passes `delta_limit` pages.

mod ball;
mod batch;
mod build;
mod chain;
pub mod check;
mod cost;
pub mod functions;
pub mod image;
pub mod options;
mod page;
pub mod pgvector;
mod rebuild;
mod scan;
mod shape;
mod text;
mod vacuum;
mod validate;
pub mod vector;

use crate::am::common::options::Reloptions;
use crate::am::common::validate::OpClass;
use crate::am::common::{Estimate, HeapRows, IndexAm};
use crate::storage::{Fork, Tid};
use pgrx::pg_sys;
use pgrx::prelude::*;

pub struct GpuMetric;

impl IndexAm for GpuMetric {
    const NAME: &'static str = "gpu_metric";
    const OPTIONS: &'static Reloptions = &options::OPTIONS;
    type Scan = scan::ScanState;

    fn capabilities(am: &mut pg_sys::IndexAmRoutine) {
        am.amcanorderbyop = true;
        // No index-only scans: a walk keeps no VACUUM interlock.
        am.amcanreturn = None;
    }

    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
        build::build(index, fork, rows)
    }

    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid) {
        let metric = build::metric_of(index);
        // SAFETY: a datum of the operator class's type.
        let v = value.map(|d| unsafe { build::indexable(d, vector::Form::of(index), metric) });
        chain::append(index, metric, tid, v);
    }

    fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
        vacuum::bulk_delete(index, stats, dead)
    }

    fn vacuum_cleanup(info: &pg_sys::IndexVacuumInfo, stats: &mut pg_sys::IndexBulkDeleteResult, _bulk_deleted: bool) {
        vacuum::cleanup(info.index, stats)
    }

    fn cost(path: &pg_sys::IndexPath, generic: &pg_sys::GenericCosts) -> Estimate {
        cost::estimate(path, generic)
    }

    fn check_opclass(c: &OpClass) -> Vec<String> {
        validate::check(c)
    }
}

crate::index_am!(GpuMetric, gpu_metric_handler);

extension_sql_file!(
    "access_method.sql",
    name = "gpu_metric",
    requires = [
        gpu_metric_l2_distance,
        gpu_metric_l1_distance,
        gpu_metric_cosine_distance,
        gpu_metric_in_l2_ball,
        gpu_metric_in_l1_ball,
        gpu_metric_in_cosine_ball,
        gpu_metric_edit_distance,
        gpu_metric_in_levenshtein_ball
    ]
);
