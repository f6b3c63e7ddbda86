//! amcostestimate. An ordered gpu_metric path is read a few rows at a time
//! under LIMIT: its startup is the descent (the pivots of each level the
//! walk opens), a few leaves and the whole delta, each row a distance of
//! `dim` float8 terms; the total adds the generic cost of reading every
//! entry, so that without LIMIT a sort of a sequential scan wins. A path of
//! balls alone finds all its rows before the first: the descent, the delta
//! and the generic cost of the rows inside (the operator's selectivity)
//! are all startup.

use super::page::{continuation_pages, entries_per_page};
use crate::am::common::Estimate;
use pgrx::pg_sys;

/// Leaves an ordered scan is charged for at its start.
const LEAVES_OPENED: f64 = 4.0;

pub fn estimate(path: &pg_sys::IndexPath, costs: &pg_sys::GenericCosts) -> Estimate {
    // SAFETY: the planner's index path has its IndexOptInfo; the index is
    // locked by the planner; cost GUCs are read in the backend.
    let (m, cpu_op, random_page_cost) = unsafe {
        let rel = pg_sys::index_open((*path.indexinfo).indexoid, pg_sys::AccessShareLock as i32);
        let m = super::shape::meta(rel);
        pg_sys::index_close(rel, pg_sys::AccessShareLock as i32);
        (m, pg_sys::cpu_operator_cost, pg_sys::random_page_cost)
    };
    let per_distance = cpu_op * (m.dim.max(1) as f64 / 8.0).max(1.0);
    let leaf = m.tree_entries as f64 / (m.fanout.max(2) as f64).powi(m.height as i32);
    let distances = m.height as f64 * m.fanout as f64 + LEAVES_OPENED * leaf + m.delta.entries as f64;
    let dim = m.dim as usize;
    let leaf_pages = (leaf / entries_per_page(dim) as f64).ceil() * (1 + continuation_pages(dim)) as f64;
    let pages = LEAVES_OPENED * leaf_pages + m.delta.pages as f64;
    let startup = distances * per_distance + pages * random_page_cost;
    let rest = costs.indexTotalCost + costs.numIndexTuples * per_distance;
    if path.indexorderbys.is_null() {
        let startup = startup + rest;
        return Estimate { startup, total: startup, pages: costs.numIndexPages.max(pages) };
    }
    Estimate { startup, total: startup + rest, pages: costs.numIndexPages.max(pages) }
}
