//! `gpuindex_lower_bound(sorted bigint[], probes bigint[]) -> bigint[]`:
//! for each probe, how many elements of `sorted` are smaller. A batch
//! lookup over a sorted array, on the CPU or the GPU; the GPU floor that
//! every index is measured against, callable from SQL.

use crate::batch;
use gpuindex_engine::keys::encode_i64;
use gpuindex_engine::sorted_array::{LowerBound, SortedKeys};
use pgrx::prelude::*;

fn encode(arg: &str, a: &Array<i64>) -> Vec<u64> {
    a.iter()
        .enumerate()
        .map(|(i, v)| match v {
            Some(v) => encode_i64(v),
            None => crate::error::raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("gpuindex_lower_bound: {arg} has a NULL at position {}", i + 1),
                "Remove NULLs first, e.g. array_remove(a, NULL).",
            ),
        })
        .collect()
}

#[pg_extern(immutable, parallel_safe, strict)]
fn gpuindex_lower_bound(sorted: Array<i64>, probes: Array<i64>) -> Vec<i64> {
    let keys = encode("sorted", &sorted);
    let queries = encode("probes", &probes);
    let keys = match SortedKeys::new(keys) {
        Ok(k) => k,
        Err(e) => crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("gpuindex_lower_bound: sorted is not in ascending order at position {}", e.position + 2),
            "Sort it first, e.g. (SELECT array_agg(x ORDER BY x) FROM ...).",
        ),
    };
    let out = batch::submit("gpuindex_lower_bound", &LowerBound::new(&keys), &queries);
    out.into_iter().map(|p| p as i64).collect()
}
