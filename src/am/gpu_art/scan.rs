//! Index scans (`common::scan::IndexScan`): both directions, index-only,
//! bitmaps.
//!
//! The scan keys become a list of disjoint key intervals in key order:
//! one for a range or a prefix (`^@`), one point per element of
//! `= ANY(array)`, the NULLs for IS NULL. A scan copies one leaf page at a
//! time (then drops its lock: safe for MVCC snapshots) and returns the
//! copy's entries inside the current interval. Forward, the next
//! interval reuses the copy when it starts inside the key range the copy
//! holds whole, so a sorted `= ANY` reads each leaf once; past the copy it
//! descends again. Index-only scans keep the pin of the page their
//! entries came from, so VACUUM cannot remove them meanwhile.
//!
//! Parallel scans (`common::parallel`, nbtree's scheme) split a forward
//! scan of one interval (a range, a prefix, a key, IS NULL) page by page
//! among the participants; any other scan is taken whole by the first of
//! them.

use super::keys::{self, KeyKind};
use super::leaf_step::{Ahead, GROUP};
use super::long;
use super::mirror;
use super::page::*;
use super::tree::Tree;
use crate::am::common::parallel::{Seized, Walk};
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::Pins;
use gpuindex_engine::art::keys::prefix_successor;
use gpuindex_engine::art::ByteKeys;

/// From this many `= ANY` elements, their leaves come from the mirror in
/// one batch (fewer are cheaper as descents).
pub(super) const MIRROR_MIN_POINTS: usize = 32;
use pgrx::pg_sys;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    Unbounded,
    Incl(OwnedKey),
    Excl(OwnedKey),
}

#[derive(Clone, Debug)]
pub struct Interval {
    pub lo: Bound,
    pub hi: Bound,
}

impl Interval {
    pub fn point(k: OwnedKey) -> Interval {
        Interval { lo: Bound::Incl(k.clone()), hi: Bound::Incl(k) }
    }
    /// Whether key k is above the lower bound.
    fn above_lo(&self, k: Key) -> bool {
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Incl(l) => k >= l.key(),
            Bound::Excl(l) => k > l.key(),
        }
    }
    /// Whether key k is below the upper bound.
    fn below_hi(&self, k: Key) -> bool {
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Incl(h) => k <= h.key(),
            Bound::Excl(h) => k < h.key(),
        }
    }
    /// `above_lo` of an entry of a locked page (a long key's chain read
    /// only if its prefix ties).
    fn stored_above_lo(&self, rel: pg_sys::Relation, k: Stored) -> bool {
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Incl(l) => long::compare(rel, k, l.key()).is_ge(),
            Bound::Excl(l) => long::compare(rel, k, l.key()).is_gt(),
        }
    }
    /// `below_hi` of an entry of a locked page.
    fn stored_below_hi(&self, rel: pg_sys::Relation, k: Stored) -> bool {
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Incl(h) => long::compare(rel, k, h.key()).is_le(),
            Bound::Excl(h) => long::compare(rel, k, h.key()).is_lt(),
        }
    }
    fn is_empty(&self) -> bool {
        match (&self.lo, &self.hi) {
            (Bound::Incl(l), Bound::Incl(h)) => l > h,
            (Bound::Incl(l) | Bound::Excl(l), Bound::Incl(h) | Bound::Excl(h)) => l >= h,
            _ => false,
        }
    }
}

/// The tighter of two lower bounds.
fn max_lo(a: Bound, b: Bound) -> Bound {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Incl(x) | Bound::Excl(x), Bound::Incl(y) | Bound::Excl(y)) => {
            if x > y || (x == y && matches!(a, Bound::Excl(_))) {
                a
            } else {
                b
            }
        }
    }
}

/// The tighter of two upper bounds.
fn min_hi(a: Bound, b: Bound) -> Bound {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Incl(x) | Bound::Excl(x), Bound::Incl(y) | Bound::Excl(y)) => {
            if x < y || (x == y && matches!(a, Bound::Excl(_))) {
                a
            } else {
                b
            }
        }
    }
}

fn value_key(bytes: Vec<u8>) -> OwnedKey {
    OwnedKey { rank: RANK_VALUE, bytes }
}

