//! ERRORs with hints, raised from Rust.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raises `ERROR: message` with `HINT: hint`; does not return.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "gpuindex").set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// A type's SQL name, for messages.
pub fn type_name(typ: pgrx::pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string (or raises).
    unsafe { std::ffi::CStr::from_ptr(pgrx::pg_sys::format_type_be(typ)).to_string_lossy().into_owned() }
}

/// The k of a k-nearest batch, which must be positive.
pub fn positive_k(k: i32) -> usize {
    if k <= 0 {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("k = {k}: k must be positive"), "Ask for k >= 1 neighbours.");
    }
    k as usize
}
