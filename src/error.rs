//! ERRORs with hints, raised from Rust.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raises `ERROR: message` with `HINT: hint`; does not return.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "gpuindex").set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}