/// What a scan walks, in key order: key intervals, or the points of
/// `= ANY` elements, kept flat (one buffer for all of them: 128K
/// elements as two allocations each took a fifth of such a scan's time,
/// their frees another tenth).
pub enum Plan {
    Intervals(Vec<Interval>),
    Points(ByteKeys),
}

/// The intervals (or points) of the scan's keys, in key order.
pub fn plan_of(scan: &pg_sys::IndexScanDescData, kind: KeyKind) -> Plan {
    let mut iv = Interval { lo: Bound::Unbounded, hi: Bound::Unbounded };
    let (mut is_null, mut not_null) = (false, false);
    let mut points: Option<ByteKeys> = None;
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
                return Plan::Intervals(Vec::new()); // a comparison with NULL
            }
            continue;
        }
        not_null = true;
        if flags & pg_sys::SK_SEARCHARRAY != 0 {
            let (_, values) = keys::array_elements(k.sk_argument);
            let set = keys::encode_all(values.iter().map(|v| v.1), kind).sorted_unique();
            points = Some(match points {
                None => set,
                Some(prev) => prev.iter().filter(|p| set.position(p).is_some()).collect(),
            });
            continue;
        }
        let arg = || {
            let mut e = Vec::new();
            keys::encode(k.sk_argument, kind, &mut e);
            value_key(e)
        };
        let (lo, hi) = match k.sk_strategy {
            1 => (Bound::Unbounded, Bound::Excl(arg())),
            2 => (Bound::Unbounded, Bound::Incl(arg())),
            3 => {
                let a = arg();
                (Bound::Incl(a.clone()), Bound::Incl(a))
            }
            4 => (Bound::Incl(arg()), Bound::Unbounded),
            5 => (Bound::Excl(arg()), Bound::Unbounded),
            6 => {
                let p = keys::prefix_bytes(k.sk_argument);
                let hi = prefix_successor(&p).map_or(Bound::Unbounded, |s| Bound::Excl(value_key(s)));
                (Bound::Incl(value_key(p)), hi)
            }
            s => crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("gpu_art: unexpected strategy {s}"),
                "The operator class is damaged; recreate the extension.",
            ),
        };
        iv.lo = max_lo(iv.lo, lo);
        iv.hi = min_hi(iv.hi, hi);
    }
    if is_null {
        if not_null {
            return Plan::Intervals(Vec::new());
        }
        return Plan::Intervals(vec![Interval::point(Key::NULL.to_owned())]);
    }
    if not_null {
        iv.hi = min_hi(iv.hi, Bound::Excl(Key::NULL.to_owned()));
    }
    match points {
        Some(ps) => {
            let inside = |p: &[u8]| iv.above_lo(Key::value(p)) && iv.below_hi(Key::value(p));
            if ps.iter().all(inside) {
                return Plan::Points(ps);
            }
            Plan::Points(ps.iter().filter(|p| inside(p)).collect())
        }
        None if iv.is_empty() => Plan::Intervals(Vec::new()),
        None => Plan::Intervals(vec![iv]),
    }
}

/// One leaf page, copied under its lock (its bytes: entries are read from
/// the copy as they are needed, not parsed in advance; on a page that
/// does not hold every key whole in one piece, a prefixed leaf or one
/// with long keys, the window's keys made whole, long keys' chains read
/// while the page is locked).
struct PageCopy {
    image: Box<[u8]>,
    /// The window's whole keys, back to back, when the page needs them
    /// (else empty), and where each ends.
    whole: Vec<u8>,
    ends: Vec<u32>,
    block: u32,
    s: Special,
    high: OwnedKey,
    /// The slots the scan may return, [w0, w1): all of them, or those of
    /// the one interval of a single-interval scan.
    w0: usize,
    w1: usize,
    /// Every entry with a key in [from, high) was on the page when copied
    /// (`from` inclusive, or exclusive when the second field is false).
    from: (OwnedKey, bool),
}

thread_local! {
    /// The page buffer of the last copy dropped: a lookup's scan copies one
    /// leaf, and allocating (and zeroing) 8 KB each time was ~2% of it.
    static SPARE_IMAGE: std::cell::Cell<Option<Box<[u8]>>> = const { std::cell::Cell::new(None) };
}

impl Drop for PageCopy {
    fn drop(&mut self) {
        if !self.image.is_empty() {
            SPARE_IMAGE.set(Some(std::mem::take(&mut self.image)));
        }
    }
}

