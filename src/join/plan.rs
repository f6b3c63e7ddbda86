//! The plan node. Its scan tuple (`custom_scan_tlist`) holds every column
//! the join needs, outer and inner; setrefs rewrites the target list, the
//! quals and `custom_exprs` to read from it. Execution fills it from the
//! outer child's row and the fetched inner row (`Plan::colmap`).
//!
//! - `custom_exprs`: [the probe's outer side (one query, or for a TID
//!   probe one TID, per outer row), the match quals (as a List), the probe
//!   clause (for EXPLAIN; NULL for a LATERAL top-k subquery or a TID
//!   probe)];
//! - match quals: the inner table's own quals and the join clauses but
//!   the probe clause, by security level (row-level security policies
//!   first); a row pair that passes them is a match, for left, semi and
//!   anti joins. The probe clause is not rechecked: every access method's
//!   batch answers it exactly (as its index scans do, without recheck),
//!   which the differential tests hold it to;
//! - `plan.qual`: clauses pushed down to a left or anti join from WHERE,
//!   which filter joined rows;
//! - `custom_private`: [OIDs (the table probed, index: InvalidOid for a
//!   TID probe, the function's for a fused one), (join type, strategy,
//!   index-only (1: no inner column read), the fused call's function (its
//!   place in `call::FUSABLE` plus one; 0: none), and for a top-k
//!   subquery its k and ordering operator), the column map, and for a
//!   top-k subquery its quals and select list, planned by
//!   `lateral::planned`], which survive copyObject, the plan cache and
//!   parallel workers.
//!
//! For a top-k subquery the "inner" columns of the scan tuple are the
//! subquery's output columns (its select list, evaluated per fetched row).
//! A counting plan (`count`) has the query's `count(*)` expressions after
//! the joined row's columns (`COUNTED` in the column map).

use super::path::{is_outer, pushed_down, Probe};
use super::{exec, lateral, NAME};
use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;

pub static mut SCAN_METHODS: pg_sys::CustomScanMethods =
    pg_sys::CustomScanMethods { CustomName: NAME.as_ptr(), CreateCustomScanState: Some(exec::create_state) };

/// What the path carries to `plan_custom_path` (planner memory, never
/// copied).
pub struct PathPrivate<'a> {
    pub restrictlist: *mut pg_sys::List,
    pub probe: &'a Probe,
    pub jointype: pg_sys::JoinType::Type,
    pub innerrel: *mut pg_sys::RelOptInfo,
}

/// The items of a path: `PathPrivate::to_list`'s, then what a counting
/// plan of it saves (a palloc'd f64, `cost::estimate`); a counting path
/// adds one more (`count::counts`).
pub const PATH_ITEMS: usize = 11;

impl PathPrivate<'_> {
    pub fn to_list(&self) -> *mut pg_sys::List {
        let p = self.probe;
        let (ints, quals, tlist, order, heap) = match &p.top {
            None => (
                vec![self.jointype as i32, p.strategy as i32, 0, p.fused.map_or(0, |f| f.1 as i32 + 1)],
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                pg_sys::InvalidOid,
            ),
            Some(t) => {
                (vec![self.jointype as i32, p.strategy as i32, 0, 0, t.k as i32, t.op.to_u32() as i32], t.quals, t.tlist, t.order, t.heap)
            }
        };
        list::of_ptrs::<std::ffi::c_void>(&[
            self.restrictlist.cast(),
            p.rinfo.cast(),
            p.index.cast(),
            p.key.cast(),
            self.innerrel.cast(),
            list::of_ints(&ints).cast(),
            quals.cast(),
            tlist.cast(),
            list::of_oids(&[heap, p.fused.map_or(pg_sys::InvalidOid, |f| f.0)]).cast(),
            order.cast(),
        ])
    }
}

/// A LATERAL top-k subquery, as execution runs it.
pub struct TopKPlan {
    pub k: usize,
    pub op: pg_sys::Oid,
    /// Its quals (a List, implicit AND), select list (TargetEntries) and
    /// ORDER BY expression: the table's columns are scan-tuple Vars, the
    /// outer row's OUTER_VAR.
    pub quals: *mut pg_sys::List,
    pub tlist: *mut pg_sys::List,
    pub order: *mut pg_sys::Expr,
}

/// A `colmap` entry: the scan-tuple column holds the count of the joined
/// rows (`count`).
pub const COUNTED: i32 = i32::MIN;

