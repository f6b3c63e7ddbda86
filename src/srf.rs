//! Set-returning functions in materialize mode: all rows go straight into
//! the executor's tuplestore in one call. The batch functions return up to
//! millions of rows; pgrx's value-per-call iterators cost one function
//! call, one memory-context switch and one heap tuple per row.

use pgrx::pg_sys;

unsafe extern "C-unwind" {
    /// tuplestore.c's, called by `materialize` for a block of rows under
    /// one guard.
    #[link_name = "tuplestore_putvalues"]
    fn tuplestore_putvalues_unguarded(
        state: *mut pg_sys::Tuplestorestate,
        tdesc: pg_sys::TupleDesc,
        values: *mut pg_sys::Datum,
        isnull: *mut bool,
    );
}

/// Rows stored under one guard (pgrx's guard of a call is a sigsetjmp and
/// a thread check: one per block instead of one per row).
const BLOCK: usize = 1024;

/// Writes `rows` as the result of the set-returning function called
/// through `fcinfo` (declared `RETURNS TABLE` of `N` columns, none of them
/// NULL): `fill` sets a row's `N` column datums. By-reference datums only
/// need to live until `fill` returns for the next row (each row is
/// copied).
///
/// # Safety
/// `fcinfo` is the call's own; datums `fill` writes match the declared
/// column types; `fill` and the iterator do not panic.
pub unsafe fn materialize<R: Copy, const N: usize>(
    fcinfo: pg_sys::FunctionCallInfo,
    rows: impl IntoIterator<Item = R>,
    mut fill: impl FnMut(&R, &mut [pg_sys::Datum; N]),
) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        // Checks that the caller accepts a materialized set; makes the store
        // (work_mem, spilling to disk beyond) and the result descriptor.
        pg_sys::InitMaterializedSRF(fcinfo, 0);
        let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
        let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
        // (Room for every column the descriptor has, whatever N is.)
        let width = ((*desc).natts as usize).max(N);
        let mut values = vec![pg_sys::Datum::from(0usize); width];
        let mut nulls = vec![false; width];
        let mut rows = rows.into_iter();
        let mut more = true;
        while more {
            // The closure holds nothing with a destructor (rows are Copy),
            // so an ERROR from the store (out of memory, a temporary file
            // that cannot be written) leaves it as from a guarded call.
            pg_sys::ffi::pg_guard_ffi_boundary(|| {
                for _ in 0..BLOCK {
                    let Some(row) = rows.next() else {
                        more = false;
                        return;
                    };
                    fill(&row, (&mut values[..N]).try_into().expect("width >= N"));
                    tuplestore_putvalues_unguarded(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
                }
            });
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
        materialize(fcinfo, rows, |r, v: &mut [pg_sys::Datum; 2]| {
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
        materialize(fcinfo, rows, |((ord, ctid), d), v: &mut [pg_sys::Datum; 3]| {
            v[0] = (*ord).into();
            v[1] = tid_datum(ctid);
            v[2] = pg_sys::Datum::from(d.to_bits());
        })
    }
}