/// From this fraction of a page's entries up, a window is copied with
/// the page's one memcpy rather than entry by entry.
const COPY_WHOLE_FROM: usize = 2;

/// The first index in [from, to) failing `pred` (which holds for a
/// prefix of them), or `to`.
fn partition_by(from: usize, to: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (from, to);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `partition_by` by doubling steps from `from`, then a binary search:
/// few reads, all near `from`, when the answer is (a point's entries
/// usually end one or two past their first).
fn gallop_by(from: usize, to: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut step) = (from, 1);
    loop {
        let probe = lo + step - 1;
        if probe >= to {
            return partition_by(lo, to, pred);
        }
        if !pred(probe) {
            return partition_by(lo, probe, pred);
        }
        (lo, step) = (probe + 1, step * 2);
    }
}

/// `partition_by` over the entries of a locked page.
fn partition_locked(n: &Node, from: usize, to: usize, pred: impl Fn(Stored) -> bool) -> usize {
    partition_by(from, to, |j| pred(n.stored(j)))
}

impl PageCopy {
    /// Copies the leaf `g` of index `rel` (its window: the entries of
    /// `only`, when given), reusing `old`'s buffer.
    fn of(rel: pg_sys::Relation, g: &Shared, from: (OwnedKey, bool), old: Option<PageCopy>, only: Option<&Interval>) -> PageCopy {
        let (mut image, mut whole, mut ends) = match old {
            Some(mut c) => (std::mem::take(&mut c.image), std::mem::take(&mut c.whole), std::mem::take(&mut c.ends)),
            None => {
                let spare = SPARE_IMAGE.take().unwrap_or_else(|| vec![0u8; pg_sys::BLCKSZ as usize].into_boxed_slice());
                (spare, Vec::new(), Vec::new())
            }
        };
        let n = Node::new(g.page());
        let (w0, w1) = match only {
            Some(iv) => {
                // The pages inside a long range hold nothing else: one
                // comparison at either end instead of two searches.
                let last = n.count().checked_sub(1);
                let a = match last {
                    Some(_) if iv.stored_above_lo(rel, n.stored(0)) => 0,
                    _ => partition_locked(&n, 0, n.count(), |k| !iv.stored_above_lo(rel, k)),
                };
                let b = match last {
                    Some(l) if l >= a && iv.stored_below_hi(rel, n.stored(l)) => n.count(),
                    _ => gallop_by(a, n.count(), |j| iv.stored_below_hi(rel, n.stored(j))),
                };
                (a, b)
            }
            None => (0, n.count()),
        };
        if (w1 - w0) * COPY_WHOLE_FROM >= n.count() {
            // SAFETY: the locked page is BLCKSZ bytes.
            image.copy_from_slice(unsafe { std::slice::from_raw_parts(g.page().as_ptr(), pg_sys::BLCKSZ as usize) });
        } else {
            // A single lookup's entry or two, not the 8 KB page (a tenth
            // of a lookup's time, the search having read those lines).
            n.copy_entries(w0, w1, &mut image);
        }
        whole.clear();
        ends.clear();
        if n.s.flags & HAS_LONG != 0 || !n.prefix().is_empty() {
            for i in w0..w1 {
                let k = n.stored(i);
                if k.long {
                    whole.extend_from_slice(&long::resolve(rel, k).bytes);
                } else {
                    whole.extend_from_slice(k.head);
                    whole.extend_from_slice(k.bytes);
                }
                ends.push(whole.len() as u32);
            }
        }
        PageCopy { block: g.block(), s: n.s, high: long::resolve(rel, n.high()), w0, w1, from, image, whole, ends }
    }
    fn node(&self) -> Node<'_> {
        // SAFETY: a copy of a whole page, alive as long as self, checked
        // when copied.
        Node::checked(unsafe { PageRef::new(self.image.as_ptr()) }, self.s)
    }
    fn len(&self) -> usize {
        self.w1 - self.w0
    }
    /// Slot j of the page: its whole key and heap TID.
    fn slot(&self, j: usize) -> (Key<'_>, Tid) {
        let (k, tid) = self.node().entry(j);
        if self.ends.is_empty() {
            return (k.as_key().expect("a page of whole keys"), tid);
        }
        let i = j - self.w0;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        (Key { rank: k.rank, bytes: &self.whole[start..self.ends[i] as usize] }, tid)
    }
    /// Entry i of the window: its key and heap TID.
    fn entry(&self, i: usize) -> (Key<'_>, Tid) {
        self.slot(self.w0 + i)
    }
    fn key(&self, i: usize) -> Key<'_> {
        self.entry(i).0
    }
    /// The first slot in [from, to) of the window whose key fails `pred`
    /// (which holds for a prefix of the sorted entries), or `to`.
    fn partition(&self, from: usize, to: usize, pred: impl Fn(Key) -> bool) -> usize {
        partition_by(from, to, |j| pred(self.slot(j).0))
    }
    /// The window's entries of `iv`: [a, end).
    fn range(&self, iv: &Interval) -> (usize, usize) {
        let a = self.partition(self.w0, self.w1, |k| !iv.above_lo(k));
        (a - self.w0, self.partition(a, self.w1, |k| iv.below_hi(k)) - self.w0)
    }
    /// The window's entries of point interval `iv`, [a, end), searched
    /// from window entry `from` on by doubling steps (sorted points:
    /// the next one's entries are usually near the last one's; a point's
    /// entries are usually one).
    fn point_range(&self, iv: &Interval, from: usize) -> (usize, usize) {
        let a = self.gallop(self.w0 + from, self.w1, |k| !iv.above_lo(k));
        (a - self.w0, self.gallop(a, self.w1, |k| iv.below_hi(k)) - self.w0)
    }
    /// `partition` by doubling steps from `from`, then a binary search.
    fn gallop(&self, from: usize, to: usize, pred: impl Fn(Key) -> bool) -> usize {
        gallop_by(from, to, |j| pred(self.slot(j).0))
    }
    /// Whether a forward scan of `iv` goes on right of this page.
    fn continues_right(&self, iv: &Interval) -> bool {
        self.w1 == self.node().count() && self.s.flags & RIGHTMOST == 0 && iv.below_hi(self.high.key())
    }
    /// Whether a backward scan of `iv` goes on left of this page.
    fn continues_left(&self, iv: &Interval) -> bool {
        self.w0 == 0 && self.s.flags & LEFTMOST == 0 && (self.len() == 0 || iv.above_lo(self.key(0)))
    }
    /// Whether every entry of `iv` from its start up to this page's high
    /// key is in the copy.
    fn holds_start_of(&self, iv: &Interval) -> bool {
        let (from, incl) = (&self.from.0, self.from.1);
        let after_from = match &iv.lo {
            Bound::Unbounded => false,
            Bound::Incl(l) => l > from || (incl && l == from),
            Bound::Excl(l) => l >= from,
        };
        let lo_key = match &iv.lo {
            Bound::Incl(l) | Bound::Excl(l) => l.key(),
            Bound::Unbounded => Key::MIN,
        };
        let whole = self.w0 == 0 && self.w1 == self.node().count();
        after_from && whole && (self.s.flags & RIGHTMOST != 0 || lo_key <= self.high.key())
    }
}

