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
//!   GpuIndexJoin, whose cost grows with the rows actually found. A key
//!   of a constant array that is one of the column's most common values
//!   counts its share of the table instead (`ColumnStats::rows_of`).
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
            b"gpu_btree_probe" | b"gpu_learned_probe" | b"gpu_art_probe" => {
                let keys = *args.get(1)?;
                let stats = ColumnStats::of(index, table, tuples);
                if let Some(rows) = stats.as_ref().and_then(|s| s.rows_of(keys)) {
                    return Some(rows.max(1.0));
                }
                (1, stats.map_or(1.0, |s| s.per_value))
            }
            b"gpu_spatial_knn" | b"gpu_metric_knn" | b"gpu_metric_knn_text" | b"gpu_metric_knn_vector" => {
                (1, nearest(*args.get(2)?, tuples)?)
            }
            b"gpuindex_nearest" => (2, nearest(*args.get(3)?, tuples)?),
            _ => return None,
        };
        Some((queries(*args.get(at)?)? * per_query).max(1.0))
    }
}

/// The rows of `index`'s table that the keys of a constant array match,
/// where ANALYZE's most common values of its first column tell them
/// (`ColumnStats::rows_of`): the batched join's matches where its outer
/// side is `unnest` of such an array (`join::path::keyed_matches`),
/// estimated as a fused call's rows are.
///
/// # Safety
/// `keys` an expression node of the planner's.
pub unsafe fn rows_of_keys(index: pg_sys::Oid, keys: *mut pg_sys::Node) -> Option<f64> {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        let table = pg_sys::IndexGetRelation(index, true);
        if table == pg_sys::InvalidOid {
            return None;
        }
        ColumnStats::of(index, table, table_rows(table))?.rows_of(keys)
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

/// What ANALYZE tells of the index's first column, where the role may
/// use it (see `may_read_stats`).
struct ColumnStats {
    /// The table's rows per distinct value (from ANALYZE's n_distinct,
    /// where it can be trusted: see the module's comment); one elsewhere.
    per_value: f64,
    /// The rows of a value that is none of the most common: what the
    /// others leave, per distinct value left (as PostgreSQL's var_eq_const
    /// counts it; none where the common values are every value seen), where
    /// the distinct count can be trusted; one elsewhere.
    rare: f64,
    /// The table's rows, and its most common values and their shares.
    tuples: f64,
    column_type: pg_sys::Oid,
    collation: pg_sys::Oid,
    common: Vec<(pg_sys::Datum, f64)>,
    /// The statistics tuple the common values point into (released on
    /// drop).
    slot: pg_sys::AttStatsSlot,
}

impl Drop for ColumnStats {
    fn drop(&mut self) {
        // SAFETY: filled by get_attstatsslot (or zeroed: a no-op).
        unsafe { pg_sys::free_attstatsslot(&mut self.slot) };
    }
}

/// By-value types whose values are equal exactly where their datums are
/// (`ColumnStats::rows_of` compares those as words).
const BITWISE_EQUAL: [pg_sys::Oid; 7] =
    [pg_sys::INT2OID, pg_sys::INT4OID, pg_sys::INT8OID, pg_sys::OIDOID, pg_sys::DATEOID, pg_sys::TIMESTAMPOID, pg_sys::TIMESTAMPTZOID];

impl ColumnStats {
    /// The statistics of the index's first column; None where there are
    /// none the role may use (an expression, never analyzed, no SELECT,
    /// row security): one row a key then.
    unsafe fn of(index: pg_sys::Oid, table: pg_sys::Oid, tuples: Option<f64>) -> Option<ColumnStats> {
        // SAFETY: catalog-cache lookups, each released before the next.
        unsafe {
            let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::INDEXRELID as i32, pg_sys::Datum::from(index));
            if tup.is_null() {
                return None;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tup);
            let column = if (*form).indnatts > 0 { *(*form).indkey.values.as_slice(1).as_ptr() } else { 0 };
            pg_sys::ReleaseSysCache(tup);
            let tuples = tuples.filter(|_| column > 0 && may_read_stats(table, column))?;
            let tup = pg_sys::SearchSysCache3(
                pg_sys::SysCacheIdentifier::STATRELATTINH as i32,
                pg_sys::Datum::from(table),
                pg_sys::Datum::from(column),
                pg_sys::Datum::from(false),
            );
            if tup.is_null() {
                return None;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_statistic>(tup);
            let (distinct, nulls) = ((*form).stadistinct as f64, (*form).stanullfrac as f64);
            let mut slot = pg_sys::AttStatsSlot::default();
            let mut common = Vec::new();
            let flags = (pg_sys::ATTSTATSSLOT_VALUES | pg_sys::ATTSTATSSLOT_NUMBERS) as i32;
            if pg_sys::get_attstatsslot(&mut slot, tup, pg_sys::STATISTIC_KIND_MCV as i32, pg_sys::InvalidOid, flags) {
                let values = std::slice::from_raw_parts(slot.values, slot.nvalues as usize);
                let shares = std::slice::from_raw_parts(slot.numbers, slot.nnumbers as usize);
                common = values.iter().zip(shares).map(|(&v, &f)| (v, f as f64)).collect();
            }
            pg_sys::ReleaseSysCache(tup);
            let (mut column_type, mut typmod, mut collation) = (pg_sys::InvalidOid, 0, pg_sys::InvalidOid);
            pg_sys::get_atttypetypmodcoll(table, column, &mut column_type, &mut typmod, &mut collation);
            let share: f64 = common.iter().map(|c| c.1).sum();
            // (Negative: minus the distinct values' share of the rows.)
            let values = if distinct < 0.0 {
                Some(-distinct * tuples)
            } else if distinct > 0.0 && share + nulls >= ALL_SEEN {
                Some(distinct)
            } else {
                None
            };
            let (per_value, rare) = values.map_or((1.0, 1.0), |values| {
                let others = values - common.len() as f64;
                let rare = if others >= 1.0 { tuples * (1.0 - share - nulls).max(0.0) / others } else { 0.0 };
                (tuples * (1.0 - nulls) / values, rare)
            });
            Some(ColumnStats { per_value: per_value.max(1.0), rare, tuples, column_type, collation, common, slot })
        }
    }

    /// The rows of a constant array of keys (each key's, a NULL none): a
    /// most common value's share of the table, `rare` for any other.
    /// The common values are what tell a Zipf key set's few keys held by
    /// millions of rows (the first, 13% of 10^7 rows: `rare` is one
    /// there) from the keys of a uniform set, and so a call worth
    /// fetching in parallel (`path::offer`) from one that is not. None
    /// where the keys are not a constant of the column's type, or the type
    /// has no hash function (`per_value` a key then).
    unsafe fn rows_of(&self, keys: *mut pg_sys::Node) -> Option<f64> {
        // SAFETY: an expression node; a constant array is detoasted;
        // type-cache lookups; the type's own hash and equality.
        unsafe {
            let d = constant(keys)?;
            let a = pg_sys::pg_detoast_datum(d.cast_mut_ptr()).cast::<pg_sys::ArrayType>();
            if (*a).elemtype != self.column_type || self.common.is_empty() {
                return None;
            }
            let flags = (pg_sys::TYPECACHE_HASH_PROC_FINFO | pg_sys::TYPECACHE_EQ_OPR_FINFO) as i32;
            let tc = pg_sys::lookup_type_cache(self.column_type, flags);
            if (*tc).hash_proc_finfo.fn_oid == pg_sys::InvalidOid || (*tc).eq_opr_finfo.fn_oid == pg_sys::InvalidOid {
                return None;
            }
            let (mut elems, mut nulls, mut n) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
            pg_sys::deconstruct_array(
                a,
                (*tc).type_id,
                (*tc).typlen as i32,
                (*tc).typbyval,
                (*tc).typalign,
                &mut elems,
                &mut nulls,
                &mut n,
            );
            let (elems, nulls) = (std::slice::from_raw_parts(elems, n as usize), std::slice::from_raw_parts(nulls, n as usize));
            let keys = elems.iter().zip(nulls).filter(|(_, &null)| !null).map(|(&k, _)| k);
            let rows_for = |common: Option<usize>| common.map_or(self.rare, |i| self.common[i].1 * self.tuples);
            if BITWISE_EQUAL.contains(&self.column_type) {
                // Equal exactly where their datums are: looked up without
                // a function call a key (a 131,072-key array's were a few
                // milliseconds of every plan).
                let mut by_value: Vec<(usize, usize)> = self.common.iter().enumerate().map(|(i, &(v, _))| (v.value(), i)).collect();
                by_value.sort_unstable();
                let find = |k: pg_sys::Datum| by_value.binary_search_by_key(&k.value(), |c| c.0).ok().map(|at| by_value[at].1);
                return Some(keys.map(|k| rows_for(find(k))).sum());
            }
            let hash = |v: pg_sys::Datum| pg_sys::FunctionCall1Coll(&raw mut (*tc).hash_proc_finfo, self.collation, v).value() as u32;
            let equal = |x: pg_sys::Datum, y: pg_sys::Datum| {
                pg_sys::FunctionCall2Coll(&raw mut (*tc).eq_opr_finfo, self.collation, x, y).value() != 0
            };
            let mut by_hash: std::collections::HashMap<u32, Vec<usize>> = std::collections::HashMap::new();
            for (i, &(v, _)) in self.common.iter().enumerate() {
                by_hash.entry(hash(v)).or_default().push(i);
            }
            let find = |k: pg_sys::Datum| by_hash.get(&hash(k)).and_then(|c| c.iter().copied().find(|&i| equal(self.common[i].0, k)));
            Some(keys.map(|k| rows_for(find(k))).sum())
        }
    }
}
