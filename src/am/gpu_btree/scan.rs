//! Index scans (`common::scan::IndexScan`): both directions, index-only,
//! bitmaps.
//!
//! The scan keys become a plan: a range of codes (optionally followed by
//! the NULLs, for unqualified ordered scans), a sorted list of probes
//! (`= ANY(array)`: one batch through the mirror and the batch executor),
//! the NULLs alone, or nothing. Range scans copy a page's matching entries
//! at a time and drop the lock (safe for MVCC snapshots, which are all a
//! gpu_btree scan accepts); probes and NULLs are materialised at once.
//! Index-only scans keep the pins of the pages behind the current items,
//! so VACUUM cannot remove those entries while they are being returned.

use super::keys::{self, Bounds};
use super::mirror;
use super::page::*;
use super::page::{Shared, Special};
use super::tree::Tree;
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::{keeping_pins, Pins};
use pgrx::pg_sys;

/// Below this many probes, probes are searched one descent each (building
/// a mirror would cost more).
const MIRROR_MIN_PROBES: usize = 32;

#[derive(Debug, Clone, PartialEq)]
enum Plan {
    Empty,
    Nulls,
    Range { b: Bounds, with_nulls: bool },
    Probes(Vec<u64>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Keys,
    Nulls,
}

/// Where the current page's items came from.
#[derive(Debug, Clone, Copy)]
struct PageInfo {
    block: u32,
    s: Special,
}

pub struct ScanState {
    key_type: pg_sys::Oid,
    plan: Plan,
    started: bool,
    items: Vec<(u64, Tid)>,
    pos: isize,
    phase: Phase,
    page: Option<PageInfo>,
    /// The last item returned: its key, and whether it is a NULL.
    last: (u64, bool),
    /// Index-only scans keep the pins of the pages their items came from
    /// (see `storage::Pins`): the heap is not read to check them.
    keep_pins: bool,
    pins: Pins,
}

fn plan_of(scan: &pg_sys::IndexScanDescData, key_type: pg_sys::Oid) -> Plan {
    let mut b = Bounds::ALL;
    let (mut is_null, mut not_null) = (false, false);
    let mut probes: Option<Vec<u64>> = None;
    for i in 0..scan.numberOfKeys as usize {
        // SAFETY: keyData holds numberOfKeys keys.
        let k = unsafe { &*scan.keyData.add(i) };
        let flags = k.sk_flags as u32;
        if flags & pg_sys::SK_ISNULL != 0 {
            if flags & pg_sys::SK_SEARCHNULL != 0 {
                is_null = true;
            } else if flags & pg_sys::SK_SEARCHNOTNULL != 0 {
                not_null = true;
            } else {
                return Plan::Empty; // comparison with NULL
            }
            continue;
        }
        let arg_type = if k.sk_subtype == pg_sys::InvalidOid { key_type } else { k.sk_subtype };
        if flags & pg_sys::SK_SEARCHARRAY != 0 {
            let (elem_type, values) = keys::array_elements(k.sk_argument);
            if values.is_empty() {
                return Plan::Empty;
            }
            if k.sk_strategy == 3 {
                let mut codes: Vec<u64> = Vec::with_capacity(values.len());
                for (_, v) in &values {
                    let (lo, hi) = keys::equal_range(*v, elem_type);
                    codes.extend(if lo == hi { vec![lo] } else { vec![lo, hi] });
                }
                codes.sort_unstable();
                codes.dedup();
                probes = Some(match probes {
                    None => codes,
                    Some(prev) => prev.into_iter().filter(|c| codes.binary_search(c).is_ok()).collect(),
                });
            } else {
                // col < ANY(a) is col < max(a); col > ANY(a) is col > min(a).
                let pick = |take_max: bool| {
                    let codes = values.iter().map(|&(_, v)| (keys::encode(v, elem_type), v));
                    if take_max {
                        codes.max_by_key(|c| c.0)
                    } else {
                        codes.min_by_key(|c| c.0)
                    }
                };
                let (_, v) = pick(k.sk_strategy <= 2).expect("non-empty array");
                b.narrow(k.sk_strategy, v, elem_type);
            }
        } else {
            b.narrow(k.sk_strategy, k.sk_argument, arg_type);
        }
    }
    if is_null {
        let others = scan.numberOfKeys as usize > 1;
        return if not_null || others { Plan::Empty } else { Plan::Nulls };
    }
    if b.empty {
        return Plan::Empty;
    }
    match probes {
        Some(p) => {
            let p: Vec<u64> = p.into_iter().filter(|&c| b.contains(c)).collect();
            if p.is_empty() {
                Plan::Empty
            } else {
                Plan::Probes(p)
            }
        }
        None => Plan::Range { b, with_nulls: scan.numberOfKeys == 0 },
    }
}

fn null_tids(tree: &Tree) -> Vec<(u64, Tid)> {
    let mut out = Vec::new();
    let mut block = tree.meta().null_head;
    while block != NONE {
        let g = Shared::lock(tree.rel, block);
        let n = Nulls::new(g.page());
        out.extend((0..n.count()).map(|i| (0, n.tid(i))));
        block = n.s.right;
    }
    out
}

/// The matching entries of one leaf.
fn page_items(g: &Shared, b: &Bounds, out: &mut Vec<(u64, Tid)>) -> PageInfo {
    let l = Leaf::new(g.page());
    let keys = l.keys();
    let start = gpuindex_engine::hbtree::line::lower_bound(keys, b.lo);
    out.clear();
    for (i, &k) in keys.iter().enumerate().skip(start) {
        if k > b.hi {
            break;
        }
        out.push((k, l.tid(i)));
    }
    PageInfo { block: g.block(), s: l.s }
}

/// Every entry of a probe plan, in key order.
fn probe_items(tree: &Tree, probes: &[u64]) -> Vec<(u64, Tid)> {
    if probes.len() >= MIRROR_MIN_PROBES {
        return mirror::probe(tree, probes, "gpu_btree = ANY");
    }
    let mut out = Vec::new();
    for &q in probes {
        mirror::collect_from(tree.rel, tree.find_leaf(q), q, &mut out);
    }
    out
}

impl ScanState {
    fn reset(&mut self, plan: Plan) {
        self.pins.release();
        self.plan = plan;
        self.started = false;
        self.items.clear();
        self.pos = -1;
        self.phase = Phase::Keys;
        self.page = None;
    }

