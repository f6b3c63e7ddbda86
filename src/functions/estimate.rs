//! The planner's row estimate for a batch function's call: the support
//! function `gpuindex_batch_rows` (`SUPPORT` in the functions' SQL).
//! Without it PostgreSQL takes every call for 1000 rows, and plans what
//! follows a call of a million rows (the join back to the table, a sort,
//! an aggregate) as if it returned a thousand.
//!
//! - Equality probes (`gpu_btree_probe` and its kind): per key, the rows
//!   per distinct value of the indexed column, as PostgreSQL estimates
//!   `= ANY`, where ANALYZE's distinct count can be trusted: it scales
//!   with the table (n_distinct < 0), or the most common values cover
//!   nearly every row (a column of few values, all seen). Elsewhere a long
//!   tail of rare values lies beyond the sample and its count is a guess
//!   that can be far too small (Zipf keys, 10^7 rows: n_distinct 6,989 of
//!   366,357): one row a key, the least a key asked for usually has. That
//!   over-estimate (55x) turned a 0.5 s join of 131,072 keys back by ctid
//!   into a 5 s hash join (H200 host); an under-estimate keeps
//!   GpuIndexJoin, whose cost grows with the rows actually found.
//! - k nearest (`gpu_spatial_knn`, `gpu_metric_knn[_text|_vector]`,
//!   `gpuindex_nearest`): k per query, at most the table's rows.
//! - The others (ranges, within a distance): PostgreSQL's 1000. Their
//!   matches per query depend on each query's shape; no statistics of
//!   the index tell them.
//!
//! The queries are counted where the planner sees them (a constant
//! array, or `ARRAY[...]`); otherwise PostgreSQL's 1000 stands. Counting
//! ten there, as PostgreSQL does for `= ANY` of an array it cannot see,
//! planned an InitPlan's 131,072 Zipf keys (2.3M rows) as a nested loop of
//! TID scans, 1.5-2.4 s against 0.2 s for the GpuIndexJoin chosen at
//! 1000 (locally). A real[] holds vectors: one in one dimension, one a
//! row in two.

use crate::list::{self, is_a};
use pgrx::datum::Internal;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;

#[pg_extern(
    strict,
    sql = "CREATE FUNCTION gpuindex_batch_rows(internal) RETURNS internal
    STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_batch_rows(request: Internal) -> Internal {
    // (A NULL pointer: not answered.)
    let unanswered = Internal::from(Some(pg_sys::Datum::from(0usize)));
    let Some(req) = request.unwrap() else { return unanswered };
    // SAFETY: the planner passes a support request node; a rows request
    // is a SupportRequestRows whose node is the call.
    unsafe {
        let r = req.cast_mut_ptr::<pg_sys::SupportRequestRows>();
        if (*r).type_ != NodeTag::T_SupportRequestRows {
            return unanswered;
        }
        let Some(rows) = call_rows((*r).funcid, (*r).node) else { return unanswered };
        (*r).rows = rows;
    }
    Internal::from(Some(req))
}

/// The rows of a call of `funcid`, `node`, where this module estimates
/// them.
///
/// # Safety
/// `node` is the planner's expression of a call of `funcid`.
unsafe fn call_rows(funcid: pg_sys::Oid, node: *mut pg_sys::Node) -> Option<f64> {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        if !is_a(node, NodeTag::T_FuncExpr) {
            return None;
        }
        let args = list::ptrs::<pg_sys::Node>((*node.cast::<pg_sys::FuncExpr>()).args);
        let name = pg_sys::get_func_name(funcid);
        if name.is_null() {
            return None;
        }
        let index = constant(*args.first()?).map(|d| pg_sys::Oid::from(d.value() as u32))?;
        let table = pg_sys::IndexGetRelation(index, true);
        if table == pg_sys::InvalidOid {
            return None;
        }
        let tuples = table_rows(table);
        // (The queries' argument, the rows a query.)
        let (at, per_query) = match std::ffi::CStr::from_ptr(name).to_bytes() {
            b"gpu_btree_probe" | b"gpu_learned_probe" | b"gpu_art_probe" => (1, rows_per_value(index, table, tuples)),
            b"gpu_spatial_knn" | b"gpu_metric_knn" | b"gpu_metric_knn_text" | b"gpu_metric_knn_vector" => {
                (1, nearest(*args.get(2)?, tuples)?)
            }
            b"gpuindex_nearest" => (2, nearest(*args.get(3)?, tuples)?),
            _ => return None,
        };
        Some((queries(*args.get(at)?)? * per_query).max(1.0))
    }
}

/// A constant's value (through binary-compatible casts), None if NULL or
/// not a constant.
unsafe fn constant(e: *mut pg_sys::Node) -> Option<pg_sys::Datum> {
    // SAFETY: an expression node.
    unsafe {
        let e = crate::join::strip_relabel(e.cast());
        let c = e.cast::<pg_sys::Const>();
        (is_a(e, NodeTag::T_Const) && !(*c).constisnull).then(|| (*c).constvalue)
    }
}

/// k rows a query (the call's constant k), at most the table's.
unsafe fn nearest(k: *mut pg_sys::Node, tuples: Option<f64>) -> Option<f64> {
    // SAFETY: an expression node.
    let k = unsafe { constant(k)? }.value() as i32;
    Some((k.max(0) as f64).min(tuples.unwrap_or(f64::INFINITY)))
}

