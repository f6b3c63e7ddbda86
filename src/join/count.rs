//! Aggregates of a join computed by the node: a query whose aggregates
//! are `count(*)` and sums of integer columns (`aggregate::pushable`) over
//! a GpuIndexJoin, with no GROUP BY or HAVING, gets a second path on its
//! aggregate relation, the same join counting and summing the rows it
//! would emit (its quals and visibility checks unchanged) and returning
//! one row, instead of an Aggregate over the join's rows (as postgres_fdw
//! pushes an aggregate into its remote scan). On duplicate-heavy keys the
//! result rows, each through the executor to the Aggregate, were most of
//! the join's time. Where the query sums, each partial (parallel) join
//! path gets a partial path of the partial aggregate relation too: each
//! participant's transition values in one row, which PostgreSQL gathers
//! and finalizes. (A count alone stays serial: it counts inside the
//! index's search, which a participant's share of the matches cannot.)
//!
//! The path's plan is the join's with the aggregate expressions at the
//! end of its scan tuple (`custom_scan_tlist`): setrefs points the query's
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
        if !crate::guc::ENABLE_JOIN.get() || stage != pg_sys::UpperRelationKind::UPPERREL_GROUP_AGG {
            return;
        }
        let extra = extra.cast::<pg_sys::GroupPathExtraData>();
        let Some(sums) = aggregates_only(root, output_rel, extra, pg_sys::AggSplit::AGGSPLIT_SIMPLE) else { return };
        offer(input_rel, output_rel, sums);
        if !sums || !(*output_rel).consider_parallel || !(*extra).partial_costs_set {
            return;
        }
        // PostgreSQL calls the hook for its partial aggregate relation
        // only through a foreign data wrapper; it has made that relation
        // (its target the partial aggregates) where it aggregates in
        // parallel.
        let partial = pg_sys::fetch_upper_rel(root, pg_sys::UpperRelationKind::UPPERREL_PARTIAL_GROUP_AGG, (*output_rel).relids);
        if aggregates_only(root, partial, extra, pg_sys::AggSplit::AGGSPLIT_INITIAL_SERIAL) == Some(true) {
            offer_partial(root, input_rel, partial, output_rel, &(*extra).agg_final_costs);
        }
    }
}

/// Whether the query aggregates its rows into one with aggregates the
/// node computes alone: no grouping, HAVING, window functions or
/// set-returning functions, and every aggregate of the target
/// `aggregate::pushable` as `split`. Some(whether any is a sum).
unsafe fn aggregates_only(
    root: *mut pg_sys::PlannerInfo,
    output_rel: *mut pg_sys::RelOptInfo,
    extra: *mut pg_sys::GroupPathExtraData,
    split: pg_sys::AggSplit::Type,
) -> Option<bool> {
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
            return None;
        }
        let exprs = (*(*output_rel).reltarget).exprs.cast::<pg_sys::Node>();
        let flags = pg_sys::PVC_INCLUDE_AGGREGATES | pg_sys::PVC_INCLUDE_WINDOWFUNCS | pg_sys::PVC_INCLUDE_PLACEHOLDERS;
        let found = list::ptrs::<pg_sys::Node>(pg_sys::pull_var_clause(exprs, flags as i32));
        let mut sums = false;
        for n in &found {
            sums |= super::aggregate::pushable(*n, split)?;
        }
        (!found.is_empty()).then_some(sums)
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
/// aggregate relation that counts (and `sums`) its rows. Priced as the
/// join, less PostgreSQL's price of emitting each row (a tuple's CPU
/// cost), plus an operator's cost a row for taking it and one row out,
/// less, for a count alone, what its estimate says counting saves of the
/// heap's tuples (`cost::estimate`); a plan that aggregates the join's
/// rows pays both the tuple and the aggregate.
unsafe fn offer(input_rel: *mut pg_sys::RelOptInfo, output_rel: *mut pg_sys::RelOptInfo, sums: bool) {
    // SAFETY: planner structures of this planning call; the joins' paths
    // were made by `path::new_path`.
    unsafe {
        for join in join_paths(input_rel) {
            let j = &(*join).path;
            if !j.param_info.is_null() || j.parallel_aware {
                continue;
            }
            let saving = if sums { 0.0 } else { saving(join) };
            pg_sys::add_path(output_rel, aggregating(join, output_rel, saving).cast());
        }
    }
}