/// The plan's private data, as execution reads it.
pub struct Private {
    pub heap: pg_sys::Oid,
    pub index: pg_sys::Oid,
    pub jointype: pg_sys::JoinType::Type,
    pub strategy: u16,
    /// No inner column is read (`index_only`): rows on all-visible heap
    /// pages are not fetched.
    pub index_only: bool,
    /// A TID probe over a batch function's call (`path::fused_call`),
    /// searched by the node through `index`: the function's place in
    /// `call::FUSABLE`.
    pub fused: Option<usize>,
    /// For each scan-tuple column: the outer child's column (1-based,
    /// positive) or the inner table's attribute, or the top-k subquery's
    /// output column (negated), or 0 for the inner table's ctid, or
    /// `COUNTED` for a counting plan's `count(*)`.
    pub colmap: Vec<i32>,
    pub top: Option<TopKPlan>,
}

impl Private {
    /// # Safety
    /// The `custom_private` of a plan made by `plan_custom_path`.
    pub unsafe fn read(l: *mut pg_sys::List) -> Private {
        // SAFETY: the caller's contract.
        unsafe {
            let items = list::ptrs::<pg_sys::List>(l);
            let oids = list::oids(items[0]);
            let ints = list::ints(items[1]);
            let top = (ints.len() > 4).then(|| TopKPlan {
                k: ints[4] as usize,
                op: pg_sys::Oid::from(ints[5] as u32),
                quals: items[3],
                tlist: items[4],
                order: items[5].cast(),
            });
            Private {
                heap: oids[0],
                index: oids[1],
                jointype: ints[0] as _,
                strategy: ints[1] as u16,
                index_only: ints[2] != 0,
                fused: (ints[3] > 0).then(|| ints[3] as usize - 1),
                colmap: list::ints(items[2]),
                top,
            }
        }
    }
}

/// (join quals, other quals) of a join of `joinrelids`, as
/// create_nestloop_plan splits them: only left and anti joins have
/// clauses that filter joined rows (pushed down from WHERE) rather than
/// decide matches.
///
/// # Safety
/// The join's restrictlist.
pub unsafe fn split_quals(
    jointype: pg_sys::JoinType::Type,
    restrictlist: *mut pg_sys::List,
    joinrelids: *mut pg_sys::Bitmapset,
) -> (Vec<*mut pg_sys::RestrictInfo>, Vec<*mut pg_sys::RestrictInfo>) {
    // SAFETY: the caller's contract.
    unsafe {
        let all = list::ptrs::<pg_sys::RestrictInfo>(restrictlist).into_iter().filter(|&r| !(*r).pseudoconstant);
        if is_outer(jointype) {
            all.partition(|&r| !pushed_down(r, joinrelids))
        } else {
            (all.collect(), Vec::new())
        }
    }
}

/// The match quals: the inner table's own quals and the join quals but
/// the probe clause, in
/// order of security level (row-level security policies before any qual
/// a user wrote, so no user function sees a row the policies hide; as
/// order_qual_clauses does, but without moving leakproof quals ahead),
/// the table's quals first within a level.
///
/// # Safety
/// Planner structures.
pub unsafe fn match_quals(
    innerrel: *mut pg_sys::RelOptInfo,
    join_quals: &[*mut pg_sys::RestrictInfo],
    probe: *mut pg_sys::RestrictInfo,
) -> *mut pg_sys::List {
    // SAFETY: the caller's contract.
    unsafe {
        let mut quals = list::ptrs::<pg_sys::RestrictInfo>((*innerrel).baserestrictinfo);
        quals.extend(join_quals.iter().filter(|&&r| r != probe));
        quals.sort_by_key(|&r| (*r).security_level);
        clauses(&quals)
    }
}

/// The clauses of `rinfos`, as a List.
///
/// # Safety
/// RestrictInfos.
pub unsafe fn clauses(rinfos: &[*mut pg_sys::RestrictInfo]) -> *mut pg_sys::List {
    // SAFETY: the caller's contract.
    list::of_ptrs(&rinfos.iter().map(|&r| unsafe { (*r).clause }).collect::<Vec<_>>())
}

/// Whether a join that evaluates `exprs` may take a match on an
/// all-visible heap page as a visible row without a heap fetch: it reads
/// no inner column, and gpuindex's shared memory counts the index's bulk
/// deletes (`bulk_deletes`; not preloaded, every match is fetched).
///
/// # Safety
/// Planner structures.
pub unsafe fn index_only(innerrel: *mut pg_sys::RelOptInfo, exprs: &[*mut pg_sys::Node]) -> bool {
    // SAFETY: the caller's contract.
    crate::service::shmem::shared().is_some() && unsafe { reads_no_inner_column(innerrel, exprs) }
}

