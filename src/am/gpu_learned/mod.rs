//! `gpu_learned`: the G-Learned index (a PGM model whose segments the GPU
//! searches) as an index access method. The build packs the sorted
//! entries into a run of data pages that position arithmetic addresses,
//! and fits the model over them (`run.rs`, `page.rs`); a lookup predicts
//! the position (on the GPU for a batch) and checks it on the pages.
//! Inserts go to a delta, a gpu_btree B-link tree in the same relation, so
//! they are visible at once and the run never moves; scans merge both
//! (`scan.rs`). VACUUM marks dead run entries in place and vacuums the
//! delta, and merges the delta into a new run once it has grown
//! (`merge.rs`; `gpu_learned_merge` does it on demand).

mod build;
mod check;
mod merge;
mod page;
pub mod probe;
mod run;
mod scan;
pub(crate) mod service;
mod vacuum;

use crate::am::common::options::Reloptions;
use crate::am::common::validate::OpClass;
use crate::am::common::{Estimate, HeapRows, IndexAm};
use crate::am::gpu_btree::{self as delta, keys, tree::Tree};
use crate::storage::{Fork, Tid};
use pgrx::pg_sys;
use pgrx::prelude::*;

pub struct GpuLearned;

impl IndexAm for GpuLearned {
    const NAME: &'static str = "gpu_learned";
    /// The delta's: `fillfactor` of its leaves.
    const OPTIONS: &'static Reloptions = &delta::options::OPTIONS;
    type Scan = scan::ScanState;

    fn capabilities(am: &mut pg_sys::IndexAmRoutine) {
        am.amstrategies = 5;
        am.amcanorder = true;
        am.amcanbackward = true;
        am.amsearcharray = true;
        am.amsearchnulls = true;
        // Walks of the delta's leaves (gpu_btree's split) and of the run's
        // pages (a forward range page by page among the participants),
        // and a third for the participants to agree on the generation.
        crate::am::common::parallel::enable_walks::<3>(am);
    }

    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
        build::build(index, fork, rows)
    }

    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid) {
        let tree = Tree::new(index);
        match value {
            None => tree.insert_null(tid),
            Some(v) => {
                run::note_delta_key(index);
                tree.insert(keys::encode(v, build::key_type(index)), tid)
            }
        }
    }

    fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
        delta::vacuum::bulk_delete(index, stats, dead);
        let (removed, kept) = vacuum::bulk_delete_run(index, dead);
        stats.tuples_removed += removed;
        stats.num_index_tuples += kept;
    }

    fn vacuum_cleanup(info: &pg_sys::IndexVacuumInfo, stats: &mut pg_sys::IndexBulkDeleteResult, bulk_deleted: bool) {
        if !bulk_deleted {
            stats.num_index_tuples = info.num_heap_tuples;
            stats.estimated_count = info.estimated_count;
        }
        if !info.analyze_only {
            merge::merge_if_due(info.index);
        }
        delta::vacuum::recycle_pages(info.index, stats);
    }

    const WALKS_ARRAYS_IN_KEY_ORDER: bool = true;

    fn cost(path: &pg_sys::IndexPath, generic: &pg_sys::GenericCosts) -> Estimate {
        delta::cost::estimate(path, generic)
    }

    fn check_opclass(c: &OpClass) -> Vec<String> {
        delta::validate::check(c)
    }
}

crate::index_am!(GpuLearned, gpu_learned_handler);

extension_sql_file!("access_method.sql", name = "gpu_learned");
