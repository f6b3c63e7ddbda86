//! A parallel fused call's large constants sent to the workers as values,
//! not as plan text.
//!
//! A parallel plan reaches its workers as text (nodeToString): a constant
//! of the call, such as a key array of 131,072 int8s (1 MB), becomes ~4 MB
//! of decimal bytes that the leader writes before it starts any worker and
//! each worker parses before it runs any node (~150 ms on the H200 host).
//! PostgreSQL sends an initplan's value to the workers in binary (the
//! Gather's `initParam`, evaluated by the leader), and leaves a
//! parallel-unsafe initplan out of the workers' plan. So the partial
//! path's plan (`plan::plan_custom_path`) makes each such constant an
//! initplan of the query level, a Result of the constant, and its
//! function scan reads the initplan's Param: what a query that wrote
//! `(SELECT <constant>)` would plan, and what EXPLAIN then shows.

use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};

unsafe extern "C-unwind" {
    // subselect.h's (not in pgrx's bindings).
    fn SS_make_initplan_output_param(
        root: *mut pg_sys::PlannerInfo,
        resulttype: pg_sys::Oid,
        resulttypmod: i32,
        resultcollation: pg_sys::Oid,
    ) -> *mut pg_sys::Param;
    fn SS_make_initplan_from_plan(
        root: *mut pg_sys::PlannerInfo,
        subroot: *mut pg_sys::PlannerInfo,
        plan: *mut pg_sys::Plan,
        prm: *mut pg_sys::Param,
    );
}

/// Constants below this size stay in the plan: their text costs the
/// workers microseconds, and an initplan would only lengthen EXPLAIN.
const SENT_FROM_BYTES: usize = 8192;

/// Makes each argument of `scan`'s call that is a constant of at least
/// `SENT_FROM_BYTES` an initplan's Param (see the module's comment). The
/// scan's function list is replaced by a copy: the planner's range table
/// entry shares the original.
///
/// # Safety
/// During create_plan of `root`'s query level; `scan` a FunctionScan plan
/// made for it.
pub unsafe fn send_large_constants(root: *mut pg_sys::PlannerInfo, scan: *mut pg_sys::FunctionScan) {
    // SAFETY: the caller's contract; nodes in the planner's memory.
    unsafe {
        let functions = pg_sys::copyObjectImpl((*scan).functions.cast()).cast::<pg_sys::List>();
        for f in list::ptrs::<pg_sys::RangeTblFunction>(functions) {
            if !is_a((*f).funcexpr, NodeTag::T_FuncExpr) {
                continue;
            }
            let call = (*f).funcexpr.cast::<pg_sys::FuncExpr>();
            let args: Vec<_> = list::ptrs::<pg_sys::Node>((*call).args).into_iter().map(|arg| sent_arg(root, arg)).collect();
            (*call).args = list::of_ptrs(&args);
        }
        (*scan).functions = functions;
    }
}

/// `arg` itself, or where it is (or relabels) a constant of at least
/// `SENT_FROM_BYTES`, the same with the constant an initplan's Param.
///
/// # Safety
/// As `send_large_constants`; `arg` an argument of its call.
unsafe fn sent_arg(root: *mut pg_sys::PlannerInfo, arg: *mut pg_sys::Node) -> *mut pg_sys::Node {
    // SAFETY: the caller's contract.
    unsafe {
        let relabel = is_a(arg, NodeTag::T_RelabelType).then(|| arg.cast::<pg_sys::RelabelType>());
        let c = relabel.map_or(arg, |r| (*r).arg.cast());
        if !is_a(c, NodeTag::T_Const) || const_bytes(c.cast()) < SENT_FROM_BYTES {
            return arg;
        }
        let param = initplan_of(root, c.cast()).cast();
        match relabel {
            Some(r) => {
                (*r).arg = param;
                arg
            }
            None => param.cast(),
        }
    }
}

unsafe extern "C-unwind" {
    /// datum.c's (not in pgrx's bindings).
    fn datumGetSize(value: pg_sys::Datum, typbyval: bool, typlen: std::ffi::c_int) -> usize;
}

/// The bytes a constant's value holds (0 for NULL and values by value).
///
/// # Safety
/// `c` a Const node.
unsafe fn const_bytes(c: *mut pg_sys::Const) -> usize {
    // SAFETY: the caller's contract; a non-NULL by-reference value (an
    // ERROR for a bad length comes back through the guard).
    unsafe {
        if (*c).constisnull || (*c).constbyval {
            return 0;
        }
        pg_sys::ffi::pg_guard_ffi_boundary(|| datumGetSize((*c).constvalue, false, (*c).constlen))
    }
}

/// A Param set by a new initplan of `root`'s level that returns `c`. The
/// initplan is a childless Result, marked parallel-unsafe so that the
/// workers' plan leaves it out; its own planner level (`subroot`) holds
/// nothing (no range table: set_plan_references and SS_finalize_plan
/// have nothing of it to fix).
///
/// # Safety
/// As `send_large_constants`; `c` a Const node.
unsafe fn initplan_of(root: *mut pg_sys::PlannerInfo, c: *mut pg_sys::Const) -> *mut pg_sys::Param {
    // SAFETY: the caller's contract; new nodes in the planner's memory.
    unsafe {
        let result = pg_sys::palloc0(std::mem::size_of::<pg_sys::Result>()).cast::<pg_sys::Result>();
        (*result).plan.type_ = NodeTag::T_Result;
        let entry = pg_sys::makeTargetEntry(c.cast(), 1, std::ptr::null_mut(), false);
        (*result).plan.targetlist = list::of_ptrs(&[entry]);
        (*result).plan.total_cost = pg_sys::cpu_tuple_cost;
        (*result).plan.plan_rows = 1.0;
        (*result).plan.plan_width = const_bytes(c).min(i32::MAX as usize) as i32;
        (*result).plan.parallel_safe = false;

        let parse = pg_sys::palloc0(std::mem::size_of::<pg_sys::Query>()).cast::<pg_sys::Query>();
        (*parse).type_ = NodeTag::T_Query;
        (*parse).commandType = pg_sys::CmdType::CMD_SELECT;
        let subroot = pg_sys::palloc0(std::mem::size_of::<pg_sys::PlannerInfo>()).cast::<pg_sys::PlannerInfo>();
        (*subroot).type_ = NodeTag::T_PlannerInfo;
        (*subroot).parse = parse;
        (*subroot).glob = (*root).glob;
        (*subroot).query_level = (*root).query_level + 1;
        (*subroot).parent_root = root;
        (*subroot).planner_cxt = pg_sys::CurrentMemoryContext;

        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            let param = SS_make_initplan_output_param(root, (*c).consttype, (*c).consttypmod, (*c).constcollid);
            SS_make_initplan_from_plan(root, subroot, result.cast(), param);
            param
        })
    }
}
