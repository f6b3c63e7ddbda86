//! Reloptions: `leaf_capacity` (G-PICS's MC: a node holding more points
//! splits; default 1024, the paper's), `max_height` (MH: nodes at this
//! depth never split; default 14, the paper's) and `delta_limit` (pages
//! of inserted points every scan reads beside the tree before an insert
//! merges them into it; default 16, about 5,400 points).

use pgrx::pg_sys;
use std::sync::atomic::{AtomicU32, Ordering};

static KIND: AtomicU32 = AtomicU32::new(0);

#[repr(C)]
struct Options {
    vl_len_: i32,
    leaf_capacity: i32,
    max_height: i32,
    delta_limit: i32,
}

pub const DEFAULT_DELTA_LIMIT: i32 = 16;

/// Registers the reloption kind (from _PG_init).
pub fn init() {
    // SAFETY: called once per process, before any index is opened.
    unsafe {
        let kind = pg_sys::add_reloption_kind();
        KIND.store(kind, Ordering::Relaxed);
        pg_sys::add_int_reloption(
            kind,
            c"leaf_capacity".as_ptr(),
            c"Points a gpu_spatial quadtree leaf holds before it splits (MC)".as_ptr(),
            1024,
            16,
            1 << 20,
            pg_sys::AccessExclusiveLock as i32,
        );
        pg_sys::add_int_reloption(
            kind,
            c"max_height".as_ptr(),
            c"Depth at which gpu_spatial quadtree nodes stop splitting (MH)".as_ptr(),
            14,
            1,
            40,
            pg_sys::AccessExclusiveLock as i32,
        );
        pg_sys::add_int_reloption(
            kind,
            c"delta_limit".as_ptr(),
            c"Pages of inserted points a gpu_spatial index keeps beside its tree before merging them in".as_ptr(),
            DEFAULT_DELTA_LIMIT,
            1,
            1 << 20,
            pg_sys::ShareUpdateExclusiveLock as i32,
        );
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    let table = [
        pg_sys::relopt_parse_elt {
            optname: c"leaf_capacity".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(Options, leaf_capacity) as i32,
        },
        pg_sys::relopt_parse_elt {
            optname: c"max_height".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(Options, max_height) as i32,
        },
        pg_sys::relopt_parse_elt {
            optname: c"delta_limit".as_ptr(),
            opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
            offset: std::mem::offset_of!(Options, delta_limit) as i32,
        },
    ];
    pg_sys::build_reloptions(
        reloptions,
        validate,
        KIND.load(Ordering::Relaxed),
        std::mem::size_of::<Options>(),
        table.as_ptr(),
        table.len() as i32,
    ) as *mut pg_sys::bytea
}

/// The index's build parameters.
pub fn params(index: pg_sys::Relation) -> gpuindex_engine::gpics::Params {
    // SAFETY: rd_options is NULL or the struct amoptions built.
    unsafe {
        let o = (*index).rd_options as *const Options;
        if o.is_null() {
            Default::default()
        } else {
            gpuindex_engine::gpics::Params { mc: (*o).leaf_capacity as usize, mh: (*o).max_height as usize }
        }
    }
}

/// Delta pages that trigger a merge.
pub fn delta_limit(index: pg_sys::Relation) -> u32 {
    // SAFETY: rd_options is NULL or the struct amoptions built.
    unsafe {
        let o = (*index).rd_options as *const Options;
        (if o.is_null() { DEFAULT_DELTA_LIMIT } else { (*o).delta_limit }).max(1) as u32
    }
}
