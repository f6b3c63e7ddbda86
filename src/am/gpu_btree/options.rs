//! Reloptions: `fillfactor` (percentage of a leaf filled by CREATE INDEX
//! and kept by splits of the rightmost leaf; default 90, as btree).

use crate::am::common::options::{IntOption, Reloptions};
use pgrx::pg_sys;

pub static OPTIONS: Reloptions = Reloptions::new(&[IntOption {
    name: c"fillfactor",
    description: c"Packs gpu_btree leaf pages only to this percentage",
    default: 90,
    min: 10,
    max: 100,
    lock: pg_sys::ShareUpdateExclusiveLock,
}]);

/// The index's fillfactor, in percent.
pub fn fillfactor(index: pg_sys::Relation) -> usize {
    OPTIONS.get(index, 0).clamp(10, 100) as usize
}
