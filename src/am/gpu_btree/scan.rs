//! Index scans (`common::scan::IndexScan`): both directions, index-only,
//! bitmaps.
//!
//! The scan keys become a plan: a range of codes (optionally followed by
//! the NULLs, for unqualified ordered scans), a sorted list of probes
//! (`= ANY(array)`: leaf hints for all of them in one batch through the
//! mirror and the batch executor), the NULLs alone, or nothing. Every plan
//! copies one page's matching entries at a time and drops the lock (safe
//! for MVCC snapshots, which are all a gpu_btree scan accepts). Index-only
//! scans keep the pin of that page while its items are returned, so VACUUM
//! cannot remove them meanwhile: one pin, however many pages the scan
//! reads (a materialised probe list once pinned every leaf it touched and
//! ran out of buffers at 128K probes over 10^7 rows). Parallel scans
//! (`common::parallel`) split ranges page by page among their
//! participants: forward ones (unqualified ordered scans included) and
//! backward ones (but unqualified backward scans, whose NULLs come first),
//! and probe lists both ways; any other plan is taken whole by one of
//! them.

use super::keys::{self, Bounds};
use super::leaf_step;
use super::mirror;
use super::page::*;
use super::page::{Shared, Special};
use super::tree::Tree;
use crate::am::common::parallel::{Seized, Walk};
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::Pins;
use gpuindex_engine::hbtree::line::{lower_bound, upper_bound};
use pgrx::pg_sys;
use std::sync::Arc;

/// Below this many probes, probes are searched one descent each (building
/// a mirror would cost more).
const MIRROR_MIN_PROBES: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    Empty,
    Nulls,
    Range {
        b: Bounds,
        with_nulls: bool,
    },
    /// Shared: the plan is cloned at every page step.
    Probes(Arc<[u64]>),
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
    /// The NULL chain's blocks (read when the scan reaches the NULLs; it
    /// only grows at its end) and the position of the current one.
    null_chain: Vec<u32>,
    null_at: usize,
    /// Probe plans with many probes: the mirror and each probe's leaf.
    /// Each probe's hint (a leaf block), and the index's size then.
    hints: Option<(Vec<u32>, u32)>,
    /// The last item returned: its key, and whether it is a NULL.
    last: (u64, bool),
    /// Index-only scans keep the pin of the page their items came from
    /// (see `storage::Pins`): the heap is not read to check them.
    keep_pins: bool,
    pins: Pins,
    /// A parallel scan's shared walk, while this participant takes its
    /// pages from it (a range, probes); None in any other scan.
    walk: Option<Walk>,
    /// This participant read the walk's last page of a range that the
    /// NULLs follow: it returns them after it.
    nulls_after: bool,
    /// The root the scan's descents start from (`Tree::pinned`).
    root: Option<(u32, u32)>,
}

pub(crate) fn plan_of(scan: &pg_sys::IndexScanDescData, key_type: pg_sys::Oid) -> Plan {
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
                    codes.push(lo);
                    if hi != lo {
                        codes.push(hi);
                    }
                }
                gpuindex_engine::keys::sort_codes(&mut codes);
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
                Plan::Probes(p.into())
            }
        }
        None => Plan::Range { b, with_nulls: scan.numberOfKeys == 0 },
    }
}

/// The NULL chain's blocks, in order.
fn null_chain(tree: &Tree) -> Vec<u32> {
    let mut out = Vec::new();
    let mut block = tree.meta().null_head;
    while block != NONE {
        out.push(block);
        block = Shared::lock(tree.rel, block).page().special().right;
    }
    out
}

/// The TIDs of one NULL page.
fn null_items(g: &Shared, out: &mut Vec<(u64, Tid)>) {
    let n = Nulls::new(g.page());
    out.clear();
    out.extend((0..n.count()).map(|i| (0, n.tid(i))));
}

/// The entries of one leaf with keys in [b.lo, b.hi].
fn page_items(g: &Shared, b: &Bounds, out: &mut Vec<(u64, Tid)>) -> PageInfo {
    let l = Leaf::new(g.page());
    let from = l.lower_bound(b.lo);
    let to = l.upper_bound(b.hi).max(from);
    out.clear();
    out.extend(l.entries(from, to));
    PageInfo { block: g.block(), s: l.s }
}

