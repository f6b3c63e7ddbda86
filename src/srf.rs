//! Set-returning functions in materialize mode: rows go straight into the
//! executor's tuplestore, a piece at a time. The batch functions return up to
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

/// The result of the set-returning function called through `fcinfo`
/// (declared `RETURNS TABLE`, no column NULL), written in as many `put`s
/// as the caller has pieces of rows.
pub struct Rows {
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Rows {
    /// # Safety
    /// `fcinfo` is the call's own.
    pub unsafe fn begin(fcinfo: pg_sys::FunctionCallInfo) -> Rows {
        // SAFETY: the caller's contract.
        unsafe {
            // Checks that the caller accepts a materialized set; makes the
            // store (work_mem, spilling to disk beyond) and the result
            // descriptor.
            pg_sys::InitMaterializedSRF(fcinfo, 0);
            let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
            let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
            let width = (*desc).natts as usize;
            Rows { store, desc, values: vec![pg_sys::Datum::from(0usize); width], nulls: vec![false; width] }
        }
    }

    /// Writes `rows`: `fill` sets a row's first `N` column datums.
    /// By-reference datums only need to live until `fill` returns for the
    /// next row (each row is copied).
    ///
    /// # Safety
    /// Datums `fill` writes match the declared column types; `fill` and the
    /// iterator do not panic.
    pub unsafe fn put<R: Copy, const N: usize>(
        &mut self,
        rows: impl IntoIterator<Item = R>,
        mut fill: impl FnMut(&R, &mut [pg_sys::Datum; N]),
    ) {
        assert!(N <= self.values.len(), "a result of at least {N} columns");
        let mut rows = rows.into_iter();
        let mut more = true;
        while more {
            // The closure holds nothing with a destructor (rows are Copy),
            // so an ERROR from the store (out of memory, a temporary file
            // that cannot be written) leaves it as from a guarded call.
            // SAFETY: the caller's contract; the store and descriptor of
            // `begin`.
            unsafe {
                pg_sys::ffi::pg_guard_ffi_boundary(|| {
                    for _ in 0..BLOCK {
                        let Some(row) = rows.next() else {
                            more = false;
                            return;
                        };
                        fill(&row, (&mut self.values[..N]).try_into().expect("width >= N"));
                        tuplestore_putvalues_unguarded(self.store, self.desc, self.values.as_mut_ptr(), self.nulls.as_mut_ptr());
                    }
                });
            }
        }
    }

    /// Writes a batch's (ord, ctid) rows, or (ord, ctid, distance) where it
    /// has distances.
    ///
    /// # Safety
    /// The function is declared with those columns.
    pub unsafe fn put_hits(&mut self, hits: crate::am::common::search::Hits) {
        // SAFETY: the caller's contract.
        unsafe {
            match hits.distances {
                None => self.put(hits.rows, |r, v: &mut [pg_sys::Datum; 2]| {
                    v[0] = r.0.into();
                    v[1] = tid_datum(&r.1);
                }),
                Some(d) => self.put(hits.rows.into_iter().zip(d), |((ord, ctid), d), v: &mut [pg_sys::Datum; 3]| {
                    v[0] = (*ord).into();
                    v[1] = tid_datum(ctid);
                    v[2] = pg_sys::Datum::from(d.to_bits());
                }),
            }
        }
    }
}

/// A tid column's datum: a pointer to the value (pass by reference).
pub fn tid_datum(t: &pg_sys::ItemPointerData) -> pg_sys::Datum {
    pg_sys::Datum::from(t as *const pg_sys::ItemPointerData)
}