/// Which leaves' pins a scan keeps (`Pins`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeepPins {
    No,
    /// The current page's (index-only scans).
    Current,
    /// Every page's (a batch walk whose entries are returned later).
    Every,
}

/// A forward `= ANY` index scan of many points: their entries found by
/// the pool a few groups of leaves ahead (`leaf_step::Ahead`), returned
/// in key order. The CPU pool then copies and searches the leaves while
/// the backend locks them and returns rows.
struct AheadScan {
    walk: Ahead,
    found: Vec<(usize, Tid)>,
    /// How many of `found` were returned.
    at: usize,
    /// Groups of leaves the next fill takes.
    groups: usize,
}

/// From this many points, an `= ANY` index scan takes its entries from
/// the pool (`AheadScan`); fewer went no faster (1K keys over 10^7 uuids,
/// locally: 1.2-1.6 ms walked, 1.5-2.0 through the pool; even at 4K).
const AHEAD_MIN_POINTS: usize = 4096;

/// Groups of 64 leaves an `= ANY` index scan takes per fill: one at
/// first (a few hundred entries, for a scan stopped early), twice as
/// many each fill up to this many. Each fill begins with the backend
/// locking while the pool waits and ends with the pool searching while
/// the backend waits: 4 a fill left a fifth of the rounds half idle.
const AHEAD_MAX_GROUPS: usize = 16;

