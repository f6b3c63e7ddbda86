//! amcostestimate. Single searches and ranges cost what btree's do (the
//! descent and leaf work are the same), plus a hair, so that with both
//! indexes present btree keeps those. `= ANY(array)` is where gpu_btree
//! differs: btree descends once per element; gpu_btree runs one batch
//! through the mirror (one descent, then a per-probe step) and reads each
//! leaf page once.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
pub unsafe extern "C-unwind" fn amcostestimate(
    root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    let mut costs = pg_sys::GenericCosts::default();
    pg_sys::genericcostestimate(root, path, loop_count, &mut costs);
    let index = &*(*path).indexinfo;
    let tuples = index.tuples.max(2.0);
    // btree's descent charge (btcostestimate): comparisons down the tree,
    // and a per-page charge for each level of a tree of ~600-way fanout.
    let height = (index.pages.max(1) as f64).log(600.0).ceil().max(0.0);
    let descent = (tuples.log2().ceil() + (height + 1.0) * 50.0) * pg_sys::cpu_operator_cost;
    let probes = costs.num_sa_scans.max(1.0);
    let mut cost = costs.indexTotalCost;
    if probes > 1.0 {
        // One batch: one descent, then a mirror step and a leaf search per probe.
        cost += descent + probes * 2.0 * pg_sys::cpu_operator_cost;
    } else {
        cost += descent;
        cost *= 1.01;
    }
    *startup = costs.indexStartupCost + descent;
    *total = cost;
    *selectivity = costs.indexSelectivity;
    *correlation = costs.indexCorrelation;
    *pages = costs.numIndexPages;
}