/// How many queries an array argument holds; None where the planner
/// cannot see it (PostgreSQL's 1000 then stands).
unsafe fn queries(e: *mut pg_sys::Node) -> Option<f64> {
    // SAFETY: an expression node; a constant array is detoasted to count.
    unsafe {
        let stripped = crate::join::strip_relabel(e.cast()).cast::<pg_sys::Node>();
        if let Some(d) = constant(stripped) {
            let a = pg_sys::pg_detoast_datum(d.cast_mut_ptr()).cast::<pg_sys::ArrayType>();
            let ndim = (*a).ndim as usize;
            // (ArrayType's header, then dims[ndim].)
            let dims = std::slice::from_raw_parts(a.cast::<u8>().add(std::mem::size_of::<pg_sys::ArrayType>()).cast::<i32>(), ndim);
            // A real[] holds vectors: one, or one a row.
            return Some(match dims {
                [] => 0.0,
                [_] if (*a).elemtype == pg_sys::FLOAT4OID => 1.0,
                _ if (*a).elemtype == pg_sys::FLOAT4OID => dims[0] as f64,
                _ => dims.iter().map(|&n| n as f64).product(),
            });
        }
        if !is_a(stripped, NodeTag::T_ArrayExpr) {
            return None;
        }
        let ae = stripped.cast::<pg_sys::ArrayExpr>();
        if (*ae).element_typeid == pg_sys::FLOAT4OID && !(*ae).multidims {
            return Some(1.0);
        }
        // (ARRAY[...]: its elements, or its rows.)
        Some(list::ptrs::<pg_sys::Node>((*ae).elements).len() as f64)
    }
}

/// The table's rows as last counted (VACUUM, ANALYZE), None if never.
unsafe fn table_rows(table: pg_sys::Oid) -> Option<f64> {
    // SAFETY: a catalog-cache lookup, released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(table));
        if tup.is_null() {
            return None;
        }
        let rows = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tup)).reltuples as f64;
        pg_sys::ReleaseSysCache(tup);
        (rows >= 0.0).then_some(rows)
    }
}

/// Whether this role may have its plans shaped by the column's
/// statistics, as PostgreSQL's planner decides (examine_variable): SELECT
/// on the table or the column, and no row security applying to it (else
/// EXPLAIN's estimate would tell what the role may not read).
unsafe fn may_read_stats(table: pg_sys::Oid, column: i16) -> bool {
    // SAFETY: catalog lookups from a backend.
    unsafe {
        let (user, select) = (pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode);
        let ok = pg_sys::AclResult::ACLCHECK_OK;
        (pg_sys::pg_class_aclcheck(table, user, select) == ok || pg_sys::pg_attribute_aclcheck(table, column, user, select) == ok)
            && pg_sys::check_enable_rls(table, pg_sys::InvalidOid, true) != pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
    }
}

/// The share of a column's rows its most common values and NULLs must
/// cover for ANALYZE's distinct count of it to be taken as seen whole.
const ALL_SEEN: f64 = 0.95;

/// The table's rows per distinct value of the index's first column (from
/// ANALYZE's n_distinct, where it can be trusted: see the module's
/// comment); one elsewhere (a long tail, an expression, no statistics,
/// statistics the role may not use).
unsafe fn rows_per_value(index: pg_sys::Oid, table: pg_sys::Oid, tuples: Option<f64>) -> f64 {
    // SAFETY: catalog-cache lookups, each released before the next.
    unsafe {
        let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::INDEXRELID as i32, pg_sys::Datum::from(index));
        if tup.is_null() {
            return 1.0;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tup);
        let column = if (*form).indnatts > 0 { *(*form).indkey.values.as_slice(1).as_ptr() } else { 0 };
        pg_sys::ReleaseSysCache(tup);
        let Some(tuples) = tuples.filter(|_| column > 0 && may_read_stats(table, column)) else { return 1.0 };
        let tup = pg_sys::SearchSysCache3(
            pg_sys::SysCacheIdentifier::STATRELATTINH as i32,
            pg_sys::Datum::from(table),
            pg_sys::Datum::from(column),
            pg_sys::Datum::from(false),
        );
        if tup.is_null() {
            return 1.0;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_statistic>(tup);
        let (distinct, nulls) = ((*form).stadistinct as f64, (*form).stanullfrac as f64);
        let mut mcv = pg_sys::AttStatsSlot::default();
        let mut common = 0.0;
        if pg_sys::get_attstatsslot(
            &mut mcv,
            tup,
            pg_sys::STATISTIC_KIND_MCV as i32,
            pg_sys::InvalidOid,
            pg_sys::ATTSTATSSLOT_NUMBERS as i32,
        ) {
            common = std::slice::from_raw_parts(mcv.numbers, mcv.nnumbers as usize).iter().map(|&f| f as f64).sum();
            pg_sys::free_attstatsslot(&mut mcv);
        }
        pg_sys::ReleaseSysCache(tup);
        // (Negative: minus the distinct values' share of the rows.)
        let per = if distinct < 0.0 {
            -1.0 / distinct
        } else if distinct > 0.0 && common + nulls >= ALL_SEEN {
            tuples * (1.0 - nulls) / distinct
        } else {
            1.0
        };
        per.max(1.0)
    }
}
