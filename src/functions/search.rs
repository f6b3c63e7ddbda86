//! `gpuindex_search` and `gpuindex_nearest`: a batch through any gpuindex
//! index, named by its operator as in a WHERE or ORDER BY clause:
//!
//! - `gpuindex_search(index, op, queries)`: for each query q, the rows
//!   with `key op q` (e.g. `'=(bigint,bigint)'`, `'<@(point,box)'`);
//! - `gpuindex_nearest(index, op, queries, k)`: the k rows nearest each
//!   query by the ordering operator op (e.g. `'<->(point,point)'`).
//!
//! They are what the per-type batch functions are, for any access method
//! (`am::common::search`), and the path the batched join takes.

use pgrx::datum::AnyArray;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Opens the index, maps `op` to its strategy and returns the batch's rows.
fn run(index: pg_sys::Oid, op: pg_sys::Oid, queries: &AnyArray, k: Option<usize>, what: &'static str, fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: the call's own fcinfo, declared (ord, ctid[, distance]) as
    // `k` says.
    unsafe { super::call::Call::by_operator(index, op, queries.datum(), k, what).return_rows(fcinfo) }
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpuindex_search(index regclass, op regoperator, queries anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_search(index: pg_sys::Oid, op: pg_sys::Oid, queries: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    run(index, op, &queries, None, "gpuindex_search", fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpuindex_nearest(index regclass, op regoperator, queries anyarray, k int)
    RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_nearest(index: pg_sys::Oid, op: pg_sys::Oid, queries: AnyArray, k: i32, fcinfo: pg_sys::FunctionCallInfo) {
    let k = crate::error::positive_k(k);
    run(index, op, &queries, Some(k), "gpuindex_nearest", fcinfo)
}
