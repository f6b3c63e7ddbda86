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
        *out.startup = e.startup;
        *out.total = e.total;
        *out.selectivity = costs.indexSelectivity;
        *out.correlation = costs.indexCorrelation;
        *out.pages = e.pages;
    }
}