/// The entries of one leaf whose keys are among the ascending `probes`.
fn probe_page_items(g: &Shared, probes: &[u64], out: &mut Vec<(u64, Tid)>) -> PageInfo {
    let l = Leaf::new(g.page());
    out.clear();
    if let (Some(first), Some(last)) = (l.first_key(), l.last_key()) {
        let mut pos = 0;
        for &q in &probes[lower_bound(probes, first)..upper_bound(probes, last)] {
            let start = l.lower_bound_from(pos, q);
            pos = l.run_end(start, q);
            out.extend(l.entries(start, pos));
        }
    }
    PageInfo { block: g.block(), s: l.s }
}

impl ScanState {
    /// The key of the match `next` returned last, and whether it is a NULL.
    pub(crate) fn last_item(&self) -> (u64, bool) {
        self.last
    }

    fn reset(&mut self, plan: Plan) {
        self.pins.release();
        self.plan = plan;
        self.started = false;
        self.items.clear();
        self.pos = -1;
        self.phase = Phase::Keys;
        self.page = None;
        self.null_chain.clear();
        self.hints = None;
        self.walk = None;
        self.nulls_after = false;
        self.root = None;
    }

    /// Copies a leaf's matching entries into `items` (keys in `probes[from..=to]`
    /// for a probe plan), positioned for direction `dir`.
    fn load_leaf(&mut self, g: Shared, dir: isize, from: usize, to: usize) {
        self.page = Some(match &self.plan {
            Plan::Probes(p) => probe_page_items(&g, &p[from..=to], &mut self.items),
            Plan::Range { b, .. } => page_items(&g, b, &mut self.items),
            _ => unreachable!("a leaf of a plan without keys"),
        });
        self.loaded(&g, dir);
    }

    /// Copies NULL page `at` of the chain into `items`.
    fn load_nulls(&mut self, tree: &Tree, at: usize, dir: isize) {
        self.phase = Phase::Nulls;
        self.null_at = at;
        match self.null_chain.get(at) {
            Some(&block) => {
                let g = Shared::lock(tree.rel, block);
                null_items(&g, &mut self.items);
                self.loaded(&g, dir);
            }
            None => self.items.clear(),
        }
    }

    /// Positions at the first item of a page just copied; an index-only
    /// scan moves its pin to that page.
    fn loaded(&mut self, g: &Shared, dir: isize) {
        self.pos = if dir > 0 { 0 } else { self.items.len() as isize - 1 };
        if self.keep_pins {
            self.pins.release();
            self.pins.keep(g);
        }
    }

    /// Enters the NULLs at their first (dir > 0) or last page.
    fn start_nulls(&mut self, tree: &Tree, dir: isize) {
        self.null_chain = null_chain(tree);
        let at = if dir > 0 { 0 } else { self.null_chain.len().saturating_sub(1) };
        self.load_nulls(tree, at, dir);
    }

    /// Each probe's leaf through the mirror, for many probes (a one-leaf
    /// tree, a gpu_learned delta or a small index, needs no mirror).
    fn compute_hints(&mut self, tree: &Tree, probes: &[u64]) {
        if probes.len() >= MIRROR_MIN_PROBES && tree.meta().root_level > 0 {
            self.hints = Some((mirror::hints(tree, probes, "gpu_btree = ANY"), mirror::blocks(tree)));
        }
    }

    /// The leaf where probe `i`'s entries begin (or would), live.
    fn probe_leaf(&self, tree: &Tree, probes: &[u64], i: usize) -> Shared {
        let q = probes[i];
        let g = match &self.hints {
            Some((h, blocks)) => mirror::hinted_leaf(tree, h[i], *blocks, q),
            None => tree.find_leaf(q),
        };
        leaf_step::live_leaf_for(tree.rel, g, 0, q).0
    }

