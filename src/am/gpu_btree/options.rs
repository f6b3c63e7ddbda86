//! Reloptions: `fillfactor` (percentage of a leaf filled by CREATE INDEX
//! and kept by splits of the rightmost leaf; default 90, as btree).

use pgrx::pg_sys;
use std::sync::atomic::{AtomicU32, Ordering};

pub const DEFAULT_FILLFACTOR: i32 = 90;
static KIND: AtomicU32 = AtomicU32::new(0);

#[repr(C)]
struct Options {
    vl_len_: i32,
    fillfactor: i32,
}

/// Registers the reloption kind (from _PG_init).
pub fn init() {
    // SAFETY: called once per process, before any index is opened.
    unsafe {
        let kind = pg_sys::add_reloption_kind();
        KIND.store(kind, Ordering::Relaxed);
        pg_sys::add_int_reloption(
            kind,
            c"fillfactor".as_ptr(),
            c"Packs gpu_btree leaf pages only to this percentage".as_ptr(),
            DEFAULT_FILLFACTOR,
            10,
            100,
            pg_sys::ShareUpdateExclusiveLock as i32,
        );
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    let table = [pg_sys::relopt_parse_elt {
        optname: c"fillfactor".as_ptr(),
        opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
        offset: std::mem::offset_of!(Options, fillfactor) as i32,
    }];
    pg_sys::build_reloptions(
        reloptions,
        validate,
        KIND.load(Ordering::Relaxed),
        std::mem::size_of::<Options>(),
        table.as_ptr(),
        table.len() as i32,
    ) as *mut pg_sys::bytea
}

/// The index's fillfactor, in percent.
pub fn fillfactor(index: pg_sys::Relation) -> usize {
    // SAFETY: rd_options is NULL or the struct amoptions built.
    let ff = unsafe {
        let o = (*index).rd_options as *const Options;
        if o.is_null() {
            DEFAULT_FILLFACTOR
        } else {
            (*o).fillfactor
        }
    };
    ff.clamp(10, 100) as usize
}
