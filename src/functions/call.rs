//! A batch function's call made ready to search: the index opened under
//! the security guard (`OpenIndex`, as the function checks it), the
//! batch's question, query type and queries. The SQL functions run it and
//! return its (ord, ctid) rows; the batched join runs it itself where its
//! outer side is such a call joined back by ctid (`join::path`), so that
//! each matched row is read once, by the join, instead of by the
//! function's visibility pass and again by the join.

use crate::am::common::search::{self, Ask, Batch};
use crate::am::common::{Access, OpenIndex};
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

    pub fn batch(&self, heap_order: bool) -> Batch<'_> {
        Batch { ask: self.ask, query_type: self.query_type, queries: &self.queries, what: self.what, heap_order }
    }

    /// The function's rows: (position, TID) of every visible row that
    /// matches, policies applied.
    pub fn rows(&self) -> search::Hits {
        search::search(&self.open, &self.batch(false))
    }

    /// Every index match, (position, TID of the index entry), in heap
    /// order, for a plan node that fetches the rows itself with its
    /// snapshot and applies the table's policies among its quals.
    pub fn matches(&self) -> Vec<(i64, pg_sys::ItemPointerData)> {
        let plan = OpenIndex::for_plan(self.open.heap, self.open.index, self.open.am);
        search::search(&plan, &self.batch(true)).rows
    }
}

/// The batch functions whose rows the batched join computes itself when
/// they are joined back by ctid, each (ord bigint, ctid tid).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusable {
    /// `gpu_btree_probe`, `gpu_learned_probe`, `gpu_art_probe`: (index, keys).
    Probe { am: &'static str, what: &'static str },
    /// `gpuindex_search`: (index, op, queries).
    Search,
}

unsafe extern "C-unwind" {
    // The entry points pgrx makes for the functions (`<name>_wrapper`).
    fn gpu_btree_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_learned_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpu_art_probe_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
    fn gpuindex_search_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

impl Fusable {
    /// Function `funcid`, if it is one of them: told by its C entry point,
    /// so that a function of the same name elsewhere is not taken for it.
    pub fn of(funcid: pg_sys::Oid) -> Option<Fusable> {
        // SAFETY: a catalog lookup; fmgr_info of any existing function.
        let addr = unsafe {
            if pg_sys::get_func_name(funcid).is_null() {
                return None;
            }
            let mut f: pg_sys::FmgrInfo = std::mem::zeroed();
            pg_sys::fmgr_info(funcid, &mut f);
            f.fn_addr.map(|a| a as usize)?
        };
        let known: [(unsafe extern "C-unwind" fn(pg_sys::FunctionCallInfo) -> pg_sys::Datum, Fusable); 4] = [
            (gpu_btree_probe_wrapper, Fusable::Probe { am: "gpu_btree", what: "gpu_btree_probe" }),
            (gpu_learned_probe_wrapper, Fusable::Probe { am: "gpu_learned", what: "gpu_learned_probe" }),
            (gpu_art_probe_wrapper, Fusable::Probe { am: "gpu_art", what: "gpu_art_probe" }),
            (gpuindex_search_wrapper, Fusable::Search),
        ];
        known.iter().find(|(f, _)| *f as usize == addr).map(|k| k.1)
    }

    /// The function's name.
    pub fn name(self) -> &'static str {
        match self {
            Fusable::Probe { what, .. } => what,
            Fusable::Search => "gpuindex_search",
        }
    }

    /// The call with these arguments (the function's, all non-NULL).
    pub fn call(self, args: &[pg_sys::Datum]) -> Call {
        match self {
            Fusable::Probe { am, what } => Call::probe(pg_sys::Oid::from(args[0].value() as u32), args[1], am, what),
            Fusable::Search => Call::by_operator(
                pg_sys::Oid::from(args[0].value() as u32),
                pg_sys::Oid::from(args[1].value() as u32),
                args[2],
                None,
                "gpuindex_search",
            ),
        }
    }
}
