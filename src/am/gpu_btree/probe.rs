//! `gpu_btree_probe(index regclass, keys anyarray)`: many keys through a
//! gpu_btree index in one batch (the mirror's inner search on the GPU or
//! the CPU, then the leaf pages), returning for each input position the
//! TIDs of the rows with that key that are visible to the caller's
//! snapshot (the visible member of each HOT chain), in heap order. Join
//! back with `JOIN t ON t.ctid = p.ctid` (a nested loop over TID scans).

use super::keys;
use super::page::Tid;
use super::tree::Tree;
use crate::am::common::{Access, OpenIndex};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Opens `index` to read (the privilege guard) and checks that it is a
/// gpu_btree index over keys comparable with `elem_type`.
fn open_index(index: pg_sys::Oid, elem_type: pg_sys::Oid) -> OpenIndex {
    let open = OpenIndex::open(index, c"gpu_btree", Access::Read, pg_sys::AccessShareLock as i32);
    let key_type = super::build::key_type(open.index);
    if keys::family_of(elem_type) != keys::family_of(key_type) {
        // SAFETY: format_type_be returns a palloc'd C string.
        let name = |t| unsafe { std::ffi::CStr::from_ptr(pg_sys::format_type_be(t)).to_string_lossy().into_owned() };
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("keys of type {}[] cannot probe an index on {}", name(elem_type), name(key_type)),
            "Cast the array to the indexed column's type, e.g. $1::bigint[].",
        );
    }
    open
}

/// For (code, input position) pairs: the visible TIDs, (position, tid),
/// in heap order (the visibility checks read each heap page once, and a
/// join back by ctid reads the heap sequentially).
fn probe_visible(open: &OpenIndex, mut wanted: Vec<(u64, i64)>) -> Vec<(i64, pg_sys::ItemPointerData)> {
    wanted.sort_unstable();
    let mut codes: Vec<u64> = wanted.iter().map(|w| w.0).collect();
    codes.dedup();
    let tree = Tree::new(open.index);
    let entries: Vec<(u64, Tid)> = if codes.is_empty() { Vec::new() } else { super::mirror::probe(&tree, &codes, "gpu_btree_probe") };
    // (tid, position) for every match, in heap order.
    let mut matches: Vec<(Tid, i64)> = Vec::with_capacity(entries.len());
    let mut w = 0;
    for &(code, tid) in &entries {
        while w < wanted.len() && wanted[w].0 < code {
            w += 1;
        }
        let mut i = w;
        while i < wanted.len() && wanted[i].0 == code {
            matches.push((tid, wanted[i].1));
            i += 1;
        }
    }
    open.visible(matches)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_btree_probe(index regclass, keys anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_btree_probe(index: pg_sys::Oid, keys: pgrx::datum::AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    let (elem_type, values) = keys::array_elements(keys.datum());
    let open = open_index(index, elem_type);
    let mut wanted = Vec::with_capacity(values.len());
    for (i, v) in values {
        let (lo, hi) = keys::equal_range(v, elem_type);
        wanted.push((lo, i));
        if hi != lo {
            wanted.push((hi, i));
        }
    }
    let rows = probe_visible(&open, wanted);
    drop(open);
    // SAFETY: the call's own fcinfo, declared (ord bigint, ctid tid).
    unsafe { crate::srf::ord_tids(fcinfo, rows) }
}