/// For each partial GpuIndexJoin path of the scan/join relation (each
/// participant joins its share), a path of the aggregate relation that
/// finalizes, over a Gather, each participant's partial aggregates in one
/// row (a path of the partial aggregate relation `partial`, priced as
/// `offer`'s, without a count's saving: its matches are fetched as rows),
/// as PostgreSQL's Finalize Aggregate over a Partial Aggregate.
unsafe fn offer_partial(
    root: *mut pg_sys::PlannerInfo,
    input_rel: *mut pg_sys::RelOptInfo,
    partial: *mut pg_sys::RelOptInfo,
    output_rel: *mut pg_sys::RelOptInfo,
    final_costs: *const pg_sys::AggClauseCosts,
) {
    // SAFETY: planner structures of this planning call; the joins' paths
    // were made by `path::new_path`.
    unsafe {
        for join in list::ptrs::<pg_sys::Path>((*input_rel).partial_pathlist).into_iter().filter_map(|p| join_path(p)) {
            if !(*join).path.param_info.is_null() {
                continue;
            }
            let each = aggregating(join, partial, 0.0);
            if !(*each).path.parallel_safe {
                continue;
            }
            let mut rows = f64::from((*join).path.parallel_workers.max(1) + 1);
            let gather = pg_sys::create_gather_path(root, partial, each.cast(), (*partial).reltarget, std::ptr::null_mut(), &mut rows);
            let finalize = pg_sys::create_agg_path(
                root,
                output_rel,
                gather.cast(),
                (*output_rel).reltarget,
                pg_sys::AggStrategy::AGG_PLAIN,
                pg_sys::AggSplit::AGGSPLIT_FINAL_DESERIAL,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                final_costs,
                1.0,
            );
            pg_sys::add_path(output_rel, finalize.cast());
        }
    }
}

/// `join` as a path of `output_rel` that returns its aggregates in one
/// row, priced as `offer` says.
unsafe fn aggregating(join: *mut pg_sys::CustomPath, output_rel: *mut pg_sys::RelOptInfo, saving: f64) -> *mut pg_sys::CustomPath {
    // SAFETY: the caller's planner structures.
    unsafe {
        let j = &(*join).path;
        let (cpu_tuple, cpu_operator) = (pg_sys::cpu_tuple_cost, pg_sys::cpu_operator_cost);
        let total = j.total_cost - j.rows * (cpu_tuple - cpu_operator) - saving + cpu_tuple;
        let agg = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()).cast::<pg_sys::CustomPath>();
        *agg = *join;
        let p = &mut (*agg).path;
        // (The path stays its join's: the plan's relids, which EXPLAIN
        // names the inner table's columns by, are the parent's, and an
        // aggregate relation has none.)
        p.pathtarget = (*output_rel).reltarget;
        p.parallel_safe = j.parallel_safe && (*output_rel).consider_parallel;
        p.rows = 1.0;
        p.startup_cost = total;
        p.total_cost = total;
        p.pathkeys = std::ptr::null_mut();
        // One more item marks the aggregating plan (`counts`).
        (*agg).custom_private = pg_sys::lappend(pg_sys::list_copy((*join).custom_private), std::ptr::null_mut());
        agg
    }
}

/// Whether a path's private items (`PathPrivate::to_list`'s, or `offer`'s
/// from them) are a counting path's.
pub fn counts(items: &[*mut std::ffi::c_void]) -> bool {
    items.len() > super::plan::PATH_ITEMS
}
