//! `gpu_spatial`: G-PICS's quadtree over `point` as an index access
//! method. Each quadtree leaf is a run of entry pages, the nodes are on
//! node pages (cached per backend, and on the GPU for batches), inserts go
//! to a WAL-logged delta chain that every scan also searches, folded into
//! the tree by G-PICS's bulk update once it passes `delta_limit` pages
//! (`merge.rs`). Answers are
//! PostgreSQL's own operators', exactly: `<@ box`, `<@ circle`, `~=`, and
//! `ORDER BY p <-> q` in exact distance order.

mod batch;
mod build;
mod chain;
pub mod check;
mod cost;
pub mod functions;
pub mod image;
mod interlock;
mod knn;
pub mod merge;
mod nearest;
pub mod options;
mod page;
mod scan;
mod shape;
mod vacuum;
mod validate;

use crate::am::common::options::Reloptions;
use crate::am::common::validate::OpClass;
use crate::am::common::{Estimate, HeapRows, IndexAm};
use crate::storage::{Fork, Tid};
use page::*;
use pgrx::pg_sys;
use pgrx::prelude::*;

pub struct GpuSpatial;

impl IndexAm for GpuSpatial {
    const NAME: &'static str = "gpu_spatial";
    const OPTIONS: &'static Reloptions = &options::OPTIONS;
    type Scan = scan::ScanState;

    fn capabilities(am: &mut pg_sys::IndexAmRoutine) {
        am.amcanorderbyop = true;
    }

    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
        build::build(index, fork, rows)
    }

    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid) {
        let e = match value {
            None => Entry { x: f64::NAN, y: f64::NAN, tid: tid | NULL_FLAG },
            Some(v) => {
                // SAFETY: a point datum (the operator class's type).
                let p = unsafe { &*v.cast_mut_ptr::<pg_sys::Point>() };
                Entry { x: p.x, y: p.y, tid }
            }
        };
        let m = chain::append(index, e);
        if m.delta.pages > options::delta_limit(index) {
            merge::merge(index, false);
        }
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

crate::index_am!(GpuSpatial, gpu_spatial_handler);

extension_sql_file!("access_method.sql", name = "gpu_spatial");
