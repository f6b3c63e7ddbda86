//! `real[]` as a vector: a one-dimensional array without NULLs, non-empty,
//! of finite numbers; and the distance operators on it, which compute with
//! the engine's `Metric::distance` (what the index compares, bit for bit).
//! `value` and `fit_query` are where every row and query of an index
//! becomes the engine's vector, `text` (`text.rs`) and pgvector's `vector`
//! (`pgvector.rs`) included.

use super::pgvector;
use gpuindex_engine::gts::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::borrow::Cow;

/// The type that holds an index's values (its operator class's input
/// type, checked by `build::metric_of`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    Real,
    /// For edit distance.
    Text,
    /// pgvector's `vector`.
    PgVector,
}

impl Form {
    /// The form of an index's values.
    pub fn of(index: pg_sys::Relation) -> Form {
        // SAFETY: an open index has an input type per column.
        match unsafe { *(*index).rd_opcintype } {
            pg_sys::TEXTOID => Form::Text,
            pg_sys::FLOAT4ARRAYOID => Form::Real,
            _ => Form::PgVector,
        }
    }

    /// gpuindex's own type for `metric` (its operators' and balls'):
    /// text for edit distance, real[] for the others.
    pub fn native(metric: Metric) -> Form {
        if metric == Metric::Levenshtein {
            Form::Text
        } else {
            Form::Real
        }
    }
}

/// A row's or query's value as the engine's vector: a `real[]`'s or a
/// `vector`'s elements (checked; non-zero for cosine), or for edit
/// distance a text's character codes (not padded yet).
///
/// # Safety
/// `d` is a non-NULL datum of `form`.
pub unsafe fn value<'a>(d: pg_sys::Datum, form: Form, metric: Metric) -> Cow<'a, [f32]> {
    // SAFETY: as the caller's.
    let v = unsafe {
        match form {
            Form::Text => return Cow::Owned(super::text::codes(d)),
            Form::Real => elements(d),
            Form::PgVector => pgvector::elements(d),
        }
    };
    check_nonzero(metric, v);
    Cow::Borrowed(v)
}

/// A query fitted to an index whose vectors have `dim` elements (0: none
/// yet): a vector of another dimension is the distance operator's own
/// ERROR; a string is zero-padded to the index's width.
pub fn fit_query(metric: Metric, v: Cow<[f32]>, dim: usize) -> Vec<f32> {
    if metric == Metric::Levenshtein {
        return super::text::pad(v.into_owned(), dim);
    }
    if dim != 0 {
        distance(metric, &vec![1.0; dim], &v);
    }
    v.into_owned()
}

fn bad(msg: String, hint: &str) -> ! {
    crate::error::raise(PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, msg, hint)
}

/// The elements of a `real[]` datum, checked: one vector.
///
/// # Safety
/// `d` is a non-NULL `real[]` datum.
pub unsafe fn elements<'a>(d: pg_sys::Datum) -> &'a [f32] {
    // SAFETY: as the caller's.
    let (rows, v) = unsafe { matrix(d, 1) };
    debug_assert_eq!(rows, 1);
    v
}

