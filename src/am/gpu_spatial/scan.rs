//! Index scans: ambeginscan, amrescan, amgettuple (plain, index-only and
//! ordered by distance), amgetbitmap, amendscan.
//!
//! Scan keys become engine queries (`<@ box`, `<@ circle`, `~=`), answered
//! exactly (no recheck). A plain scan collects every match at its first
//! call (the candidate leaves' pages and the delta, each read once, the
//! lock dropped between pages: safe for the MVCC snapshots that are all a
//! gpu_spatial scan accepts). An ordered scan walks best first (`knn.rs`).

use super::knn::Knn;
use super::page::Entry;
use super::shape;
use crate::am::common::scan as common_scan;
use crate::storage::tid_to;
use gpuindex_engine::gpics::{Query, Rect};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::IntoDatum;

/// Strategy numbers, GiST's for the same operators (so that operator
/// classes read alike).
pub const STRATEGY_SAME: u16 = 6;
pub const STRATEGY_IN_BOX: u16 = 28;
pub const STRATEGY_IN_CIRCLE: u16 = 68;
pub const STRATEGY_DISTANCE: u16 = 15;

enum Mode {
    /// Collected matches and the position of the next one.
    Plain {
        items: Vec<Entry>,
        pos: usize,
    },
    Ordered(Box<Knn>),
}

pub struct ScanState {
    /// None: a key can match nothing (a NULL argument).
    quals: Option<Vec<Query>>,
    /// The ORDER BY point (None when unordered or NULL).
    order: Option<(f64, f64)>,
    ordered: bool,
    mode: Option<Mode>,
    tuple_ctx: pg_sys::MemoryContext,
}

/// A scan key's argument as a query.
///
/// # Safety
/// `k` must be a gpu_spatial key with a non-NULL argument of its
/// strategy's type.
pub unsafe fn query_of(strategy: u16, arg: pg_sys::Datum) -> Query {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        match strategy {
            STRATEGY_IN_BOX => {
                let b = &*arg.cast_mut_ptr::<pg_sys::BOX>();
                Query::Range(Rect { lx: b.low.x, ly: b.low.y, hx: b.high.x, hy: b.high.y })
            }
            STRATEGY_IN_CIRCLE => {
                let c = &*arg.cast_mut_ptr::<pg_sys::CIRCLE>();
                Query::Within { x: c.center.x, y: c.center.y, r: c.radius }
            }
            STRATEGY_SAME => {
                let p = &*arg.cast_mut_ptr::<pg_sys::Point>();
                Query::Point { x: p.x, y: p.y }
            }
            s => crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("gpu_spatial: unsupported strategy {s}"),
                "gpu_spatial answers <@ box, <@ circle, ~= and ORDER BY <->.",
            ),
        }
    }
}

fn quals_of(scan: &pg_sys::IndexScanDescData) -> Option<Vec<Query>> {
    let mut quals = Vec::with_capacity(scan.numberOfKeys as usize);
    for i in 0..scan.numberOfKeys as usize {
        // SAFETY: keyData holds numberOfKeys keys.
        let k = unsafe { &*scan.keyData.add(i) };
        if k.sk_flags as u32 & pg_sys::SK_ISNULL != 0 {
            return None; // strict operators: a NULL argument matches nothing
        }
        // SAFETY: the operator class ties each strategy to its argument type.
        quals.push(unsafe { query_of(k.sk_strategy, k.sk_argument) });
    }
    Some(quals)
}

fn order_of(scan: &pg_sys::IndexScanDescData) -> Option<(f64, f64)> {
    if scan.numberOfOrderBys == 0 {
        return None;
    }
    // SAFETY: orderByData holds numberOfOrderBys keys; the only ordering
    // operator is point <-> point.
    unsafe {
        let k = &*scan.orderByData;
        if k.sk_strategy != STRATEGY_DISTANCE {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("gpu_spatial: unsupported ordering strategy {}", k.sk_strategy),
                "gpu_spatial orders by <-> only.",
            );
        }
        if k.sk_flags as u32 & pg_sys::SK_ISNULL != 0 {
            return None;
        }
        let p = &*k.sk_argument.cast_mut_ptr::<pg_sys::Point>();
        Some((p.x, p.y))
    }
}

