//! amcostestimate. Single searches and ranges cost what btree's do (the
//! descent and leaf work are the same), plus a hair, so that with both
//! indexes present btree keeps those. `= ANY(array)` is where gpu_btree
//! differs: btree descends once per element; gpu_btree runs one batch
//! through the mirror (one descent, then a per-probe step) and reads each
//! leaf page once.

use crate::am::common::Estimate;
use pgrx::pg_sys;

pub fn estimate(path: &pg_sys::IndexPath, costs: &pg_sys::GenericCosts) -> Estimate {
    // SAFETY: the planner's index path has its IndexOptInfo.
    let index = unsafe { &*path.indexinfo };
    // SAFETY: planner cost GUCs, read in the backend.
    let cpu_operator_cost = unsafe { pg_sys::cpu_operator_cost };
    let tuples = index.tuples.max(2.0);
    // btree's descent charge (btcostestimate): comparisons down the tree,
    // and a per-page charge for each level of a tree of ~600-way fanout.
    let height = (index.pages.max(1) as f64).log(600.0).ceil().max(0.0);
    let descent = (tuples.log2().ceil() + (height + 1.0) * 50.0) * cpu_operator_cost;
    let probes = costs.num_sa_scans.max(1.0);
    let mut cost = costs.indexTotalCost;
    if probes > 1.0 {
        // One batch: one descent, then a mirror step and a leaf search per probe.
        cost += descent + probes * 2.0 * cpu_operator_cost;
    } else {
        cost += descent;
        cost *= 1.01;
    }
    Estimate { startup: costs.indexStartupCost + descent, total: cost, pages: costs.numIndexPages }
}
