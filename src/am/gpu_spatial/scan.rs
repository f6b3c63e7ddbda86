//! Index scans (`common::scan::IndexScan`): plain, index-only, ordered by
//! distance, bitmaps.
//!
//! Scan keys become engine queries (`<@ box`, `<@ circle`, `~=`), answered
//! exactly (no recheck). A plain scan collects every match at its first
//! call (the candidate leaves' pages and the delta, each read once, the
//! lock dropped between pages: safe for the MVCC snapshots that are all a
//! gpu_spatial scan accepts). An ordered scan walks best first (`knn.rs`),
//! or asks the GPU service (`nearest.rs`).
//! Index-only scans hold VACUUM's interlock (`interlock.rs`) from their
//! first read to their end.

use super::interlock::{self, ScanLock};
use super::knn::Knn;
use super::nearest::Nearest;
use super::page::Entry;
use super::shape;
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::tid_to;
use gpuindex_engine::gpics::{Query, Rect};
use pgrx::pg_sys;
use pgrx::prelude::*;

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
    /// Ordered through the GPU service (`nearest.rs`).
    Served(Box<Nearest>),
}

pub struct ScanState {
    /// None: a key can match nothing (a NULL argument).
    quals: Option<Vec<Query>>,
    /// The ORDER BY point (None when unordered or NULL).
    order: Option<(f64, f64)>,
    ordered: bool,
    mode: Option<Mode>,
    /// The last entry returned.
    last: Option<Entry>,
    /// Held by an index-only scan that has read entries.
    lock: Option<ScanLock>,
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

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_spatial";
    const INSTEAD: &'static str = "GiST";

    fn begin(_index: pg_sys::Relation, _nkeys: usize, norderbys: usize) -> Self {
        ScanState { quals: Some(Vec::new()), order: None, ordered: norderbys > 0, mode: None, last: None, lock: None }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        self.quals = quals_of(scan);
        self.order = order_of(scan);
        self.stop();
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, _forward: bool) -> Option<Found> {
        if self.mode.is_none() && scan.xs_want_itup && self.lock.is_none() {
            self.lock = Some(interlock::lock_for_scan(scan.indexRelation));
        }
        // Ordered only, not index-only (the service returns no points).
        if let (None, true, Some((x, y)), false) = (&self.mode, self.ordered, self.order, scan.xs_want_itup) {
            if self.quals.as_ref().is_some_and(Vec::is_empty) {
                self.mode = Nearest::start(scan.indexRelation, x, y).map(|n| Mode::Served(Box::new(n)));
            }
        }
        if let Some(Mode::Served(n)) = &mut self.mode {
            let (tid, distance) = n.next(scan.indexRelation)?;
            return Some(Found { tid: tid_to(tid), distance });
        }
        let (e, distance) = self.next_entry(scan.indexRelation)?;
        self.last = Some(e);
        Some(Found { tid: tid_to(e.heap_tid()), distance })
    }

    fn value(&self, ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        let e = self.last.expect("a returned entry");
        if e.is_null() {
            return None;
        }
        // SAFETY: a palloc in the tuple context, written whole.
        unsafe {
            let p = pg_sys::MemoryContextAlloc(ctx, std::mem::size_of::<pg_sys::Point>()) as *mut pg_sys::Point;
            *p = pg_sys::Point { x: e.x, y: e.y };
            Some(pg_sys::Datum::from(p))
        }
    }

    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        let Some(quals) = self.quals.as_ref() else { return };
        let mut tids: Vec<pg_sys::ItemPointerData> =
            shape::collect(scan.indexRelation, quals).iter().map(|e| tid_to(e.heap_tid())).collect();
        add(&mut tids);
    }

    fn end(&mut self) {
        self.stop();
    }
}

impl ScanState {
    /// Drops what the scan read, and the interlock with it.
    fn stop(&mut self) {
        self.mode = None;
        if let Some(l) = self.lock.take() {
            l.release();
        }
    }

    /// The next entry (and its distance for an ordered scan).
    fn next_entry(&mut self, rel: pg_sys::Relation) -> Option<(Entry, Option<f64>)> {
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
            Mode::Served(_) => unreachable!("served scans return from `next`"),
        }
    }
}
