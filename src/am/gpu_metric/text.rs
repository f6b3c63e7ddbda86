//! `text` as a string of characters for edit distance: its characters'
//! codes in the database encoding (`pg_mb2wchar_with_len`: Unicode code
//! points under UTF8), which the engine holds as a zero-padded vector
//! (`gts::metric`), and the edit distance operator `text <~> text`, equal
//! to fuzzystrmatch's `levenshtein(a, b)` (unit costs, by character).

use gpuindex_engine::gts::metric::{edit_distance, CODE_LIMIT, MAX_CHARS};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The characters of a non-NULL text datum as codes (unpadded).
///
/// # Safety
/// `d` is a non-NULL text (or varchar) datum.
pub unsafe fn codes(d: pg_sys::Datum) -> Vec<f32> {
    // SAFETY: as the caller's; a detoasted varlena's data and length, and
    // room for one code per byte plus the terminator.
    unsafe {
        let t = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
        let (data, len) = (pgrx::varlena::vardata_any(t), pgrx::varlena::varsize_any_exhdr(t));
        let mut w = vec![0 as pg_sys::pg_wchar; len + 1];
        let n = pg_sys::pg_mb2wchar_with_len(data as *const std::ffi::c_char, w.as_mut_ptr(), len as i32) as usize;
        w[..n]
            .iter()
            .map(|&c| {
                if c >= CODE_LIMIT {
                    crate::error::raise(
                        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                        format!("character code {c:#x} is beyond what gpu_metric compares exactly"),
                        "Edit distance in gpu_metric takes characters whose code in the database encoding is below 2^24 (all of Unicode under UTF8).",
                    )
                }
                c as f32
            })
            .collect()
    }
}

/// A row zero-padded to an index's `width`: an ERROR when longer (queries
/// are padded to the longest of their batch, see `functions::Call`).
pub fn pad(mut v: Vec<f32>, width: usize) -> Vec<f32> {
    if v.len() > width {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("a string of {} characters is longer than the gpu_metric index's max_length ({width})", v.len()),
            format!("Recreate the index WITH (max_length = {}) (at most {MAX_CHARS}).", v.len().min(MAX_CHARS)),
        );
    }
    v.resize(width, 0.0);
    v
}

/// `text <~> text`: the edit distance (as fuzzystrmatch's `levenshtein`,
/// without its 255-character limit).
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    sql = "CREATE FUNCTION gpu_metric_edit_distance(text, text) RETURNS float8
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_edit_distance(fcinfo: pg_sys::FunctionCallInfo) -> f64 {
    // SAFETY: two non-NULL text arguments (STRICT).
    unsafe {
        let a = codes(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0));
        let b = codes(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1));
        edit_distance(&a, &b)
    }
}
