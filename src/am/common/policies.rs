//! Row-level security for batch functions: of the rows a function would
//! return, only those the table's policies let the caller SELECT.
//!
//! PostgreSQL applies the policies itself: the TIDs go through
//! `SELECT ctid FROM ONLY t WHERE ctid = ANY($1)`, planned for the caller
//! (so every SELECT policy, with its subqueries and functions, is applied
//! as in any query of theirs), run read-only under the caller's active
//! snapshot (so it sees exactly the rows the visibility pass kept). The
//! TIDs are the visible members of their HOT chains, which a TID scan
//! fetches directly.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashSet;
use std::ffi::CStr;

/// TIDs per query: bounds the array and the result in memory.
const CHUNK: usize = 65_536;

fn spi_failed(what: &str, code: i32) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("gpuindex: applying row-level security policies: {what} failed (SPI code {code})"),
        "Query the table through its index with a normal WHERE clause instead.",
    )
}

fn key(t: &pg_sys::ItemPointerData) -> u64 {
    crate::storage::tid_from(*t)
}

/// Keeps the rows whose TIDs pass `heap`'s policies for the current user.
pub fn filter(heap: pg_sys::Relation, rows: Vec<(i64, pg_sys::ItemPointerData)>) -> Vec<(i64, pg_sys::ItemPointerData)> {
    let mut tids: Vec<pg_sys::ItemPointerData> = rows.iter().map(|r| r.1).collect();
    tids.sort_unstable_by_key(key);
    tids.dedup_by_key(|t| key(t));
    if tids.is_empty() {
        return rows;
    }
    let mut allowed: HashSet<u64> = HashSet::with_capacity(tids.len());
    // SAFETY: SPI from a backend inside a transaction with an active
    // snapshot; every SPI call is checked, and SPI_finish runs unless an
    // ERROR aborts the transaction (which cleans SPI up).
    unsafe {
        let table = CStr::from_ptr(pg_sys::quote_qualified_identifier(
            pg_sys::get_namespace_name((*(*heap).rd_rel).relnamespace),
            pg_sys::get_rel_name((*heap).rd_id),
        ))
        .to_string_lossy()
        .into_owned();
        let sql = std::ffi::CString::new(format!("SELECT ctid FROM ONLY {table} WHERE ctid = ANY($1)")).expect("no NUL");
        let rc = pg_sys::SPI_connect();
        if rc != pg_sys::SPI_OK_CONNECT as i32 {
            spi_failed("SPI_connect", rc);
        }
        let mut arg_types = [pg_sys::TIDARRAYOID];
        let plan = pg_sys::SPI_prepare(sql.as_ptr(), 1, arg_types.as_mut_ptr());
        if plan.is_null() {
            spi_failed("SPI_prepare", pg_sys::SPI_result);
        }
        for chunk in tids.chunks(CHUNK) {
            let mut elems: Vec<pg_sys::Datum> = chunk.iter().map(|t| pg_sys::Datum::from(t as *const pg_sys::ItemPointerData)).collect();
            let array = pg_sys::construct_array(
                elems.as_mut_ptr(),
                elems.len() as i32,
                pg_sys::TIDOID,
                std::mem::size_of::<pg_sys::ItemPointerData>() as i32,
                false,
                pg_sys::TYPALIGN_SHORT as std::ffi::c_char,
            );
            let mut values = [pg_sys::Datum::from(array)];
            // read_only: no new snapshot, no command counter increment.
            let rc = pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), std::ptr::null(), true, 0);
            if rc != pg_sys::SPI_OK_SELECT as i32 {
                spi_failed("SPI_execute_plan", rc);
            }
            let table = &*pg_sys::SPI_tuptable;
            for i in 0..table.numvals as usize {
                let mut null = false;
                let d = pg_sys::SPI_getbinval(*table.vals.add(i), table.tupdesc, 1, &mut null);
                if !null {
                    allowed.insert(key(&*d.cast_mut_ptr::<pg_sys::ItemPointerData>()));
                }
            }
            pg_sys::SPI_freetuptable(pg_sys::SPI_tuptable);
            pg_sys::pfree(array.cast());
        }
        pg_sys::SPI_finish();
    }
    rows.into_iter().filter(|r| allowed.contains(&key(&r.1))).collect()
}
