//! Reloptions: `leaf_capacity` (G-PICS's MC: a node holding more points
//! splits; default 1024, the paper's), `max_height` (MH: nodes at this
//! depth never split; default 128, the most the engine allows, so that
//! skewed data gets the depth it needs: the paper's 14 left one leaf with
//! most points under a single far outlier) and `delta_limit` (pages
//! of inserted points every scan reads beside the tree before an insert
//! merges them into it; default 16, about 5,400 points).

use crate::am::common::options::{IntOption, Reloptions};
use pgrx::pg_sys;

pub static OPTIONS: Reloptions = Reloptions::new(&[
    IntOption {
        name: c"leaf_capacity",
        description: c"Points a gpu_spatial quadtree leaf holds before it splits (MC)",
        default: 1024,
        min: 16,
        max: 1 << 20,
        lock: pg_sys::AccessExclusiveLock,
    },
    IntOption {
        name: c"max_height",
        description: c"Depth at which gpu_spatial quadtree nodes stop splitting (MH)",
        default: gpuindex_engine::gpics::tree::MAX_HEIGHT as i32,
        min: 1,
        max: gpuindex_engine::gpics::tree::MAX_HEIGHT as i32,
        lock: pg_sys::AccessExclusiveLock,
    },
    IntOption {
        name: c"delta_limit",
        description: c"Pages of inserted points a gpu_spatial index keeps beside its tree before merging them in",
        default: 16,
        min: 1,
        max: 1 << 20,
        lock: pg_sys::ShareUpdateExclusiveLock,
    },
]);

/// The index's build parameters.
pub fn params(index: pg_sys::Relation) -> gpuindex_engine::gpics::Params {
    gpuindex_engine::gpics::Params { mc: OPTIONS.get(index, 0) as usize, mh: OPTIONS.get(index, 1) as usize }
}

/// Delta pages that trigger a merge.
pub fn delta_limit(index: pg_sys::Relation) -> u32 {
    OPTIONS.get(index, 2).max(1) as u32
}