    /// A parallel forward range scan: copies the walk's next page and
    /// hands its successor on; false when the walk is over. The NULLs
    /// that follow an unqualified ordered scan go to the participant that
    /// read the last page (its stream stays in order: keys, then NULLs).
    fn load_shared(&mut self, tree: &Tree, b: &Bounds, with_nulls: bool, w: Walk) -> bool {
        let g = match w.seize() {
            Seized::First => tree.find_leaf(b.lo),
            Seized::Page(block) => Shared::lock(tree.rel, block),
            Seized::Done if self.nulls_after => {
                self.nulls_after = false;
                self.walk = None;
                self.start_nulls(tree, 1);
                return true;
            }
            Seized::Done => return false,
        };
        self.load_leaf(g, 1, 0, 0);
        let s = self.page.expect("a page was copied").s;
        let next = (s.flags & RIGHTMOST == 0 && (is_dead(&s) || s.high <= b.hi)).then_some(s.right);
        self.nulls_after = with_nulls && next.is_none();
        w.release(next);
        true
    }

    /// A parallel backward range scan: copies the page left of the one
    /// the walk's last reader read (nbtree's scheme: the next reader walks
    /// left from that page itself, so a split of its left sibling since is
    /// seen) and hands this one on; false when the walk is over.
    fn load_shared_back(&mut self, tree: &Tree, b: &Bounds, w: Walk) -> bool {
        let g = match w.seize() {
            Seized::First => tree.find_last_leaf(b.hi),
            Seized::Page(block) => {
                let left = Shared::lock(tree.rel, block).page().special().left;
                match tree.leaf_left_of(block, left) {
                    Some(g) => g,
                    None => {
                        w.release(None);
                        return false;
                    }
                }
            }
            Seized::Done => return false,
        };
        self.load_leaf(g, -1, 0, 0);
        let p = self.page.expect("a page was copied");
        let more = p.s.flags & LEFTMOST == 0 && (is_dead(&p.s) || p.s.low >= b.lo);
        w.release(more.then_some(p.block));
        true
    }

    /// Positions at the first item in direction `dir` (+1 / -1).
    fn start(&mut self, tree: &Tree, dir: isize) {
        self.started = true;
        if let Some(w) = self.walk {
            match (&self.plan, dir > 0) {
                (Plan::Range { b, with_nulls }, true) => {
                    let (b, with_nulls) = (*b, *with_nulls);
                    if !self.load_shared(tree, &b, with_nulls, w) {
                        self.items.clear();
                    }
                    return;
                }
                (Plan::Probes(p), forward) => {
                    let p = p.clone();
                    let loaded = if forward {
                        self.compute_hints(tree, &p);
                        self.load_shared_probes(tree, &p, w)
                    } else {
                        self.load_shared_probes_back(tree, &p, w)
                    };
                    if !loaded {
                        self.items.clear();
                    }
                    return;
                }
                // Backward, without the NULLs that would come first.
                (Plan::Range { b, with_nulls: false }, false) => {
                    let b = *b;
                    if !self.load_shared_back(tree, &b, w) {
                        self.items.clear();
                    }
                    return;
                }
                // Not split: one participant takes it all, serially.
                _ if w.claim_all() => self.walk = None,
                _ => {
                    self.walk = None;
                    self.plan = Plan::Empty;
                }
            }
        }
        match self.plan.clone() {
            Plan::Empty => self.items.clear(),
            Plan::Nulls => self.start_nulls(tree, dir),
            Plan::Probes(p) => {
                self.compute_hints(tree, &p);
                let last = p.len() - 1;
                let g = if dir > 0 { self.probe_leaf(tree, &p, 0) } else { tree.find_last_leaf(p[last]) };
                self.load_leaf(g, dir, 0, last);
            }
            Plan::Range { b, with_nulls } => {
                if dir < 0 && with_nulls {
                    self.start_nulls(tree, dir);
                } else {
                    let g = if dir > 0 { tree.find_leaf(b.lo) } else { tree.find_last_leaf(b.hi) };
                    self.load_leaf(g, dir, 0, 0);
                }
            }
        }
    }