/// Whether a join that evaluates `exprs` (its output, quals) reads no
/// column of the inner table `innerrel`: then a match on an all-visible
/// heap page needs no heap fetch, as in an index-only scan (the probe
/// clause is never rechecked, so it is not among them).
///
/// # Safety
/// Planner structures.
pub unsafe fn reads_no_inner_column(innerrel: *mut pg_sys::RelOptInfo, exprs: &[*mut pg_sys::Node]) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        exprs
            .iter()
            .all(|&e| list::ptrs::<pg_sys::Var>(pg_sys::pull_var_clause(e, 0)).into_iter().all(|v| (*v).varno != (*innerrel).relid as i32))
    }
}

/// Whether a probe's matches are index entries, which an index-only join
/// may take without reading their rows: an index probe's, and a fused
/// call's where nothing of `read` reads the call's ctid `key` (the visible
/// row's TID, which only the page tells); not a TID probe's (its TID may
/// name no row).
///
/// # Safety
/// Planner expressions.
pub unsafe fn matches_are_entries(by_tid: bool, fused: bool, key: *mut pg_sys::Expr, read: &[*mut pg_sys::Node]) -> bool {
    // SAFETY: the caller's contract.
    !by_tid || (fused && !read.iter().any(|&e| unsafe { reads(e, super::path::strip_relabel(key)) }))
}

/// Whether expression `e` reads the column `var` (a Var).
///
/// # Safety
/// Planner expressions.
unsafe fn reads(e: *mut pg_sys::Node, var: *mut pg_sys::Expr) -> bool {
    // SAFETY: the caller's contract.
    unsafe { list::ptrs::<pg_sys::Var>(pg_sys::pull_var_clause(e, 0)).into_iter().any(|v| pg_sys::equal(v.cast(), var.cast())) }
}

