//! The batched index join (`GpuIndexJoin`): a custom join node that reads
//! its outer side in chunks of `gpuindex.join_chunk` rows, probes the inner
//! table's gpuindex index once per chunk through the batch search every
//! access method answers (`am::common::search`: one batch on the GPU or on
//! all cores), fetches the matching inner rows in TID order with the
//! query's snapshot, and emits the joined rows. A nested loop over an index
//! probes once per outer row; a hash join reads the whole inner table.
//!
//! - `path`: the planner hook that offers the join where a join clause can
//!   probe a gpuindex index of the inner table (`= ` on gpu_btree, `<@ box`,
//!   `<@ circle`, `~=` on gpu_spatial, `<@ ball` on gpu_metric);
//! - `cost`: its estimate, from the batch and a bitmap-heap-scan-like fetch;
//!   `load`: the load of a backend's copy of the index, priced as a ski
//!   rental;
//! - `plan`: the plan node (its scan tuple, quals and private data);
//! - `exec`: execution and rescans; `explain`: its EXPLAIN; `fused`: a
//!   batch function's call joined back by ctid, searched by the node;
//!   `heap`: the fetches in TID order; `all_visible`: an index-only
//!   join's visibility map answers;
//! - `lateral` (planner side) and `nearest` (execution): LATERAL top-k
//!   subqueries;
//! - `parallel`: what a parallel plan's processes share (the workers'
//!   counters, the leader's remembered heap buffers); `handout`: a fused
//!   call's matches shared among them; `sent`: its large constants sent
//!   to the workers as an initplan's values;
//! - `count`: `count(*)` and integer sums of the join computed by the
//!   node (aggregate paths, whole or partial); `aggregate`: those
//!   aggregates' values; `counting`: a count's searches, the matches on
//!   all-visible pages counted by the index; `summing`: a sum's rows read
//!   on their pages.
//!
//! Inner, left, semi and anti joins; parallel-safe, and over a partial
//! outer path each participant of a Gather joins its share; not under row
//! locks or in UPDATE/DELETE (EvalPlanQual would need to recheck it).

mod aggregate;
mod ahead;
mod all_visible;
mod cost;
mod count;
mod counting;
mod exec;
mod explain;
mod fused;
mod handout;
mod heap;
mod lateral;
mod load;
mod nearest;
mod parallel;
mod path;
pub(crate) use path::strip_relabel;
mod plan;
mod sent;
mod summing;

use pgrx::pg_sys;

pub const NAME: &std::ffi::CStr = c"GpuIndexJoin";

/// Registers the plan node (needed to read plans back, e.g. from the plan
/// cache) and the planner hook. From `_PG_init`, preloaded or not.
pub fn register() {
    // SAFETY: static method tables that live for the process; the hook
    // chain is saved before it is replaced, in a single-threaded backend.
    unsafe {
        pg_sys::RegisterCustomScanMethods(&raw const plan::SCAN_METHODS);
        path::install();
        count::install();
    }
}