    /// Positions at the first item in direction `dir` (+1 / -1).
    fn start(&mut self, tree: &Tree, dir: isize) {
        self.started = true;
        match &self.plan {
            Plan::Empty => self.items.clear(),
            Plan::Nulls => {
                self.items = null_tids(tree);
                self.phase = Phase::Nulls;
            }
            Plan::Probes(p) => self.items = probe_items(tree, p),
            Plan::Range { b, with_nulls } => {
                let b = *b;
                if dir < 0 && *with_nulls {
                    self.items = null_tids(tree);
                    self.phase = Phase::Nulls;
                } else {
                    let g = if dir > 0 { tree.find_leaf(b.lo) } else { tree.find_last_leaf(b.hi) };
                    self.page = Some(page_items(&g, &b, &mut self.items));
                }
            }
        }
        self.pos = if dir > 0 { 0 } else { self.items.len() as isize - 1 };
    }

    /// Loads the next items in direction `dir`; false at the end.
    fn advance(&mut self, tree: &Tree, dir: isize) -> bool {
        let Plan::Range { b, with_nulls } = self.plan.clone() else { return false };
        let g = match (self.phase, dir > 0) {
            (Phase::Keys, true) => match self.page {
                Some(p) if p.s.flags & RIGHTMOST == 0 && (is_dead(&p.s) || p.s.high <= b.hi) => Shared::lock(tree.rel, p.s.right),
                _ if with_nulls => {
                    self.items = null_tids(tree);
                    self.phase = Phase::Nulls;
                    self.pos = 0;
                    return true;
                }
                _ => return false,
            },
            (Phase::Keys, false) => match self.page {
                Some(p) if p.s.flags & LEFTMOST == 0 && (is_dead(&p.s) || p.s.low >= b.lo) => tree.leaf_left_of(p.block, p.s.left),
                _ => return false,
            },
            (Phase::Nulls, true) => return false,
            (Phase::Nulls, false) => {
                self.phase = Phase::Keys;
                match self.page {
                    Some(p) => Shared::lock(tree.rel, p.block), // back to where the keys ended
                    None => tree.find_last_leaf(b.hi),
                }
            }
        };
        self.page = Some(page_items(&g, &b, &mut self.items));
        self.pos = if dir > 0 { 0 } else { self.items.len() as isize - 1 };
        true
    }