/// The elements of a `real[]` datum of one dimension, or of two (`most`
/// = 2: one vector per row), checked; returns the number of rows and the
/// elements. The slice borrows the detoasted array (palloc'd in the
/// current memory context when it was toasted).
///
/// # Safety
/// `d` is a non-NULL `real[]` datum.
pub unsafe fn matrix<'a>(d: pg_sys::Datum, most: usize) -> (usize, &'a [f32]) {
    // SAFETY: as the caller's; the array header is read by its macros'
    // definitions (ArrayType: vl_len_, ndim, dataoffset, elemtype, then
    // dims[ndim], lbound[ndim], the NULL bitmap, the data).
    unsafe {
        let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let ndim = (*arr).ndim as usize;
        if (*arr).elemtype != pg_sys::FLOAT4OID {
            bad(format!("a vector must be real[], not {}[]", crate::error::type_name((*arr).elemtype)), "Cast it: ARRAY[...]::real[].");
        }
        if ndim == 0 {
            bad("a vector must not be empty".into(), "Give it at least one element.");
        }
        if ndim > most {
            let what = if most == 1 { "a vector must be one-dimensional" } else { "queries must be one vector per row" };
            bad(format!("{what}, not {ndim}-dimensional"), "Pass one vector per value, or a two-dimensional array of them.");
        }
        if (*arr).dataoffset != 0 {
            bad("a vector must not contain NULL".into(), "Replace NULL elements by numbers.");
        }
        let dims = std::slice::from_raw_parts((arr as *const u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *const i32, ndim);
        let n: usize = dims.iter().map(|&x| x as usize).product();
        let rows = if ndim == 2 { dims[0] as usize } else { 1 };
        // ARR_OVERHEAD_NONULLS: the header and two int arrays, MAXALIGNed.
        let data = (arr as *const u8).add((std::mem::size_of::<pg_sys::ArrayType>() + 8 * ndim).next_multiple_of(8));
        let v = std::slice::from_raw_parts(data as *const f32, n);
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            bad(format!("vector element {} is {}", i + 1, v[i]), "Vectors hold finite numbers only (no NaN or infinity).");
        }
        (rows, v)
    }
}

/// The distance between two vectors of one dimension (strings: any
/// lengths).
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
    if metric == Metric::Levenshtein {
        return gpuindex_engine::gts::metric::edit_distance(a, b);
    }
    if a.len() != b.len() {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("vectors of different dimensions: {} and {}", a.len(), b.len()),
            "Compare vectors of the same length.",
        );
    }
    check_nonzero(metric, a);
    check_nonzero(metric, b);
    metric.distance(a, b)
}

/// Cosine distance is undefined for a zero vector.
pub fn check_nonzero(metric: Metric, v: &[f32]) {
    if metric == Metric::Cosine && v.iter().all(|&x| x == 0.0) {
        bad("cosine distance is undefined for a zero vector".into(), "Leave zero vectors out, or use <-> (L2) or <+> (L1).");
    }
}

/// # Safety
/// `fcinfo` has a non-NULL argument `i`.
unsafe fn arg(fcinfo: pg_sys::FunctionCallInfo, i: usize) -> pg_sys::Datum {
    // SAFETY: as the caller's.
    unsafe { pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, i) }
}

fn operator(metric: Metric, a: pg_sys::Datum, b: pg_sys::Datum) -> f64 {
    // SAFETY: the operators' arguments are non-NULL real[] (STRICT).
    unsafe { distance(metric, elements(a), elements(b)) }
}

/// `real[] <-> real[]`: Euclidean distance.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    sql = "CREATE FUNCTION gpu_metric_l2_distance(real[], real[]) RETURNS float8
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_l2_distance(fcinfo: pg_sys::FunctionCallInfo) -> f64 {
    // SAFETY: two arguments, both non-NULL (STRICT).
    unsafe { operator(Metric::L2, arg(fcinfo, 0), arg(fcinfo, 1)) }
}

/// `real[] <+> real[]`: Manhattan distance.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    sql = "CREATE FUNCTION gpu_metric_l1_distance(real[], real[]) RETURNS float8
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_l1_distance(fcinfo: pg_sys::FunctionCallInfo) -> f64 {
    // SAFETY: as above.
    unsafe { operator(Metric::L1, arg(fcinfo, 0), arg(fcinfo, 1)) }
}

/// `real[] <=> real[]`: cosine distance, 1 - cos.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    sql = "CREATE FUNCTION gpu_metric_cosine_distance(real[], real[]) RETURNS float8
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_cosine_distance(fcinfo: pg_sys::FunctionCallInfo) -> f64 {
    // SAFETY: as above.
    unsafe { operator(Metric::Cosine, arg(fcinfo, 0), arg(fcinfo, 1)) }
}
