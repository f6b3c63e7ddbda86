//! Set-returning functions in materialize mode: all rows go straight into
//! the executor's tuplestore in one call. The batch functions return up to
//! millions of rows; pgrx's value-per-call iterators cost one function
//! call, one memory-context switch and one heap tuple per row.

use pgrx::pg_sys;

/// Writes `rows` as the result of the set-returning function called
/// through `fcinfo` (declared `RETURNS TABLE`, none of its columns NULL):
/// `fill` sets a row's column datums. By-reference datums only need to
/// live until `fill` returns for the next row (each row is copied).
///
/// # Safety
/// `fcinfo` is the call's own; datums `fill` writes match the declared
/// column types.
pub unsafe fn materialize<R>(
    fcinfo: pg_sys::FunctionCallInfo,
    rows: impl IntoIterator<Item = R>,
    mut fill: impl FnMut(&R, &mut [pg_sys::Datum]),
) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        // Checks that the caller accepts a materialized set; makes the store
        // (work_mem, spilling to disk beyond) and the result descriptor.
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
        let natts = (*desc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![false; natts];
        for row in rows {
            fill(&row, &mut values);
            pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        }
    }
}

/// A tid column's datum: a pointer to the value (pass by reference).
pub fn tid_datum(t: &pg_sys::ItemPointerData) -> pg_sys::Datum {
    pg_sys::Datum::from(t as *const pg_sys::ItemPointerData)
}

/// Returns `(ord bigint, ctid tid)` rows.
///
/// # Safety
/// As `materialize`, for a function declared with those two columns.
pub unsafe fn ord_tids(fcinfo: pg_sys::FunctionCallInfo, rows: Vec<(i64, pg_sys::ItemPointerData)>) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        materialize(fcinfo, rows, |r, v| {
            v[0] = r.0.into();
            v[1] = tid_datum(&r.1);
        })
    }
}

/// Returns `(ord bigint, ctid tid, distance float8)` rows of a nearest
/// search.
///
/// # Safety
/// As `materialize`, for a function declared with those three columns.
pub unsafe fn ord_tid_distances(fcinfo: pg_sys::FunctionCallInfo, hits: crate::am::common::search::Hits) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        let rows = hits.rows.into_iter().zip(hits.distances.expect("distances of neighbours"));
        materialize(fcinfo, rows, |((ord, ctid), d), v| {
            v[0] = (*ord).into();
            v[1] = tid_datum(ctid);
            v[2] = pg_sys::Datum::from(d.to_bits());
        })
    }
}