fn copy<T>(node: *mut T) -> *mut T {
    // SAFETY: copies a node tree into the current (planner) memory context.
    unsafe { pg_sys::copyObjectImpl(node.cast()).cast() }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn plan_custom_path(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    best_path: *mut pg_sys::CustomPath,
    tlist: *mut pg_sys::List,
    _clauses: *mut pg_sys::List,
    custom_plans: *mut pg_sys::List,
) -> *mut pg_sys::Plan {
    // SAFETY: the planner's arguments; the path was made by `path::offer`.
    unsafe {
        let items = list::ptrs::<std::ffi::c_void>((*best_path).custom_private);
        let restrictlist = items[0].cast::<pg_sys::List>();
        let rinfo = items[1].cast::<pg_sys::RestrictInfo>();
        let index = items[2].cast::<pg_sys::IndexOptInfo>();
        let key = items[3].cast::<pg_sys::Expr>();
        let innerrel = items[4].cast::<pg_sys::RelOptInfo>();
        let ints = list::ints(items[5].cast());
        let (top_quals, top_tlist) = (items[6].cast::<pg_sys::Node>(), items[7].cast::<pg_sys::List>());
        let oids = list::oids(items[8].cast());
        let (top_heap, fused_index) = (oids[0], oids[1]);
        let top_order = items[9].cast::<pg_sys::Node>();
        let jointype = ints[0] as pg_sys::JoinType::Type;
        // A counting plan's target list and path target are the query's
        // `count(*)` expressions; the rows it counts are its join's.
        let counting = super::count::counts(&items);
        let (row_tlist, row_target) =
            if counting { (std::ptr::null_mut(), (*(*rel).reltarget).exprs) } else { (tlist, (*(*best_path).path.pathtarget).exprs) };
        let (join_quals, other_quals) = split_quals(jointype, restrictlist, (*rel).relids);
        let matching = copy(match_quals(innerrel, &join_quals, rinfo));
        let other_quals = copy(clauses(&other_quals));
        let key = copy(key);
        // A TID probe's clause is answered by the fetch (its inner ctid is
        // no column of the scan tuple); EXPLAIN shows its key.
        let by_tid = index.is_null();
        let probe_clause = if rinfo.is_null() || by_tid { std::ptr::null_mut() } else { copy((*rinfo).clause) };
        // A top-k subquery's rows are always read.
        let mut ints = ints;
        let read = [row_tlist.cast(), row_target.cast(), matching.cast(), other_quals.cast()];
        ints[2] = (!rinfo.is_null() && matches_are_entries(by_tid, ints[3] != 0, key, &read) && index_only(innerrel, &read)) as i32;

        // The scan tuple: every Var of what the node evaluates. (The
        // target list is NIL under a projection: its Vars come from the
        // path's target.)
        let mut vars = std::ptr::null_mut();
        for e in [row_tlist.cast::<pg_sys::Node>(), row_target.cast(), matching.cast(), other_quals.cast(), probe_clause.cast(), key.cast()]
        {
            vars = pg_sys::list_concat(vars, pg_sys::pull_var_clause(e, 0));
        }
        let mut scan_tlist = pg_sys::add_to_flat_tlist(std::ptr::null_mut(), vars);
        let joined = list::ptrs::<pg_sys::TargetEntry>(scan_tlist).len();
        if counting {
            // The count(*) expressions after the row's columns.
            let counts = pg_sys::pull_var_clause(tlist.cast(), pg_sys::PVC_INCLUDE_AGGREGATES as i32);
            scan_tlist = pg_sys::add_to_flat_tlist(scan_tlist, counts);
        }
        let outer_plan = list::ptrs::<pg_sys::Plan>(custom_plans)[0];
        if (*best_path).path.parallel_aware && ints[3] != 0 && is_a(outer_plan, NodeTag::T_FunctionScan) {
            super::sent::send_large_constants(root, outer_plan.cast());
        }
        let outer_tlist = list::ptrs::<pg_sys::TargetEntry>((*outer_plan).targetlist);
        let inner_relid = (*innerrel).relid as i32;
        let colmap: Vec<i32> = list::ptrs::<pg_sys::TargetEntry>(scan_tlist)
            .into_iter()
            .enumerate()
            .map(|(col, te)| {
                if col >= joined {
                    return COUNTED;
                }
                let var = (*te).expr.cast::<pg_sys::Var>();
                if (*var).varno == inner_relid {
                    // (ctid: 0, the fetched row's TID.)
                    if (*var).varattno as i32 == pg_sys::SelfItemPointerAttributeNumber {
                        0
                    } else {
                        -((*var).varattno as i32)
                    }
                } else {
                    outer_tlist
                        .iter()
                        .find(|o| pg_sys::equal((*(**o)).expr.cast(), var.cast()))
                        .map(|o| (**o).resno as i32)
                        .unwrap_or_else(|| pgrx::error!("gpuindex: GpuIndexJoin: a column of the join is not in its outer plan"))
                }
            })
            .collect();
        let (heap, top) = if rinfo.is_null() {
            // A top-k subquery: its quals and (visible) select list, planned.
            let visible: Vec<*mut pg_sys::TargetEntry> =
                list::ptrs::<pg_sys::TargetEntry>(top_tlist).into_iter().filter(|&te| !(*te).resjunk).collect();
            let quals = lateral::planned(root, top_quals, (*outer_plan).targetlist);
            let tlist = lateral::planned(root, list::of_ptrs(&visible).cast(), (*outer_plan).targetlist);
            let order = lateral::planned(root, top_order, (*outer_plan).targetlist);
            (top_heap, vec![quals.cast::<pg_sys::List>(), tlist.cast(), order.cast()])
        } else {
            ((**(*root).simple_rte_array.add(inner_relid as usize)).relid, Vec::new())
        };

        let cscan = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomScan>()).cast::<pg_sys::CustomScan>();
        (*cscan).scan.plan.type_ = NodeTag::T_CustomScan;
        (*cscan).scan.plan.targetlist = tlist;
        (*cscan).scan.plan.qual = other_quals;
        (*cscan).scan.scanrelid = 0;
        (*cscan).flags = (*best_path).flags;
        (*cscan).custom_plans = custom_plans;
        (*cscan).custom_exprs = list::of_ptrs::<std::ffi::c_void>(&[key.cast(), matching.cast(), probe_clause.cast()]);
        let index_oid = if by_tid { fused_index } else { (*index).indexoid };
        let mut private = vec![list::of_oids(&[heap, index_oid]), list::of_ints(&ints), list::of_ints(&colmap)];
        private.extend(top);
        (*cscan).custom_private = list::of_ptrs(&private);
        (*cscan).custom_scan_tlist = scan_tlist;
        (*cscan).methods = &raw const SCAN_METHODS;
        debug_assert!(is_a(cscan, NodeTag::T_CustomScan));
        cscan.cast()
    }
}
