//! amcostestimate: PostgreSQL's generic estimate, to which each access
//! method adds what its structure does differently (`IndexAm::cost`).

use pgrx::pg_sys;

/// Where amcostestimate writes its answer.
pub struct CostOut {
    pub startup: *mut pg_sys::Cost,
    pub total: *mut pg_sys::Cost,
    pub selectivity: *mut pg_sys::Selectivity,
    pub correlation: *mut f64,
    pub pages: *mut f64,
}

/// The generic estimate's selectivity and correlation, with the access
/// method's costs and pages.
///
/// # Safety
/// The planner's own arguments.
pub unsafe fn amcostestimate<A: super::IndexAm>(
    root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    loop_count: f64,
    out: &CostOut,
) {
    let mut costs = pg_sys::GenericCosts::default();
    // SAFETY: as the caller's.
    unsafe {
        pg_sys::genericcostestimate(root, path, loop_count, &mut costs);
        let e = A::cost(&*path, &costs);
        let walk = if A::WALKS_ARRAYS_IN_KEY_ORDER { sorted_walk(root, &*(*path).indexinfo, &costs, loop_count) } else { 0.0 };
        *out.startup = e.startup;
        *out.total = e.total + walk;
        *out.selectivity = costs.indexSelectivity;
        *out.correlation = costs.indexCorrelation;
        *out.pages = e.pages;
    }
}

/// The change to the generic estimate's page charge for an `= ANY` scan
/// that walks the index once in key order. genericcostestimate prices the
/// array as one scan per element, each reading its leaf pages at
/// random_page_cost (repeats discounted by Mackert-Lohman). A walk in key
/// order reads each leaf holding elements once, in the order a bulk build
/// wrote them: priced as cost_bitmap_heap_scan prices heap pages read in
/// block order, between random_page_cost (few pages) and seq_page_cost
/// (all of them) by the square root of the share read. A 128K-element
/// array over a 10^7-row index reads nearly every leaf: the generic
/// charge of ~4 a leaf kept the planner on a sequential scan three times
/// slower than the index. Nested-loop inner scans (loop_count > 1) keep
/// the generic charge.
///
/// # Safety
/// The planner's arguments to amcostestimate, after genericcostestimate.
unsafe fn sorted_walk(root: *mut pg_sys::PlannerInfo, index: &pg_sys::IndexOptInfo, costs: &pg_sys::GenericCosts, loop_count: f64) -> f64 {
    let pages = index.pages as f64;
    if costs.num_sa_scans <= 1.0 || loop_count > 1.0 || pages < 2.0 {
        return 0.0;
    }
    let visits = costs.numIndexPages * costs.num_sa_scans;
    // (genericcostestimate's own random_page_cost for the tablespace.)
    let random_page_cost = costs.spc_random_page_cost;
    let mut seq_page_cost = 0.0;
    // SAFETY: the caller's planner state; the index's tablespace.
    let generic = unsafe {
        pg_sys::get_tablespace_page_costs(index.reltablespace, std::ptr::null_mut(), &mut seq_page_cost);
        pg_sys::index_pages_fetched(visits, index.pages, pages, root) * random_page_cost
    };
    // Distinct leaves among the visits, drawn uniformly (Cardenas).
    let read = (pages * (1.0 - (-visits / pages).exp())).clamp(1.0, pages);
    let per_page =
        if read >= 2.0 { random_page_cost - (random_page_cost - seq_page_cost) * (read / pages).sqrt() } else { random_page_cost };
    read * per_page - generic
}