    /// Loads the next page of a probe plan in direction `dir` after the
    /// page `p`; false at the end. Forward, the next probe is the first at
    /// or above p's high key: equal keys may go on in the right sibling
    /// (walk right), larger ones start wherever their hint says. Backward
    /// likewise from p's low key. Only probes beyond p's fence are taken
    /// from the next page (entries moved by a split since p was copied are
    /// not returned twice).
    fn advance_probes(&mut self, tree: &Tree, p: PageInfo, probes: &[u64], dir: isize) -> bool {
        let last = probes.len() - 1;
        if dir > 0 {
            let Some((g, i)) = self.next_probe_page(tree, p, probes) else { return false };
            self.load_leaf(g, dir, i, last);
        } else {
            let Some((g, to)) = self.prev_probe_page(tree, p, probes) else { return false };
            self.load_leaf(g, dir, 0, to);
        }
        true
    }

    /// The page after `p` that a forward probe plan reads, and the first
    /// probe it takes; None at the end.
    fn next_probe_page(&self, tree: &Tree, p: PageInfo, probes: &[u64]) -> Option<(Shared, usize)> {
        if p.s.flags & RIGHTMOST != 0 {
            return None;
        }
        let i = if is_dead(&p.s) { lower_bound(probes, p.s.low) } else { lower_bound(probes, p.s.high) };
        if i >= probes.len() {
            return None;
        }
        let g = if is_dead(&p.s) || probes[i] == p.s.high { Shared::lock(tree.rel, p.s.right) } else { self.probe_leaf(tree, probes, i) };
        Some((g, i))
    }

    /// The page before `p` that a backward probe plan reads, and the last
    /// probe it takes; None at the end.
    fn prev_probe_page(&self, tree: &Tree, p: PageInfo, probes: &[u64]) -> Option<(Shared, usize)> {
        if p.s.flags & LEFTMOST != 0 {
            return None;
        }
        let j = if is_dead(&p.s) { upper_bound(probes, p.s.high) } else { upper_bound(probes, p.s.low) };
        if j == 0 {
            return None;
        }
        let g = if is_dead(&p.s) || probes[j - 1] == p.s.low {
            tree.leaf_left_of(p.block, p.s.left)?
        } else {
            tree.find_last_leaf(probes[j - 1])
        };
        Some((g, j - 1))
    }

    /// A parallel backward probe scan: as a backward range, the walk
    /// hands on the page a reader read, and the next reader finds the page
    /// before it from that page as it is now (a split of its left sibling
    /// since is seen; entries of that page split off to the right were
    /// returned with its copy).
    fn load_shared_probes_back(&mut self, tree: &Tree, probes: &[u64], w: Walk) -> bool {
        let (g, to) = match w.seize() {
            Seized::First => (tree.find_last_leaf(probes[probes.len() - 1]), probes.len() - 1),
            Seized::Page(block) => {
                let s = Shared::lock(tree.rel, block).page().special();
                match self.prev_probe_page(tree, PageInfo { block, s }, probes) {
                    Some(found) => found,
                    None => {
                        w.release(None);
                        return false;
                    }
                }
            }
            Seized::Done => return false,
        };
        self.load_leaf(g, -1, 0, to);
        w.release(Some(self.page.expect("a page was copied").block));
        true
    }

    /// A parallel forward probe scan (`= ANY`): copies the walk's next
    /// page for the probes from its low fence on (keys on a page are never
    /// below it, and entries only ever move right, to pages split off
    /// after the one a reader copied: none is returned twice) and hands on
    /// the page after it; false when the walk is over.
    fn load_shared_probes(&mut self, tree: &Tree, probes: &[u64], w: Walk) -> bool {
        let last = probes.len() - 1;
        let (g, from) = match w.seize() {
            Seized::First => (self.probe_leaf(tree, probes, 0), 0),
            Seized::Page(block) => {
                let g = Shared::lock(tree.rel, block);
                let s = g.page().special();
                (g, if s.flags & LEFTMOST != 0 { 0 } else { lower_bound(probes, s.low) })
            }
            Seized::Done => return false,
        };
        if from > last {
            w.release(None);
            return false;
        }
        self.load_leaf(g, 1, from, last);
        let p = self.page.expect("a page was copied");
        let next = self.next_probe_page(tree, p, probes).map(|(g, _)| g.block());
        w.release(next);
        true
    }

