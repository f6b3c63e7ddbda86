//! `count(*)` of a join counted by the node: a query whose only aggregate
//! is `count(*)` over a GpuIndexJoin, with no GROUP BY or HAVING, gets a
//! second path on its aggregate relation, the same join counting the rows
//! it would emit (its quals and visibility checks unchanged) and returning
//! one row, instead of an Aggregate over the join's rows (as postgres_fdw
//! pushes an aggregate into its remote scan). On duplicate-heavy keys the
//! result rows, each through the executor to the Aggregate, were most of
//! the join's time.
//!
//! The path's plan is the join's with the `count(*)` expressions at the end
//! of its scan tuple (`custom_scan_tlist`): setrefs points the query's
//! target list at them, and execution fills them once, at the end.

use super::path::PATH_METHODS;
use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;

static mut PREV_HOOK: pg_sys::create_upper_paths_hook_type = None;

/// Chains the hook.
///
/// # Safety
/// From `_PG_init`, once.
pub unsafe fn install() {
    // SAFETY: the caller's contract (a single-threaded backend).
    unsafe {
        PREV_HOOK = pg_sys::create_upper_paths_hook;
        pg_sys::create_upper_paths_hook = Some(hook);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn hook(
    root: *mut pg_sys::PlannerInfo,
    stage: pg_sys::UpperRelationKind::Type,
    input_rel: *mut pg_sys::RelOptInfo,
    output_rel: *mut pg_sys::RelOptInfo,
    extra: *mut std::ffi::c_void,
) {
    // SAFETY: the planner's own arguments; the previous hook is called
    // behind pgrx's boundary.
    unsafe {
        if let Some(prev) = PREV_HOOK {
            pg_sys::ffi::pg_guard_ffi_boundary(|| prev(root, stage, input_rel, output_rel, extra));
        }
        if stage == pg_sys::UpperRelationKind::UPPERREL_GROUP_AGG
            && crate::guc::ENABLE_JOIN.get()
            && counts_only(root, output_rel, extra.cast())
        {
            offer(input_rel, output_rel);
        }
    }
}

/// Whether the query aggregates its rows into one with `count(*)` alone:
/// no grouping, HAVING, window functions or set-returning functions, and
/// every aggregate of the target a plain `count(*)` of this query level.
unsafe fn counts_only(root: *mut pg_sys::PlannerInfo, output_rel: *mut pg_sys::RelOptInfo, extra: *mut pg_sys::GroupPathExtraData) -> bool {
    // SAFETY: planner structures of this planning call.
    unsafe {
        let parse = (*root).parse;
        if !(*parse).groupClause.is_null()
            || !(*parse).groupingSets.is_null()
            || !(*parse).havingQual.is_null()
            || (*parse).hasWindowFuncs
            || (*parse).hasTargetSRFs
            || (*extra).patype != pg_sys::PartitionwiseAggregateType::PARTITIONWISE_AGGREGATE_NONE
        {
            return false;
        }
        let exprs = (*(*output_rel).reltarget).exprs.cast::<pg_sys::Node>();
        let flags = pg_sys::PVC_INCLUDE_AGGREGATES | pg_sys::PVC_INCLUDE_WINDOWFUNCS | pg_sys::PVC_INCLUDE_PLACEHOLDERS;
        let found = list::ptrs::<pg_sys::Node>(pg_sys::pull_var_clause(exprs, flags as i32));
        !found.is_empty() && found.into_iter().all(|n| is_count_star(n))
    }
}

/// A plain `count(*)`: no FILTER, DISTINCT or ORDER BY, of this level.
unsafe fn is_count_star(node: *mut pg_sys::Node) -> bool {
    // SAFETY: a planner node.
    unsafe {
        if !is_a(node, NodeTag::T_Aggref) {
            return false;
        }
        let a = node.cast::<pg_sys::Aggref>();
        (*a).aggfnoid == pg_sys::Oid::from(pg_sys::F_COUNT_)
            && (*a).aggstar
            && (*a).aggfilter.is_null()
            && (*a).aggdistinct.is_null()
            && (*a).aggorder.is_null()
            && (*a).agglevelsup == 0
            && (*a).aggkind as u8 == b'n'
    }
}

/// The GpuIndexJoin path `path` is, directly or under a projection (the
/// scan/join target's, which a count does not read).
unsafe fn join_path(path: *mut pg_sys::Path) -> Option<*mut pg_sys::CustomPath> {
    // SAFETY: a planner path.
    unsafe {
        let path = if is_a(path, NodeTag::T_ProjectionPath) { (*path.cast::<pg_sys::ProjectionPath>()).subpath } else { path };
        let custom = path.cast::<pg_sys::CustomPath>();
        (is_a(path, NodeTag::T_CustomPath) && std::ptr::eq((*custom).methods, &raw const PATH_METHODS)).then_some(custom)
    }
}

/// What a counting plan of a join path saves (`cost::estimate`, the last
/// of its path items).
unsafe fn saving(join: *mut pg_sys::CustomPath) -> f64 {
    // SAFETY: a path made by `path::new_path`.
    unsafe { *list::ptrs::<std::ffi::c_void>((*join).custom_private)[super::plan::PATH_ITEMS - 1].cast::<f64>() }
}

/// Marks a join relation's `fdw_private` as the list of `keep`'s paths.
static KEPT: u8 = 0;

fn mark() -> *mut std::ffi::c_void {
    (&raw const KEPT).cast_mut().cast()
}

/// The paths `keep` kept for `rel`; None where its `fdw_private` is not
/// ours to use (a foreign join's: PostgreSQL sets no other).
unsafe fn kept(rel: *mut pg_sys::RelOptInfo) -> Option<Vec<*mut pg_sys::CustomPath>> {
    // SAFETY: a planner relation; a non-null `fdw_private` of a relation
    // without an `fdwroutine` is `keep`'s list.
    unsafe {
        let private = (*rel).fdw_private;
        if !(*rel).fdwroutine.is_null() {
            return None;
        }
        if private.is_null() {
            return Some(Vec::new());
        }
        let items = list::ptrs::<std::ffi::c_void>(private.cast());
        (items.first() == Some(&mark())).then(|| items[1..].iter().map(|&p| p.cast()).collect())
    }
}

/// The join path to hand to `add_path` for `path` of `joinrel`: a copy,
/// where a counting plan of it would save something, `path` itself being
/// kept for `offer` (add_path frees a path it rejects, and a join that
/// loses to PostgreSQL's as rows may win as a count of them). Kept in the
/// relation's `fdw_private`, which only a foreign join uses (one with an
/// `fdwroutine`): planner memory, gone with the planning call's.
///
/// # Safety
/// Planner structures of one planning call; `path` made by `new_path`.
pub unsafe fn keep(joinrel: *mut pg_sys::RelOptInfo, path: *mut pg_sys::CustomPath) -> *mut pg_sys::CustomPath {
    // SAFETY: the caller's contract.
    unsafe {
        if saving(path) <= 0.0 || kept(joinrel).is_none() {
            return path;
        }
        let private = (*joinrel).fdw_private;
        let list = if private.is_null() { list::of_ptrs(&[mark()]) } else { private.cast() };
        (*joinrel).fdw_private = pg_sys::lappend(list, path.cast()).cast();
        // (add_path frees only the node: the lists stay shared.)
        let copy = pg_sys::palloc(std::mem::size_of::<pg_sys::CustomPath>()).cast::<pg_sys::CustomPath>();
        *copy = *path;
        copy
    }
}

/// The join paths `offer` counts: those `keep` kept, and those of the
/// relation's paths that it did not copy.
unsafe fn join_paths(rel: *mut pg_sys::RelOptInfo) -> Vec<*mut pg_sys::CustomPath> {
    // SAFETY: planner structures of this planning call.
    unsafe {
        let listed = list::ptrs::<pg_sys::Path>((*rel).pathlist).into_iter().filter_map(|p| join_path(p));
        match kept(rel) {
            Some(mut paths) => {
                paths.extend(listed.filter(|&j| saving(j) <= 0.0));
                paths
            }
            None => listed.collect(),
        }
    }
}

/// For each GpuIndexJoin path of the scan/join relation, a path of the
/// aggregate relation that counts its rows. Priced as the join, less
/// PostgreSQL's price of emitting each row (a tuple's CPU cost), plus an
/// operator's cost a row for counting it and one row out, less what its
/// estimate says counting saves of the heap's tuples (`cost::estimate`);
/// a plan that aggregates the join's rows pays both the tuple and the
/// aggregate.
unsafe fn offer(input_rel: *mut pg_sys::RelOptInfo, output_rel: *mut pg_sys::RelOptInfo) {
    // SAFETY: planner structures of this planning call; the joins' paths
    // were made by `path::new_path`.
    unsafe {
        for join in join_paths(input_rel) {
            let j = &(*join).path;
            if !j.param_info.is_null() || j.parallel_aware {
                continue;
            }
            let (cpu_tuple, cpu_operator) = (pg_sys::cpu_tuple_cost, pg_sys::cpu_operator_cost);
            let total = j.total_cost - j.rows * (cpu_tuple - cpu_operator) - saving(join) + cpu_tuple;
            let count = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()).cast::<pg_sys::CustomPath>();
            *count = *join;
            let p = &mut (*count).path;
            // (The path stays its join's: the plan's relids, which EXPLAIN
            // names the inner table's columns by, are the parent's, and an
            // aggregate relation has none.)
            p.pathtarget = (*output_rel).reltarget;
            p.parallel_safe = j.parallel_safe && (*output_rel).consider_parallel;
            p.rows = 1.0;
            p.startup_cost = total;
            p.total_cost = total;
            p.pathkeys = std::ptr::null_mut();
            // One more item marks the counting plan (`counts`).
            (*count).custom_private = pg_sys::lappend(pg_sys::list_copy((*join).custom_private), std::ptr::null_mut());
            pg_sys::add_path(output_rel, count.cast());
        }
    }
}

/// Whether a path's private items (`PathPrivate::to_list`'s, or `offer`'s
/// from them) are a counting path's.
pub fn counts(items: &[*mut std::ffi::c_void]) -> bool {
    items.len() > super::plan::PATH_ITEMS
}
