//! The start of every amcostestimate: PostgreSQL's generic estimate, to
//! which each access method adds what its structure does differently.

use pgrx::pg_sys;

/// The generic estimate of an index path.
///
/// # Safety
/// The planner's own arguments.
pub unsafe fn generic(root: *mut pg_sys::PlannerInfo, path: *mut pg_sys::IndexPath, loop_count: f64) -> pg_sys::GenericCosts {
    let mut costs = pg_sys::GenericCosts::default();
    // SAFETY: as the caller's.
    unsafe { pg_sys::genericcostestimate(root, path, loop_count, &mut costs) };
    costs
}

/// Where amcostestimate writes its answer.
pub struct CostOut {
    pub startup: *mut pg_sys::Cost,
    pub total: *mut pg_sys::Cost,
    pub selectivity: *mut pg_sys::Selectivity,
    pub correlation: *mut f64,
    pub pages: *mut f64,
}

impl CostOut {
    /// Writes the estimate: the generic one's selectivity and correlation
    /// with the access method's costs and pages.
    ///
    /// # Safety
    /// The pointers are amcostestimate's.
    pub unsafe fn write(&self, costs: &pg_sys::GenericCosts, startup: f64, total: f64, pages: f64) {
        // SAFETY: as the caller's.
        unsafe {
            *self.startup = startup;
            *self.total = total;
            *self.selectivity = costs.indexSelectivity;
            *self.correlation = costs.indexCorrelation;
            *self.pages = pages;
        }
    }
}

/// amcostestimate: the generic estimate, the access method's costs.
///
/// # Safety
/// The planner's own arguments.
pub unsafe fn amcostestimate<A: super::IndexAm>(
    root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    loop_count: f64,
    out: &CostOut,
) {
    // SAFETY: as the caller's.
    unsafe {
        let costs = generic(root, path, loop_count);
        let e = A::cost(&*path, &costs);
        out.write(&costs, e.startup, e.total, e.pages);
    }
}
