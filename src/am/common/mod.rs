//! What every access method shares. An access method implements
//! `IndexAm` (what differs) and calls `index_am!` (the routine and the C
//! callbacks); its SQL functions open indexes with `OpenIndex` (the
//! privilege guard) and return rows through `OpenIndex::visible`
//! (snapshot and row-level security); its derived images live in `cache`.

pub mod am;
pub mod build;
pub mod bulk_deletes;
pub mod cache;
pub mod cost;
pub mod open;
pub mod options;
pub mod parallel;
pub mod policies;
pub mod scan;
pub mod search;
pub mod vacuum;
pub mod validate;

pub use am::{Estimate, HeapRows, IndexAm};
pub use open::{Access, OpenIndex};

use pgrx::pg_sys;
use pgrx::prelude::*;

/// The type of the one column every gpuindex index has (an ERROR for
/// multicolumn indexes, which no access method here supports).
pub fn key_type(index: pg_sys::Relation, am: &str) -> pg_sys::Oid {
    // SAFETY: an open index relation has a tuple descriptor with >= 1 attribute.
    unsafe {
        let desc = (*index).rd_att;
        if (*desc).natts != 1 {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("{am} indexes exactly one column"),
                format!("Create one {am} index per column."),
            );
        }
        (*(*desc).attrs.as_ptr()).atttypid
    }
}

/// The ERROR of a check function (`gpu_*_check`) that found a violation.
pub fn corrupted(am: &str, index: &str, what: String) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
        format!("{am} index \"{index}\" is corrupted: {what}"),
        "REINDEX the index, and please report how it happened.",
    )
}
