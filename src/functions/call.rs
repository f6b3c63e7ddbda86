//! A batch function's call made ready to search: the index opened under
//! the security guard (`OpenIndex`, as the function checks it), the
//! batch's question, query type and queries. The SQL functions run it and
//! return its (ord, ctid) rows; the batched join runs it itself where its
//! outer side is such a call joined back by ctid (`join::path`), so that
//! each matched row is read once, by the join, instead of by the
//! function's visibility pass and again by the join.

use crate::am::common::search::{self, Ask, Batch};
use crate::am::common::{Access, OpenIndex};
use crate::am::gpu_spatial::functions as spatial;
use pgrx::pg_sys;
use pgrx::prelude::*;

pub struct Call {
    pub open: OpenIndex,
    pub ask: Ask,
    pub query_type: pg_sys::Oid,
    pub queries: Vec<(i64, pg_sys::Datum)>,
    pub what: &'static str,
}

impl Call {
    /// An equality probe function's call (`gpu_btree_probe` and its
    /// kind): every element of the array `keys` through index `index` of
    /// access method `am`.
    pub fn probe(index: pg_sys::Oid, keys: pg_sys::Datum, am: &'static str, what: &'static str) -> Call {
        let (query_type, queries) = crate::arrays::elements(keys);
        let open = OpenIndex::open(index, am, Access::Read, pg_sys::AccessShareLock as i32);
        Call { open, ask: Ask::Matches(pg_sys::BTEqualStrategyNumber as u16), query_type, queries, what }
    }

    /// `gpuindex_search`'s (`k` None) or `gpuindex_nearest`'s call: the
    /// queries `key op q` (or the k nearest by `op`) through any gpuindex
    /// index.
    pub fn by_operator(index: pg_sys::Oid, op: pg_sys::Oid, queries: pg_sys::Datum, k: Option<usize>, what: &'static str) -> Call {
        let (mut query_type, mut values) = crate::arrays::elements(queries);
        let open = search::open(index);
        let Some(strategy) = search::strategy_of(open.index, op, k.is_some()) else {
            // SAFETY: format_operator returns a palloc'd C string.
            let name = unsafe { std::ffi::CStr::from_ptr(pg_sys::format_operator(op)).to_string_lossy().into_owned() };
            let role = if k.is_some() { "an ordering" } else { "a search" };
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
                format!("operator {name} is not {role} operator of the index's operator class"),
                if k.is_some() {
                    "gpuindex_nearest takes a distance operator such as <->."
                } else {
                    "Use an operator the index answers in WHERE."
                },
            );
        };
        let (mut left, mut right) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
        // SAFETY: a catalog lookup of an existing operator.
        unsafe { pg_sys::op_input_types(op, &mut left, &mut right) };
        if right == pg_sys::FLOAT4ARRAYOID && query_type == pg_sys::FLOAT4OID {
            // real[] queries come as one array of one more dimension (SQL has
            // no arrays of arrays): its rows are the queries.
            // SAFETY: a non-NULL real[] argument (element type checked).
            let (rows, q) = unsafe { crate::am::gpu_metric::vector::matrix(queries, 2) };
            let dim = q.len() / rows.max(1);
            query_type = right;
            values =
                q.chunks(dim.max(1)).enumerate().map(|(i, row)| (i as i64 + 1, row.to_vec().into_datum().expect("an array"))).collect();
        }
        if right != query_type {
            let name = crate::error::type_name;
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                format!("queries of type {}[] do not fit an operator taking {}", name(query_type), name(right)),
                format!("Cast the array: ARRAY[...]::{}[].", name(right)),
            );
        }
        let ask = match k {
            Some(k) => Ask::Nearest { strategy, k },
            None => Ask::Matches(strategy),
        };
        Call { open, ask, query_type, queries: values, what }
    }

    /// Puts an equality probe's keys in key order where the index has one
    /// (gpu_btree's and gpu_learned's codes), so that the pieces of the
    /// batch (`search::Pieces`, ranges of its queries) are ranges of keys,
    /// each walking its own stretch of the leaves. In the array's order,
    /// each piece of a parallel join's search walked most of the leaf
    /// level again (H200 host, a Zipf batch in four pieces: 38 ms of walks
    /// against 17 ms for the batch in one).
    pub fn in_key_order(&mut self) {
        if self.ask == Ask::Matches(pg_sys::BTEqualStrategyNumber as u16) && matches!(self.open.am, "gpu_btree" | "gpu_learned") {
            crate::am::gpu_btree::probe::in_key_order(self.open.index, self.query_type, &mut self.queries);
        }
    }

    pub fn batch(&self, heap_order: bool) -> Batch<'_> {
        Batch { ask: self.ask, query_type: self.query_type, queries: &self.queries, what: self.what, heap_order }
    }

    /// Writes the function's rows as its result: (position, TID[,
    /// distance]) of every visible row that matches, policies applied,
    /// grouped by position; searched in pieces whose matches fit
    /// `gpuindex.batch_work_mem` (the result spills to disk beyond
    /// work_mem, as any function's).
    ///
    /// # Safety
    /// `fcinfo` is the function's own, declared with those columns.
    pub unsafe fn return_rows(self, fcinfo: pg_sys::FunctionCallInfo) {
        // SAFETY: the caller's contract.
        let mut out = unsafe { crate::srf::Rows::begin(fcinfo) };
        let batch = self.batch(false);
        let mut pieces = search::Pieces::new(&batch);
        while let Some(hits) = pieces.next(&self.open, &batch) {
            // SAFETY: as above.
            unsafe { out.put_hits(hits) };
        }
    }

    /// The call as a plan node runs it: the guarded index closed (its
    /// checks done), the node's own `index` on `heap` searched instead
    /// (`for_plan`: every index match, the node fetching the rows itself
    /// with its snapshot and the table's policies among its quals), its
    /// matches in heap order or (not `heap_order`) as found.
    pub fn for_plan(self, heap: pg_sys::Relation, index: pg_sys::Relation, heap_order: bool) -> Call {
        let plan = OpenIndex::for_plan(heap, index, self.open.am, heap_order);
        Call { open: plan, ..self }
    }
}