    /// Loads the next items in direction `dir`; false at the end.
    fn advance(&mut self, tree: &Tree, dir: isize) -> bool {
        match (self.phase, dir > 0) {
            (Phase::Nulls, true) => {
                if self.null_at + 1 >= self.null_chain.len() {
                    return false;
                }
                self.load_nulls(tree, self.null_at + 1, dir);
                return true;
            }
            (Phase::Nulls, false) if self.null_at > 0 => {
                self.load_nulls(tree, self.null_at - 1, dir);
                return true;
            }
            _ => {}
        }
        let plan = self.plan.clone();
        if let (Plan::Probes(probes), Some(p)) = (&plan, self.page) {
            if let Some(w) = self.walk {
                return if dir > 0 { self.load_shared_probes(tree, probes, w) } else { self.load_shared_probes_back(tree, probes, w) };
            }
            return self.advance_probes(tree, p, probes, dir);
        }
        let Plan::Range { b, with_nulls } = plan else { return false };
        let g = match (self.phase, dir > 0) {
            (Phase::Keys, true) if self.walk.is_some() => return self.load_shared(tree, &b, with_nulls, self.walk.expect("a walk")),
            (Phase::Keys, true) => match self.page {
                Some(p) if p.s.flags & RIGHTMOST == 0 && (is_dead(&p.s) || p.s.high <= b.hi) => Shared::lock(tree.rel, p.s.right),
                _ if with_nulls => {
                    self.start_nulls(tree, dir);
                    return true;
                }
                _ => return false,
            },
            (Phase::Keys, false) if self.walk.is_some() => return self.load_shared_back(tree, &b, self.walk.expect("a walk")),
            (Phase::Keys, false) => match self.page {
                Some(p) if p.s.flags & LEFTMOST == 0 && (is_dead(&p.s) || p.s.low >= b.lo) => match tree.leaf_left_of(p.block, p.s.left) {
                    Some(g) => g,
                    None => return false,
                },
                _ => return false,
            },
            (Phase::Nulls, _) => {
                self.phase = Phase::Keys;
                match self.page {
                    Some(p) => Shared::lock(tree.rel, p.block), // back to where the keys ended
                    None => tree.find_last_leaf(b.hi),
                }
            }
        };
        self.load_leaf(g, dir, 0, 0);
        true
    }

    fn next_item(&mut self, tree: &Tree, dir: isize) -> Option<(u64, Tid, bool)> {
        if !self.started {
            self.start(tree, dir);
        } else {
            self.pos += dir;
        }
        loop {
            if self.pos >= 0 && (self.pos as usize) < self.items.len() {
                let (k, t) = self.items[self.pos as usize];
                return Some((k, t, self.phase == Phase::Nulls));
            }
            if !self.advance(tree, dir) {
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
            null_chain: Vec::new(),
            null_at: 0,
            hints: None,
            last: (0, false),
            keep_pins: false,
            pins: Pins::default(),
            walk: None,
            nulls_after: false,
            root: None,
        }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        let plan = plan_of(scan, self.key_type);
        self.reset(plan);
        self.keep_pins = scan.xs_want_itup;
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, forward: bool) -> Option<Found> {
        if !self.started {
            self.walk = Walk::of(scan);
        }
        let tree = Tree::pinned(scan.indexRelation, self.root);
        let found = self.next_item(&tree, if forward { 1 } else { -1 });
        self.root = tree.pin();
        let (key, tid, is_null) = found?;
        self.last = (key, is_null);
        Some(Found { tid: tid_to(tid), distance: None })
    }

    #[inline]
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
        self.reset(self.plan.clone());
        let tree = Tree::pinned(scan.indexRelation, None);
        let tids = std::iter::from_fn(|| self.next_item(&tree, 1)).map(|(_, tid, _)| tid_to(tid));
        crate::am::common::scan::add_in_pieces(tids, add);
    }

    fn end(&mut self) {
        self.pins.release();
        self.items = Vec::new();
        self.plan = Plan::Empty;
    }
}