    /// Runs `f`, which loads new items; for an index-only scan, the pins
    /// of the pages it read replace those of the previous items.
    fn loading<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        if !self.keep_pins {
            return f(self);
        }
        let (r, mut pins) = keeping_pins(|| f(self));
        std::mem::swap(&mut self.pins, &mut pins);
        pins.release();
        r
    }

    fn next_item(&mut self, tree: &Tree, dir: isize) -> Option<(u64, Tid, bool)> {
        if !self.started {
            self.loading(|s| s.start(tree, dir));
        } else {
            self.pos += dir;
        }
        loop {
            if self.pos >= 0 && (self.pos as usize) < self.items.len() {
                let (k, t) = self.items[self.pos as usize];
                return Some((k, t, self.phase == Phase::Nulls));
            }
            if !self.loading(|s| s.advance(tree, dir)) {
                // Stay just outside the items, so a change of direction
                // resumes at the last item returned.
                self.pos = if dir > 0 { self.items.len() as isize } else { -1 };
                return None;
            }
        }
    }
}

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_btree";
    const INSTEAD: &'static str = "btree";

    fn begin(index: pg_sys::Relation, _nkeys: usize, _norderbys: usize) -> Self {
        ScanState {
            key_type: super::build::key_type(index),
            plan: Plan::Empty,
            started: false,
            items: Vec::new(),
            pos: -1,
            phase: Phase::Keys,
            page: None,
            last: (0, false),
            keep_pins: false,
            pins: Pins::default(),
        }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        let plan = plan_of(scan, self.key_type);
        self.reset(plan);
        self.keep_pins = scan.xs_want_itup;
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, forward: bool) -> Option<Found> {
        let (key, tid, is_null) = self.next_item(&Tree::new(scan.indexRelation), if forward { 1 } else { -1 })?;
        self.last = (key, is_null);
        Some(Found { tid: tid_to(tid), distance: None })
    }

    fn next_buffered(&mut self, forward: bool) -> Option<(pg_sys::ItemPointerData, pg_sys::Datum)> {
        // Keys of the page already copied (NULLs take the full path).
        if !self.started || self.phase != Phase::Keys {
            return None;
        }
        let pos = self.pos + if forward { 1 } else { -1 };
        let &(key, tid) = self.items.get(usize::try_from(pos).ok()?)?;
        self.pos = pos;
        self.last = (key, false);
        Some((tid_to(tid), keys::decode(key, self.key_type)))
    }

    fn value(&self, _ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        // Every key type is passed by value.
        let (key, is_null) = self.last;
        (!is_null).then(|| keys::decode(key, self.key_type))
    }

    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        let tree = Tree::new(scan.indexRelation);
        self.reset(self.plan.clone());
        let mut tids: Vec<pg_sys::ItemPointerData> = Vec::with_capacity(4096);
        while let Some((_, tid, _)) = self.next_item(&tree, 1) {
            tids.push(tid_to(tid));
            if tids.len() == 4096 {
                add(&mut tids);
                tids.clear();
            }
        }
        add(&mut tids);
    }

    fn end(&mut self) {
        self.pins.release();
        self.items = Vec::new();
        self.plan = Plan::Empty;
    }
}
