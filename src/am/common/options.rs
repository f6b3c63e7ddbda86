//! Reloptions: each access method declares its integer options once, in a
//! table; registration, parsing (amoptions) and reading go through here.
//! The parsed options are `vl_len_` followed by one i32 per option, in the
//! table's order.

use pgrx::pg_sys;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct IntOption {
    pub name: &'static CStr,
    pub description: &'static CStr,
    pub default: i32,
    pub min: i32,
    pub max: i32,
    /// The lock ALTER INDEX ... SET takes for it.
    pub lock: u32,
}

/// An access method's options and its reloption kind.
pub struct Reloptions {
    pub options: &'static [IntOption],
    kind: AtomicU32,
}

impl Reloptions {
    pub const fn new(options: &'static [IntOption]) -> Reloptions {
        Reloptions { options, kind: AtomicU32::new(0) }
    }

    /// Registers the reloption kind and options (from _PG_init).
    pub fn register(&self) {
        // SAFETY: called once per process, before any index is opened;
        // the names and descriptions are static.
        unsafe {
            let kind = pg_sys::add_reloption_kind();
            self.kind.store(kind, Ordering::Relaxed);
            for o in self.options {
                pg_sys::add_int_reloption(kind, o.name.as_ptr(), o.description.as_ptr(), o.default, o.min, o.max, o.lock as i32);
            }
        }
    }

    /// amoptions: parses (and with `validate`, checks) the options.
    ///
    /// # Safety
    /// As amoptions: `reloptions` is a text[] datum or NULL.
    pub unsafe fn parse(&self, reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
        let table: Vec<pg_sys::relopt_parse_elt> = self
            .options
            .iter()
            .enumerate()
            .map(|(i, o)| pg_sys::relopt_parse_elt {
                optname: o.name.as_ptr(),
                opttype: pg_sys::relopt_type::RELOPT_TYPE_INT,
                offset: (4 + 4 * i) as i32,
            })
            .collect();
        // SAFETY: the struct is vl_len_ plus one i32 per option.
        unsafe {
            pg_sys::build_reloptions(
                reloptions,
                validate,
                self.kind.load(Ordering::Relaxed),
                4 + 4 * self.options.len(),
                table.as_ptr(),
                table.len() as i32,
            ) as *mut pg_sys::bytea
        }
    }

    /// The value of option `i` for an open index (its default when unset).
    pub fn get(&self, index: pg_sys::Relation, i: usize) -> i32 {
        // SAFETY: rd_options is NULL or what `parse` built.
        unsafe {
            let o = (*index).rd_options as *const i32;
            if o.is_null() {
                self.options[i].default
            } else {
                *o.add(1 + i)
            }
        }
    }
}