/// The most groups an index-only scan's fill takes here: it keeps the pins
/// of a fill's leaves until their rows are returned, so at most a quarter
/// of this backend's share of the shared buffers (NBuffers / MaxBackends,
/// the share PostgreSQL 17's read streams keep to): one group at the
/// default 128MB, all 16 from about 4GB with the default connections.
fn ahead_max_groups() -> usize {
    // SAFETY: globals PostgreSQL sets at startup.
    let share = unsafe { pg_sys::NBuffers.max(0) as usize / pg_sys::MaxBackends.max(1) as usize };
    (share / 4 / GROUP).clamp(1, AHEAD_MAX_GROUPS)
}

pub struct ScanState {
    kind: KeyKind,
    /// The intervals; with `points`, one: the current point's.
    intervals: Vec<Interval>,
    points: Option<ByteKeys>,
    started: bool,
    /// The current interval.
    iv: usize,
    copy: Option<PageCopy>,
    /// The copy's entries in the current interval, [a, end), and the
    /// current one (the last returned; a - 1 or end before the first).
    a: usize,
    end: usize,
    cur: isize,
    keep: KeepPins,
    pins: Pins,
    /// Whether a forward `= ANY` walk of many points may use `ahead`
    /// (index scans; a batch's own walk does not).
    pooled: bool,
    ahead: Option<AheadScan>,
    /// Each interval's starting leaf from the mirror (many points), and
    /// the batch's name for `gpuindex_last_batch()`.
    hints: Option<mirror::Hints>,
    what: &'static str,
    /// A parallel scan's shared walk, while this participant takes its
    /// pages from it.
    walk: Option<Walk>,
}

impl ScanState {
    /// A forward walk over `points` (sorted, distinct) outside an index
    /// scan (batches).
    pub fn over(kind: KeyKind, points: ByteKeys, what: &'static str) -> ScanState {
        let mut s = ScanState { what, ..ScanState::empty(kind) };
        s.set_plan(Plan::Points(points));
        s
    }

    fn set_plan(&mut self, plan: Plan) {
        match plan {
            Plan::Intervals(ivs) => (self.intervals, self.points) = (ivs, None),
            Plan::Points(ps) => {
                let none = || Bound::Incl(Key::MIN.to_owned());
                (self.intervals, self.points) = (vec![Interval { lo: none(), hi: none() }], Some(ps));
            }
        }
    }

    /// How many intervals (or points) the scan walks.
    fn count(&self) -> usize {
        self.points.as_ref().map_or(self.intervals.len(), |p| p.len())
    }

    /// The current interval.
    fn interval(&self) -> &Interval {
        &self.intervals[if self.points.is_some() { 0 } else { self.iv }]
    }

    /// Makes interval i the current one (a point's written over the last
    /// one's, in the same buffers).
    fn set_iv(&mut self, i: usize) {
        self.iv = i;
        if let Some(ps) = &self.points {
            let p = ps.get(i);
            let iv = &mut self.intervals[0];
            for b in [&mut iv.lo, &mut iv.hi] {
                if let Bound::Incl(k) = b {
                    k.bytes.clear();
                    k.bytes.extend_from_slice(p);
                }
            }
        }
    }

    /// Leaf hints made by the caller for the points of `over`.
    pub fn set_hints(&mut self, hints: mirror::Hints) {
        self.hints = Some(hints);
    }

    /// Leaf hints for a forward walk over many points, in one batch.
    fn compute_hints(&mut self, tree: &Tree) {
        if let Some(ps) = &self.points {
            self.hints = Some(mirror::Hints::of(tree, ps, self.what));
        }
    }

    fn empty(kind: KeyKind) -> ScanState {
        ScanState {
            kind,
            intervals: Vec::new(),
            points: None,
            started: false,
            iv: 0,
            copy: None,
            a: 0,
            end: 0,
            cur: -1,
            keep: KeepPins::No,
            pins: Pins::default(),
            pooled: false,
            ahead: None,
            hints: None,
            what: "gpu_art = ANY",
            walk: None,
        }
    }

    /// The next entry forward: its interval's index and heap TID.
    pub fn next_entry(&mut self, tree: &Tree) -> Option<(usize, Tid)> {
        let i = self.step(tree, true)?;
        Some((self.iv, self.copy.as_ref().expect("a page").entry(i).1))
    }

    fn tree(&self, scan: &pg_sys::IndexScanDescData) -> Tree {
        Tree::new(scan.indexRelation)
    }