fn state<'a>(scan: pg_sys::IndexScanDesc) -> &'a mut ScanState {
    // SAFETY: started by ambeginscan with a ScanState.
    unsafe { common_scan::state(scan) }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    // SAFETY: called by PostgreSQL with the arguments its API promises.
    unsafe {
        let scan = common_scan::begin(index, nkeys, norderbys, |tuple_ctx| ScanState {
            quals: Some(Vec::new()),
            order: None,
            ordered: norderbys > 0,
            mode: None,
            tuple_ctx,
        });
        if norderbys > 0 {
            let n = norderbys as usize;
            (*scan).xs_orderbyvals = pg_sys::palloc0(std::mem::size_of::<pg_sys::Datum>() * n) as *mut pg_sys::Datum;
            (*scan).xs_orderbynulls = pg_sys::palloc(n) as *mut bool;
            std::ptr::write_bytes((*scan).xs_orderbynulls, 1, n);
        }
        scan
    }
}

fn check_snapshot(scan: &pg_sys::IndexScanDescData) {
    common_scan::check_snapshot(scan, "gpu_spatial", "GiST");
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrescan(
    scan: pg_sys::IndexScanDesc,
    keys: pg_sys::ScanKey,
    nkeys: std::ffi::c_int,
    orderbys: pg_sys::ScanKey,
    norderbys: std::ffi::c_int,
) {
    // SAFETY: called by PostgreSQL with the arguments its API promises.
    unsafe {
        common_scan::copy_keys(scan, keys, nkeys, orderbys, norderbys);
        let st = state(scan);
        st.quals = quals_of(&*scan);
        st.order = order_of(&*scan);
        st.mode = None;
    }
}

impl ScanState {
    /// The next entry (and its distance for an ordered scan).
    fn next(&mut self, rel: pg_sys::Relation) -> Option<(Entry, Option<f64>)> {
        let quals = self.quals.as_ref()?;
        if self.mode.is_none() {
            self.mode = Some(match (self.ordered, self.order) {
                (true, Some((x, y))) => Mode::Ordered(Box::new(Knn::start(rel, x, y, quals.clone()))),
                // ORDER BY p <-> NULL: every distance is NULL, any order.
                _ => Mode::Plain { items: shape::collect(rel, quals), pos: 0 },
            });
        }
        match self.mode.as_mut()? {
            Mode::Plain { items, pos } => {
                let e = *items.get(*pos)?;
                *pos += 1;
                Some((e, None))
            }
            Mode::Ordered(k) => k.next(rel),
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(scan: pg_sys::IndexScanDesc, _direction: pg_sys::ScanDirection::Type) -> bool {
    // SAFETY: called by PostgreSQL with the arguments its API promises.
    unsafe {
        check_snapshot(&*scan);
        let rel = (*scan).indexRelation;
        let st = state(scan);
        let Some((e, dist)) = st.next(rel) else { return false };
        (*scan).xs_heaptid = tid_to(e.heap_tid());
        (*scan).xs_recheck = false;
        if st.ordered {
            (*scan).xs_recheckorderby = false;
            *(*scan).xs_orderbynulls = dist.is_none();
            *(*scan).xs_orderbyvals = dist.map_or(pg_sys::Datum::from(0), |d| d.into_datum().expect("float8 datum"));
        }
        if (*scan).xs_want_itup {
            pg_sys::MemoryContextReset(st.tuple_ctx);
            let desc = (*(*scan).indexRelation).rd_att;
            let p = pg_sys::MemoryContextAlloc(st.tuple_ctx, std::mem::size_of::<pg_sys::Point>()) as *mut pg_sys::Point;
            *p = pg_sys::Point { x: e.x, y: e.y };
            let mut value = pg_sys::Datum::from(p);
            let mut null = e.is_null();
            (*scan).xs_itup = pg_sys::index_form_tuple_context(desc, &mut value, &mut null, st.tuple_ctx);
            (*scan).xs_itupdesc = desc;
        }
        true
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgetbitmap(scan: pg_sys::IndexScanDesc, tbm: *mut pg_sys::TIDBitmap) -> i64 {
    // SAFETY: called by PostgreSQL with the arguments its API promises.
    unsafe {
        check_snapshot(&*scan);
        let st = state(scan);
        let Some(quals) = st.quals.as_ref() else { return 0 };
        let mut tids: Vec<pg_sys::ItemPointerData> =
            shape::collect((*scan).indexRelation, quals).iter().map(|e| tid_to(e.heap_tid())).collect();
        pg_sys::tbm_add_tuples(tbm, tids.as_mut_ptr(), tids.len() as i32, false);
        tids.len() as i64
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(scan: pg_sys::IndexScanDesc) {
    // The state is dropped with the scan's memory context; free its
    // buffers now.
    state(scan).mode = None;
}
