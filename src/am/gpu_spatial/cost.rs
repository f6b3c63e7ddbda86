//! amcostestimate: GiST's estimate (genericcostestimate plus a descent
//! charge), plus what gpu_spatial does differently: a matching leaf is
//! read whole (up to MC entries, several pages, each entry tested) and
//! every scan reads the whole delta chain.

use super::page::ENTRY_CAPACITY;
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
    let rel = pg_sys::index_open(index.indexoid, pg_sys::AccessShareLock as i32);
    let m = super::shape::meta(rel);
    pg_sys::index_close(rel, pg_sys::AccessShareLock as i32);
    let tuples = index.tuples.max(1.0);
    let cpu_op = pg_sys::cpu_operator_cost;
    // GiST's descent charge: comparisons, and a per-level page charge.
    let height = (tuples / m.mc.max(1) as f64).log(4.0).ceil().max(0.0) + 1.0;
    let descent = tuples.log2().ceil().max(0.0) * cpu_op + height * 50.0 * cpu_op;
    // Leaves that hold the matches, each read whole.
    let leaf_entries = (m.mc as f64 / 2.0).max(1.0).min(m.tree_entries.max(1) as f64);
    let leaves = (costs.numIndexTuples / leaf_entries).ceil().max(1.0);
    let leaf_pages = leaves * (leaf_entries / ENTRY_CAPACITY as f64).ceil();
    let leaf_work = (leaf_pages - costs.numIndexPages).max(0.0) * pg_sys::random_page_cost + leaves * leaf_entries * cpu_op;
    let delta: f64 = m.chains().iter().map(|c| c.pages as f64 * pg_sys::seq_page_cost + c.entries as f64 * cpu_op).sum();
    *startup = costs.indexStartupCost + descent + delta;
    *total = costs.indexTotalCost + descent + delta + leaf_work;
    *selectivity = costs.indexSelectivity;
    *correlation = costs.indexCorrelation;
    *pages = costs.numIndexPages.max(leaf_pages);
}