    fn take(&mut self, tree: &Tree, g: &Shared, from: (OwnedKey, bool)) {
        if self.keep != KeepPins::No {
            self.keep_pin(g);
        }
        let old = self.copy.take();
        let only = (self.count() == 1).then(|| self.interval());
        self.copy = Some(PageCopy::of(tree.rel, g, from, old, only));
    }

    /// Keeps `g`'s pin as `keep` says (out of line: a plain index scan's
    /// lookups keep none, and its code is theirs to skip).
    #[inline(never)]
    fn keep_pin(&mut self, g: &Shared) {
        if self.keep == KeepPins::Current {
            self.pins.release();
        }
        self.pins.keep(g);
    }

    /// The copy's entries of the current interval; a point's searched
    /// from window entry `from` on (every entry before it is below it).
    fn set_range(&mut self, forward: bool, from: usize) {
        let c = self.copy.as_ref().expect("a page");
        (self.a, self.end) = if self.count() == 1 {
            // The copy's window is the interval's entries (`take`).
            (0, c.len())
        } else if self.points.is_some() {
            c.point_range(self.interval(), from)
        } else {
            c.range(self.interval())
        };
        self.cur = if forward { self.a as isize - 1 } else { self.end as isize };
    }

    /// Positions on interval `iv` for a walk in direction `forward`.
    fn start(&mut self, tree: &Tree, forward: bool) {
        let iv = self.interval();
        // Forward from a copy that holds the interval's start: sorted
        // points lie past the last one's entries.
        let mut from = 0;
        if forward {
            if self.copy.as_ref().is_some_and(|c| c.holds_start_of(iv)) {
                from = self.end;
            } else {
                let lo = match &iv.lo {
                    Bound::Incl(l) | Bound::Excl(l) => l.clone(),
                    Bound::Unbounded => Key::MIN.to_owned(),
                };
                let g = match &mut self.hints {
                    Some(h) => tree.move_right_from(h.leaf(self.iv), lo.key()),
                    None => tree.find_leaf(lo.key()),
                };
                self.take(tree, &g, (lo, true));
            }
        } else {
            let g = match &iv.hi {
                Bound::Incl(h) => tree.find_last_leaf(h.key()),
                Bound::Excl(h) => tree.find_leaf(h.key()),
                Bound::Unbounded => tree.find_leaf(Key::INF),
            };
            self.take(tree, &g, (Key::INF.to_owned(), false));
        }
        self.set_range(forward, from);
    }

    /// A parallel scan of one interval forward: copies the walk's next
    /// page and hands its right link on; false when the walk is over.
    fn take_shared(&mut self, tree: &Tree, w: Walk) -> bool {
        let g = match w.seize() {
            Seized::First => {
                let lo = match &self.interval().lo {
                    Bound::Incl(l) | Bound::Excl(l) => l.clone(),
                    Bound::Unbounded => Key::MIN.to_owned(),
                };
                tree.find_leaf(lo.key())
            }
            Seized::Page(block) => Shared::lock(tree.rel, block),
            Seized::Done => return false,
        };
        // `from` serves only scans of several intervals.
        self.take(tree, &g, (Key::INF.to_owned(), false));
        let c = self.copy.as_ref().expect("a page");
        w.release(c.continues_right(self.interval()).then_some(c.s.right));
        self.set_range(true, 0);
        true
    }

    /// Positions a new walk in direction `forward` on its first page (or
    /// hands it to `ahead`); false when it has nothing to return.
    fn begin(&mut self, tree: &Tree, forward: bool) -> bool {
        self.started = true;
        if let Some(w) = self.walk {
            if !(forward && self.count() == 1) {
                // Not split: one participant takes it all, serially.
                self.walk = None;
                if !w.claim_all() {
                    self.set_plan(Plan::Intervals(Vec::new()));
                }
            }
        }
        if self.count() == 0 {
            return false;
        }
        let many = forward && self.walk.is_none() && self.hints.is_none() && self.count() >= MIRROR_MIN_POINTS;
        if many && self.pooled && self.count() >= AHEAD_MIN_POINTS {
            if let Some(ps) = &self.points {
                self.ahead = Some(AheadScan { walk: Ahead::new(tree, ps, self.what), found: Vec::new(), at: 0, groups: 1 });
                return true;
            }
        }
        self.set_iv(if forward { 0 } else { self.count() - 1 });
        if let Some(w) = self.walk {
            return self.take_shared(tree, w);
        }
        if many {
            self.compute_hints(tree);
        }
        self.start(tree, forward);
        true
    }

