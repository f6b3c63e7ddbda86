//! amcostestimate: GiST's estimate (genericcostestimate plus a descent
//! charge), plus what gpu_spatial does differently: a matching leaf is
//! read whole (up to MC entries, several pages, each entry tested) and
//! every scan reads the whole delta chain.

use super::page::ENTRY_CAPACITY;
use crate::am::common::Estimate;
use pgrx::pg_sys;

pub fn estimate(path: &pg_sys::IndexPath, costs: &pg_sys::GenericCosts) -> Estimate {
    // SAFETY: the planner's index path has its IndexOptInfo; the index is
    // locked by the planner; cost GUCs are read in the backend.
    let (index, m, cpu_op, random_page_cost, seq_page_cost) = unsafe {
        let index = &*path.indexinfo;
        let rel = pg_sys::index_open(index.indexoid, pg_sys::AccessShareLock as i32);
        let m = super::shape::meta(rel);
        pg_sys::index_close(rel, pg_sys::AccessShareLock as i32);
        (index, m, pg_sys::cpu_operator_cost, pg_sys::random_page_cost, pg_sys::seq_page_cost)
    };
    let tuples = index.tuples.max(1.0);
    // GiST's descent charge: comparisons, and a per-level page charge.
    let height = (tuples / m.mc.max(1) as f64).log(4.0).ceil().max(0.0) + 1.0;
    let descent = tuples.log2().ceil().max(0.0) * cpu_op + height * 50.0 * cpu_op;
    // Leaves that hold the matches, each read whole.
    let leaf_entries = (m.mc as f64 / 2.0).max(1.0).min(m.tree_entries.max(1) as f64);
    let leaves = (costs.numIndexTuples / leaf_entries).ceil().max(1.0);
    let leaf_pages = leaves * (leaf_entries / ENTRY_CAPACITY as f64).ceil();
    let leaf_work = (leaf_pages - costs.numIndexPages).max(0.0) * random_page_cost + leaves * leaf_entries * cpu_op;
    let delta: f64 = m.chains().iter().map(|c| c.pages as f64 * seq_page_cost + c.entries as f64 * cpu_op).sum();
    Estimate {
        startup: costs.indexStartupCost + descent + delta,
        total: costs.indexTotalCost + descent + delta + leaf_work,
        pages: costs.numIndexPages.max(leaf_pages),
    }
}