/// A batch function whose rows the batched join computes itself when they
/// are joined back by ctid: (ord bigint, ctid tid) rows of one batch,
/// made ready by `call` from the function's (non-NULL) arguments.
pub struct Fusable {
    pub name: &'static str,
    entry: pg_sys::PGFunction,
    pub call: fn(&[pg_sys::Datum]) -> Call,
}

unsafe extern "C-unwind" {
    // The entry points pgrx makes for the functions (`<name>_wrapper`).
    fn gpu_btree_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_learned_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_art_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpuindex_search_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_spatial_range_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_spatial_within_circles_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_spatial_within_points_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

fn oid(d: pg_sys::Datum) -> pg_sys::Oid {
    pg_sys::Oid::from(d.value() as u32)
}

/// Every fusable function; a plan names one by its place here.
pub static FUSABLE: [Fusable; 7] = [
    Fusable {
        name: "gpu_btree_probe",
        entry: Some(gpu_btree_probe_wrapper),
        call: |a| Call::probe(oid(a[0]), a[1], "gpu_btree", "gpu_btree_probe"),
    },
    Fusable {
        name: "gpu_learned_probe",
        entry: Some(gpu_learned_probe_wrapper),
        call: |a| Call::probe(oid(a[0]), a[1], "gpu_learned", "gpu_learned_probe"),
    },
    Fusable {
        name: "gpu_art_probe",
        entry: Some(gpu_art_probe_wrapper),
        call: |a| Call::probe(oid(a[0]), a[1], "gpu_art", "gpu_art_probe"),
    },
    Fusable {
        name: "gpuindex_search",
        entry: Some(gpuindex_search_wrapper),
        call: |a| Call::by_operator(oid(a[0]), oid(a[1]), a[2], None, "gpuindex_search"),
    },
    Fusable { name: "gpu_spatial_range", entry: Some(gpu_spatial_range_wrapper), call: |a| spatial::range(oid(a[0]), a[1]) },
    Fusable { name: "gpu_spatial_within", entry: Some(gpu_spatial_within_circles_wrapper), call: |a| spatial::within(oid(a[0]), a[1]) },
    Fusable {
        name: "gpu_spatial_within",
        entry: Some(gpu_spatial_within_points_wrapper),
        // (The radius: a float8, passed by value.)
        call: |a| spatial::within_distance(oid(a[0]), a[1], f64::from_bits(a[2].value() as u64)),
    },
];

impl Fusable {
    /// The place in `FUSABLE` of function `funcid`, if it is one of them:
    /// told by its C entry point, so that a function of the same name
    /// elsewhere is not taken for it.
    pub fn of(funcid: pg_sys::Oid) -> Option<usize> {
        // SAFETY: a catalog lookup; fmgr_info of any existing function.
        let addr = unsafe {
            if pg_sys::get_func_name(funcid).is_null() {
                return None;
            }
            let mut f: pg_sys::FmgrInfo = std::mem::zeroed();
            pg_sys::fmgr_info(funcid, &mut f);
            f.fn_addr.map(|a| a as usize)?
        };
        FUSABLE.iter().position(|f| f.entry.map(|e| e as usize) == Some(addr))
    }
}