    /// The next match in direction `forward`: its heap TID.
    fn next_match(&mut self, tree: &Tree, forward: bool) -> Option<Tid> {
        if !self.started && !self.begin(tree, forward) {
            return None;
        }
        if self.ahead.is_some() {
            if forward {
                return self.next_ahead(tree);
            }
            self.leave_ahead(tree);
        }
        let i = self.step(tree, forward)?;
        Some(self.copy.as_ref().expect("a page").entry(i).1)
    }

    /// The next entry of `ahead`, its entries found a few groups of leaves
    /// at a time.
    fn next_ahead(&mut self, tree: &Tree) -> Option<Tid> {
        let a = self.ahead.as_mut().expect("an ahead walk");
        let points = self.points.as_ref().expect("points");
        if a.at == a.found.len() {
            // Every entry of the last fill was returned: their pins may go.
            self.pins.release();
            a.found.clear();
            a.at = 0;
            while a.found.is_empty() && !a.walk.done(points) {
                let keep = (self.keep != KeepPins::No).then_some(&mut self.pins);
                a.walk.fill(tree, self.kind, points, a.groups, keep, usize::MAX, &mut a.found);
                // Only an index-only scan keeps its fills' pins.
                let most = if self.keep == KeepPins::No { AHEAD_MAX_GROUPS } else { ahead_max_groups() };
                a.groups = (a.groups * 2).min(most);
            }
            if a.found.is_empty() {
                return None;
            }
            // (Leaves whose entries' heap pages were all-visible went during
            // the fill; with none of the rest left, the others go too.)
            self.pins.release_if_all_visible(a.found.iter().map(|e| e.1));
        }
        a.at += 1;
        Some(a.found[a.at - 1].1)
    }

    /// Leaves `ahead` for the page-by-page walk, positioned on the entry it
    /// returned last (or past the end), so that the next step backward
    /// returns the one before (a scrollable cursor fetching backward).
    fn leave_ahead(&mut self, tree: &Tree) {
        let a = self.ahead.take().expect("an ahead walk");
        self.hints = Some(a.walk.hints);
        self.pins.release();
        match a.at.checked_sub(1).map(|i| a.found[i]) {
            None => {
                self.set_iv(self.count() - 1);
                self.start(tree, false);
            }
            Some((point, tid)) => {
                self.set_iv(point);
                self.start(tree, false);
                // The same entries in the same (index) order, walked back
                // from the point's last one.
                while let Some(i) = self.step(tree, false) {
                    if self.copy.as_ref().expect("a page").entry(i).1 == tid {
                        break;
                    }
                }
            }
        }
    }

