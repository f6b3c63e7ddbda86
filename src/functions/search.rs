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

use crate::am::common::search::{self, Ask, Batch};
use pgrx::datum::AnyArray;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Opens the index, maps `op` to its strategy and runs the batch.
fn run(index: pg_sys::Oid, op: pg_sys::Oid, queries: &AnyArray, k: Option<usize>, what: &'static str) -> search::Hits {
    let (mut query_type, mut values) = crate::arrays::elements(queries.datum());
    let open = search::open(index);
    let Some(strategy) = search::strategy_of(open.index, op, k.is_some()) else {
        // SAFETY: format_operator returns a palloc'd C string.
        let name = unsafe { std::ffi::CStr::from_ptr(pg_sys::format_operator(op)).to_string_lossy().into_owned() };
        let role = if k.is_some() { "an ordering" } else { "a search" };
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
            format!("operator {name} is not {role} operator of the index's operator class"),
            if k.is_some() {
                "gpuindex_nearest takes a distance operator such as <->."
            } else {
                "Use an operator the index answers in WHERE."
            },
        );
    };
    let (mut left, mut right) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
    // SAFETY: a catalog lookup of an existing operator.
    unsafe { pg_sys::op_input_types(op, &mut left, &mut right) };
    if right == pg_sys::FLOAT4ARRAYOID && query_type == pg_sys::FLOAT4OID {
        // real[] queries come as one array of one more dimension (SQL has
        // no arrays of arrays): its rows are the queries.
        // SAFETY: a non-NULL real[] argument (element type checked).
        let (rows, q) = unsafe { crate::am::gpu_metric::vector::matrix(queries.datum(), 2) };
        let dim = q.len() / rows.max(1);
        query_type = right;
        values = q.chunks(dim.max(1)).enumerate().map(|(i, row)| (i as i64 + 1, row.to_vec().into_datum().expect("an array"))).collect();
    }
    if right != query_type {
        let name = crate::error::type_name;
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("queries of type {}[] do not fit an operator taking {}", name(query_type), name(right)),
            format!("Cast the array: ARRAY[...]::{}[].", name(right)),
        );
    }
    let ask = match k {
        Some(k) => Ask::Nearest { strategy, k },
        None => Ask::Matches(strategy),
    };
    search::search(&open, &Batch { ask, query_type, queries: &values, what, heap_order: false })
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpuindex_search(index regclass, op regoperator, queries anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_search(index: pg_sys::Oid, op: pg_sys::Oid, queries: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    let hits = run(index, op, &queries, None, "gpuindex_search");
    // SAFETY: the call's own fcinfo, declared (ord bigint, ctid tid).
    unsafe { crate::srf::ord_tids(fcinfo, hits.rows) }
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpuindex_nearest(index regclass, op regoperator, queries anyarray, k int)
    RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_nearest(index: pg_sys::Oid, op: pg_sys::Oid, queries: AnyArray, k: i32, fcinfo: pg_sys::FunctionCallInfo) {
    let k = crate::error::positive_k(k);
    let hits = run(index, op, &queries, Some(k), "gpuindex_nearest");
    // SAFETY: the call's own fcinfo, declared (ord, ctid, distance).
    unsafe { crate::srf::ord_tid_distances(fcinfo, hits) }
}
