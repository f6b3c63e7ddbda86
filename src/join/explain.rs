//! EXPLAIN for the node: the join type, the index and what probes it (or
//! the LATERAL top-k subquery's nearest rows, or the fused call), the
//! match quals, the chunk size and device; under ANALYZE the counters of
//! every participant and the time in the index, the heap and the rest.

use super::exec::state;
use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;
use std::ffi::{CStr, CString};
use std::time::Duration;

fn join_type_name(jointype: pg_sys::JoinType::Type) -> &'static CStr {
    match jointype {
        pg_sys::JoinType::JOIN_LEFT => c"Left",
        pg_sys::JoinType::JOIN_SEMI => c"Semi",
        pg_sys::JoinType::JOIN_ANTI => c"Anti",
        _ => c"Inner",
    }
}

unsafe fn text(es: *mut pg_sys::ExplainState, label: &CStr, value: &str) {
    let value = CString::new(value).unwrap_or_default();
    // SAFETY: EXPLAIN's state, C strings that outlive the call.
    unsafe { pg_sys::ExplainPropertyText(label.as_ptr(), value.as_ptr(), es) }
}

unsafe fn integer(es: *mut pg_sys::ExplainState, label: &CStr, value: u64) {
    // SAFETY: as `text`.
    unsafe { pg_sys::ExplainPropertyInteger(label.as_ptr(), std::ptr::null(), value as i64, es) }
}

unsafe fn millis(es: *mut pg_sys::ExplainState, label: &CStr, d: Duration) {
    // SAFETY: as `text`.
    unsafe { pg_sys::ExplainPropertyFloat(label.as_ptr(), c"ms".as_ptr(), d.as_secs_f64() * 1e3, 3, es) }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn explain(node: *mut pg_sys::CustomScanState, ancestors: *mut pg_sys::List, es: *mut pg_sys::ExplainState) {
    // SAFETY: EXPLAIN's node and state; the expressions were fixed by
    // setrefs to read the scan tuple, which the deparse context resolves.
    unsafe {
        let st = state(node);
        let plan = (*node).ss.ps.plan;
        let exprs = list::ptrs::<pg_sys::Node>((*plan.cast::<pg_sys::CustomScan>()).custom_exprs);
        let context = pg_sys::set_deparse_context_plan((*es).deparse_cxt, plan, ancestors);
        let deparse =
            |e: *mut pg_sys::Node| CStr::from_ptr(pg_sys::deparse_expression(e, context, true, false)).to_string_lossy().into_owned();
        pg_sys::ExplainPropertyText(c"Join Type".as_ptr(), join_type_name(st.jointype).as_ptr(), es);
        if st.index.is_null() || st.fused_call().is_some() {
            // As a TID scan shows its condition.
            text(es, c"TID Cond", &format!("(ctid = {})", deparse(exprs[0])));
        }
        if !st.index.is_null() {
            let name = CStr::from_ptr(pg_sys::get_rel_name((*st.index).rd_id)).to_string_lossy();
            text(es, c"Index", &format!("{name} ({})", st.am));
        }
        if let Some(name) = st.fused_call() {
            // The child function scan is not run (EXPLAIN ANALYZE shows it
            // never executed).
            let shared = if (*(*node).ss.ps.plan).parallel_aware { ", its matches shared by the participants" } else { "" };
            text(es, c"Outer Call", &format!("{name} searched by this node{shared}"));
        }
        match &st.top {
            None if st.index.is_null() || st.fused_call().is_some() => {}
            None => text(es, c"Probe", &deparse(exprs[2])),
            Some(top) => {
                let op = CStr::from_ptr(pg_sys::get_opname(top.op)).to_string_lossy().into_owned();
                let table = CStr::from_ptr(pg_sys::get_rel_name((*st.heap).rd_id)).to_string_lossy().into_owned();
                text(es, c"Nearest", &format!("{} rows of {table} by {op} {}", top.k, deparse(exprs[0])));
            }
        }
        let matching = exprs[1];
        if is_a(matching, NodeTag::T_List) {
            text(es, c"Join Filter", &deparse(pg_sys::make_ands_explicit(matching.cast()).cast()));
        }
        if !st.aggs.is_empty() {
            // An aggregating plan (`count`): its one row holds the
            // aggregates of the joined rows, which no node above sees.
            text(es, c"Aggregate", super::aggregate::describe(&st.aggs));
        }
        if st.index_only {
            // As an index-only scan: the heap is read only for pages the
            // visibility map does not have all-visible ("Heap Fetches").
            text(es, c"Inner Rows", "not read (index-only)");
        }
        integer(es, c"Chunk Size", st.chunk_size as u64);
        if !st.index.is_null() {
            text(es, c"Device", crate::guc::device_name());
        }
        if (*es).analyze {
            // Every participant's under a parallel-aware plan (`parallel`);
            // a plan run whole by one worker (force_parallel_mode) counts
            // there, out of the leader's sight.
            let s = &st.all_stats();
            if !(*node).ss.ps.worker_instrument.is_null() && !(*(*node).ss.ps.plan).parallel_aware {
                text(es, c"Counts", "the leader's share only (parallel workers' are not shown)");
            }
            integer(es, c"Chunks", s.chunks);
            integer(es, c"GPU Batches", s.gpu_batches);
            if s.extra_pieces > 0 {
                // (Batches split to fit gpuindex.batch_work_mem.)
                integer(es, c"Extra Batch Pieces", s.extra_pieces);
            }
            integer(es, c"Probes", s.probes);
            integer(es, c"Index Matches", s.matches);
            if s.counted > 0 {
                // (On all-visible pages, counted in the index's walk: no
                // row made, no heap fetch.)
                integer(es, c"Matches Counted in Index", s.counted);
            }
            integer(es, c"Heap Fetches", s.fetches);
            integer(es, c"Rows Removed by Join Filter", s.removed_by_join_filter);
            if let Some(top) = &st.top {
                integer(es, c"Nearest Rounds", top.rounds);
                integer(es, c"Rows by Heap Scan", top.scanned);
            }
            if (*es).timing {
                if !st.index.is_null() {
                    millis(es, c"Index Time", s.index_time);
                }
                millis(es, c"Heap Time", s.heap_time);
                // The rest of the node's time (its outer side, the rows'
                // quals and projections): its clock less the index's and
                // the heap's, over the processes the counters are of (of a
                // parallel-aware plan, summed over the participants as the
                // other two: the leader's clock holds the workers' by now).
                let instr = (*node).ss.ps.instrument;
                if !instr.is_null() && ((*node).ss.ps.worker_instrument.is_null() || (*(*node).ss.ps.plan).parallel_aware) {
                    let total = Duration::from_secs_f64((*instr).total.max(0.0));
                    millis(es, c"Other Time", total.saturating_sub(s.index_time + s.heap_time));
                }
            }
        }
    }
}
