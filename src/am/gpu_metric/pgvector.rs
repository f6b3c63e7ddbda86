//! pgvector's `vector` in gpu_metric. gpuindex installs without pgvector:
//! the operator classes for `vector` (`vector_l2_ops`, `vector_l1_ops`,
//! `vector_cosine_ops`, with pgvector's own `<->`, `<+>`, `<=>`), the
//! `<@` ball operators and the batch functions on `vector[]` come with the
//! companion extension `gpuindex_pgvector` (`extension/`), which requires
//! both. Its C functions are these, in gpuindex's library.
//!
//! A `vector` datum is a varlena: int16 dim, int16 unused, float4 x[dim]
//! (pgvector's `Vector`). The index holds the same floats as any vector.
//!
//! Ordering: pgvector's operators sum in float4, so their value can differ
//! from the index's in the last bits. An ordered scan returns, for each
//! row, `float4::lower_bound` of pgvector's value with `xs_recheckorderby`
//! set: the executor recomputes pgvector's own distance and orders by it,
//! so `ORDER BY v <-> q LIMIT k` returns what a sequential scan returns.

use gpuindex_engine::gts::{float4, Metric};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// pgvector's `vector`: the type named `vector` whose input function is
/// pgvector's `vector_in`.
pub fn is_vector_type(t: pg_sys::Oid) -> bool {
    // SAFETY: syscache lookups; the tuple is released before returning and
    // the name copied out of it first.
    unsafe {
        let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::TYPEOID as i32, pg_sys::Datum::from(t));
        if tup.is_null() {
            return false;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_type>(tup);
        let named = std::ffi::CStr::from_ptr((*form).typname.data.as_ptr()).to_bytes() == b"vector";
        let input = (*form).typinput;
        pg_sys::ReleaseSysCache(tup);
        if !named {
            return false;
        }
        let f = pg_sys::get_func_name(input);
        !f.is_null() && std::ffi::CStr::from_ptr(f).to_bytes() == b"vector_in"
    }
}

/// The floats of a non-NULL `vector` datum (detoasted; finite, as
/// pgvector's input functions make them).
///
/// # Safety
/// `d` is a non-NULL datum of pgvector's `vector`.
pub unsafe fn elements<'a>(d: pg_sys::Datum) -> &'a [f32] {
    // SAFETY: as the caller's; a detoasted varlena with a 4-byte header,
    // aligned as pgvector's type (int4), laid out as pgvector's `Vector`.
    unsafe {
        let v = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *const u8;
        let dim = *(v.add(4) as *const i16);
        let x = std::slice::from_raw_parts(v.add(8) as *const f32, dim.max(0) as usize);
        if x.is_empty() || x.iter().any(|f| !f.is_finite()) {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                "a vector must have at least one element, all finite",
                "Check the value: pgvector's input functions do not make such vectors.",
            );
        }
        x
    }
}

/// Rows of a cosine index: pgvector's float4 arithmetic on them must stay
/// within `float4::lower_bound`'s slack, or an index scan could not order
/// them exactly.
pub fn check_cosine_row(v: &[f32]) {
    if !float4::cosine_safe(v) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            "gpu_metric cannot order this vector exactly by pgvector's cosine distance",
            "Its squared norm must lie between 2^-60 and 2^120 (pgvector's single-precision sums under- or overflow outside); normalize the vectors.",
        );
    }
}

/// The value of an argument of a STRICT function.
///
/// # Safety
/// `fcinfo` has a non-NULL argument `i`.
unsafe fn arg(fcinfo: pg_sys::FunctionCallInfo, i: usize) -> pg_sys::Datum {
    // SAFETY: as the caller's.
    unsafe { pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, i) }
}

fn in_ball(metric: Metric, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: (vector, ball) arguments, both non-NULL (STRICT).
    unsafe {
        let v = elements(arg(fcinfo, 0));
        super::vector::check_nonzero(metric, v);
        super::ball::Ball::read(arg(fcinfo, 1), metric).holds(metric, v)
    }
}

/// `vector <@ l2_ball` (created by gpuindex_pgvector).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn gpu_metric_vector_in_l2_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::L2, fcinfo)
}

/// `vector <@ l1_ball` (created by gpuindex_pgvector).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn gpu_metric_vector_in_l1_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::L1, fcinfo)
}

/// `vector <@ cosine_ball` (created by gpuindex_pgvector).
#[pg_extern(immutable, strict, parallel_safe, sql = false)]
fn gpu_metric_vector_in_cosine_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::Cosine, fcinfo)
}