    /// The key of the match returned last.
    fn current_key(&self) -> Key<'_> {
        match &self.ahead {
            Some(a) => Key::value(self.points.as_ref().expect("points").get(a.found[a.at - 1].0)),
            None => self.copy.as_ref().expect("a page").key(self.cur as usize),
        }
    }

    /// Keeps the pins of every page the walk reads (a batch's walk whose
    /// entries are returned after it).
    pub fn keep_every_pin(&mut self) {
        self.keep = KeepPins::Every;
    }

    /// The pins kept.
    pub fn take_pins(&mut self) -> Pins {
        std::mem::take(&mut self.pins)
    }

    /// The next entry in direction `forward`, as its position in the copy.
    fn step(&mut self, tree: &Tree, forward: bool) -> Option<usize> {
        if !self.started && !self.begin(tree, forward) {
            return None;
        }
        debug_assert!(self.ahead.is_none(), "an ahead walk steps through next_match");
        loop {
            if forward {
                self.cur += 1;
                if (self.cur as usize) < self.end && self.cur >= self.a as isize {
                    return Some(self.cur as usize);
                }
                let c = self.copy.as_ref()?;
                let iv = self.interval();
                if let Some(w) = self.walk {
                    if !self.take_shared(tree, w) {
                        self.cur = self.end as isize;
                        return None;
                    }
                } else if self.end == c.len() && c.continues_right(iv) {
                    let from = (c.high.clone(), false);
                    let g = Shared::lock(tree.rel, c.s.right);
                    self.take(tree, &g, from);
                    self.set_range(true, 0);
                } else if self.iv + 1 < self.count() {
                    self.set_iv(self.iv + 1);
                    self.start(tree, true);
                } else {
                    self.cur = self.end as isize;
                    return None;
                }
            } else {
                self.cur -= 1;
                if self.cur >= self.a as isize && (self.cur as usize) < self.end {
                    return Some(self.cur as usize);
                }
                let c = self.copy.as_ref()?;
                let iv = self.interval();
                if self.a == 0 && c.continues_left(iv) {
                    let g = tree.leaf_left_of(c.block, c.s.left);
                    self.take(tree, &g, (Key::INF.to_owned(), false));
                    self.set_range(false, 0);
                } else if self.iv > 0 {
                    self.set_iv(self.iv - 1);
                    self.start(tree, false);
                } else {
                    self.cur = self.a as isize - 1;
                    return None;
                }
            }
        }
    }
}

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_art";
    const INSTEAD: &'static str = "btree";

    fn begin(index: pg_sys::Relation, _nkeys: usize, _norderbys: usize) -> Self {
        ScanState { pooled: true, ..ScanState::empty(keys::index_kind(index)) }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        self.pins.release();
        self.set_plan(plan_of(scan, self.kind));
        self.started = false;
        self.copy = None;
        self.hints = None;
        self.walk = None;
        self.ahead = None;
        self.keep = if scan.xs_want_itup { KeepPins::Current } else { KeepPins::No };
        if scan.xs_want_itup {
            self.pins = Pins::over(scan.heapRelation);
        }
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, forward: bool) -> Option<Found> {
        if !self.started {
            self.walk = Walk::of(scan);
        }
        let tree = self.tree(scan);
        let tid = self.next_match(&tree, forward)?;
        Some(Found { tid: tid_to(tid), distance: None })
    }

    /// The next entry of the current page's range, if it is not NULL.
    fn next_buffered(&mut self, forward: bool) -> Option<(pg_sys::ItemPointerData, pg_sys::Datum)> {
        if let Some(a) = &mut self.ahead {
            let &(point, tid) = a.found.get(a.at).filter(|_| forward)?;
            if self.points.as_ref().expect("points").get(point).len() > MAX_KEY {
                return None;
            }
            a.at += 1;
            return Some((tid_to(tid), pg_sys::Datum::from(0usize)));
        }
        let c = self.copy.as_ref()?;
        let i = if forward { self.cur + 1 } else { self.cur - 1 };
        if !self.started || i < self.a as isize || i >= self.end as isize {
            return None;
        }
        let (k, tid) = c.entry(i as usize);
        if k.rank != RANK_VALUE || k.bytes.len() > MAX_KEY {
            return None;
        }
        self.cur = i;
        Some((tid_to(tid), pg_sys::Datum::from(0usize)))
    }

    /// The end of a walk of one interval (a lookup, a range, a prefix)
    /// whose last page's entries were all returned.
    fn exhausted(&mut self, forward: bool) -> bool {
        let Some(c) = self.copy.as_ref() else { return false };
        let next = self.cur + 1;
        let simple = forward && self.started && self.ahead.is_none() && self.walk.is_none() && self.iv + 1 >= self.count();
        if !simple || (next >= self.a as isize && next < self.end as isize) || (self.end == c.len() && c.continues_right(self.interval())) {
            return false;
        }
        self.cur = self.end as isize;
        true
    }

    const MAX_VALUE_BYTES: usize = 4 + MAX_KEY;

    fn value_into(&self, out: &mut [u8]) -> usize {
        keys::decode_into(self.current_key().bytes, self.kind, out)
    }

    fn value(&self, _ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        if self.ahead.is_none() && self.copy.is_none() {
            return None;
        }
        let k = self.current_key();
        (k.rank == RANK_VALUE).then(|| keys::decode(k.bytes, self.kind))
    }

    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        let tree = self.tree(scan);
        self.started = false;
        self.copy = None;
        self.ahead = None;
        let tids = std::iter::from_fn(|| self.next_match(&tree, true).map(tid_to));
        crate::am::common::scan::add_in_pieces(tids, add);
    }

    fn end(&mut self) {
        self.pins.release();
        self.copy = None;
        self.ahead = None;
        self.set_plan(Plan::Intervals(Vec::new()));
    }
}
