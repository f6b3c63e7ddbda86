//! Reloptions: `node_capacity` (GTS's N_c: children per node, and about
//! the smallest leaf; default 20, the paper's) and `delta_limit` (pages
//! of inserted rows scans search beside the tree before VACUUM rebuilds
//! it; default 32), and for indexes on text `max_length` (the longest
//! string in characters: every entry takes 4 bytes a character up to it;
//! default 64, at most 255 as fuzzystrmatch's `levenshtein`).

use crate::am::common::options::{IntOption, Reloptions};
use pgrx::pg_sys;

pub static OPTIONS: Reloptions = Reloptions::new(&[
    IntOption {
        name: c"node_capacity",
        description: c"Children of each gpu_metric tree node (GTS's N_c)",
        default: 20,
        min: 2,
        max: 1024,
        lock: pg_sys::AccessExclusiveLock,
    },
    IntOption {
        name: c"delta_limit",
        description: c"Pages of inserted rows a gpu_metric index keeps beside its tree before VACUUM rebuilds it",
        default: 32,
        min: 1,
        max: 1 << 20,
        lock: pg_sys::ShareUpdateExclusiveLock,
    },
    IntOption {
        name: c"max_length",
        description: c"The longest string, in characters, a gpu_metric index on text holds",
        default: 64,
        min: 1,
        max: gpuindex_engine::gts::metric::MAX_CHARS as i32,
        lock: pg_sys::AccessExclusiveLock,
    },
]);

pub fn fanout(index: pg_sys::Relation) -> usize {
    OPTIONS.get(index, 0).max(2) as usize
}

pub fn delta_limit(index: pg_sys::Relation) -> u32 {
    OPTIONS.get(index, 1).max(1) as u32
}

pub fn max_length(index: pg_sys::Relation) -> usize {
    OPTIONS.get(index, 2).max(1) as usize
}
