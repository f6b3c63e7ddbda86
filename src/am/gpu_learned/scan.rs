//! Index scans: the run's cursor and the delta's scan (gpu_btree's, over
//! the same scan keys) merged into one order, both directions, index-only
//! and bitmap scans.
//!
//! The run's cursor turns the keys into ascending code intervals (one for
//! a range, one per probe of `= ANY`) and copies one data page's matching
//! live entries at a time: it enters an interval at its lower bound (the
//! model's prediction, from one GPU or CPU batch for many probes, checked
//! on the pages) and goes on to the next page while the interval goes on,
//! else jumps to the next interval's page. Index-only scans keep the pin
//! of that page while its entries are returned (VACUUM sets dead bits
//! under a cleanup lock).
//!
//! The merge keeps each side's next match (its head); a change of
//! direction drops the heads, so each side steps back from where it was.
//! Ties order the run before the delta, the same way both directions.

use super::page::*;
use super::run::{self, Run};
use crate::am::common::parallel::{Seized, Walk};
use crate::am::common::scan::{Found, IndexScan};
use crate::am::gpu_btree::keys;
use crate::am::gpu_btree::page::Shared;
use crate::am::gpu_btree::scan::{plan_of, Plan, ScanState as DeltaScan};
use crate::storage::{tid_from, tid_to, Pins, RecentPages, Tid};
use pgrx::pg_sys;
use std::sync::Arc;

/// A data page to load: its index, the page if already locked, a slot at
/// or before its first wanted entry, and the first interval that may have
/// entries on it if known (else searched for: at 10^8 rows a 128K-key
/// `= ANY` loads a page per key, and a search of its 2 MB of intervals
/// misses the cache at each of its last steps).
type PageAt = (usize, Option<Shared>, usize, Option<usize>);

/// Below this many probes, each is predicted on the CPU as it is reached.
const BATCH_MIN_PROBES: usize = 32;

#[derive(Default)]
struct RunCursor {
    /// Ascending, disjoint, inclusive code intervals.
    intervals: Vec<(u64, u64)>,
    /// Predicted positions of the intervals' starts (a batch), if made.
    hints: Option<Vec<u64>>,
    items: Vec<(u64, Tid)>,
    pos: isize,
    /// The data page the items came from, with its first and last keys.
    page: Option<(usize, u64, u64)>,
    /// The first interval starting after that page's last key.
    after: usize,
    started: bool,
    keep_pins: bool,
    pins: Pins,
    /// This backend's memory of the index's buffers, from the first page.
    recent: Option<RecentPages>,
    /// A parallel scan's walk of the run (its second; the delta's scan
    /// uses the first): a forward range takes its pages one at a time
    /// from it, anything else is taken whole by one participant.
    walk: Option<Walk>,
}

impl RunCursor {
    fn reset(&mut self, intervals: Vec<(u64, u64)>, keep_pins: bool) {
        self.pins.release();
        *self = RunCursor { intervals, keep_pins, pins: std::mem::take(&mut self.pins), ..RunCursor::default() };
    }

    fn recent(&mut self, rel: pg_sys::Relation) -> &mut RecentPages {
        self.recent.get_or_insert_with(|| RecentPages::of(rel))
    }

    /// The model's position for interval j's start: from one batch
    /// (GPU or all cores) when there are many intervals, else the CPU's.
    fn hint(&mut self, rel: pg_sys::Relation, run: &Run, j: usize) -> usize {
        if self.hints.is_none() && self.intervals.len() >= BATCH_MIN_PROBES {
            let starts: Vec<u64> = self.intervals.iter().map(|iv| iv.0).collect();
            self.hints = Some(run::predictions(rel, run, &starts, "gpu_learned = ANY"));
        }
        match &self.hints {
            Some(h) => h[j] as usize,
            None => run.predict(self.intervals[j].0),
        }
    }

    /// The data page of interval j's first position (where its keys are
    /// or would be), if any, with the page where the search left it
    /// locked and the position's slot there.
    fn first_page(&mut self, rel: pg_sys::Relation, run: &Run, j: usize) -> Option<PageAt> {
        let hint = self.hint(rel, run, j);
        if let Some(hints) = &self.hints {
            run.prefetch_ahead(self.recent.get_or_insert_with(|| RecentPages::of(rel)), hints, j);
        }
        let q = self.intervals[j].0;
        match run.lower_bound_page(self.recent(rel), q, hint) {
            (pos, Some((i, g))) => Some((i, Some(g), pos - run.first(i), Some(j))),
            (pos, None) => (pos < run.n()).then(|| {
                let i = run.page_of(pos);
                (i, None, pos - run.first(i), Some(j))
            }),
        }
    }

    /// The last position holding a key <= interval j's end, if any.
    fn last_of(&mut self, rel: pg_sys::Relation, run: &Run, j: usize) -> Option<usize> {
        let hi = self.intervals[j].1;
        let end = match hi.checked_add(1) {
            Some(h) => run.lower_bound(self.recent(rel), h, run.predict(h)),
            None => run.n(),
        };
        end.checked_sub(1)
    }

    /// Copies data page i's live entries inside the intervals (`page`:
    /// it, locked, if the caller has it; `at`: a slot at or before the
    /// first interval's entries, where the searches start).
    fn load(&mut self, rel: pg_sys::Relation, run: &Run, (i, page, mut at, from): PageAt, dir: isize) {
        let g = page.unwrap_or_else(|| run.page(self.recent(rel), i));
        let p = RunPage::new(g.page());
        self.items.clear();
        // The fences are the first and last keys (a page is never empty).
        let (first, last) = (p.s.low, p.s.high);
        let from = from.unwrap_or_else(|| self.intervals.partition_point(|iv| iv.1 < first));
        let mut after = from;
        for &(lo, hi) in self.intervals[from..].iter().take_while(|iv| iv.0 <= last) {
            let start = p.lower_bound_from(at, lo);
            at = p.upper_bound_from(start, hi);
            p.copy_live(start, at, &mut self.items);
            after += 1;
        }
        (self.page, self.after) = (Some((i, first, last)), after);
        self.pos = if dir > 0 { 0 } else { self.items.len() as isize - 1 };
        if self.keep_pins {
            self.pins.release();
            self.pins.keep(&g);
        }
    }

    /// A parallel forward range: loads the walk's next page and hands its
    /// successor on; false when the walk is over.
    fn advance_shared(&mut self, rel: pg_sys::Relation, run: &Run, w: Walk) -> bool {
        let page = match w.seize() {
            Seized::First => self.first_page(rel, run, 0),
            Seized::Page(i) => Some((i as usize, None, 0, None)),
            Seized::Done => return false,
        };
        let Some(page) = page else {
            w.release(None);
            return false;
        };
        let i = page.0;
        self.load(rel, run, page, 1);
        let last = self.page.expect("a page was loaded").2;
        w.release((i + 1 < run.pages() && self.intervals[0].1 >= last).then_some(i as u32 + 1));
        true
    }

    /// Loads the next page in direction `dir` holding keys of some
    /// interval; false at the end.
    fn advance(&mut self, rel: pg_sys::Relation, run: &Run, dir: isize) -> bool {
        if self.intervals.is_empty() || run.n() == 0 {
            // Nothing to split: let the others see the walk is over.
            if let Some(w) = self.walk.take() {
                w.claim_all();
            }
            return false;
        }
        if let Some(w) = self.walk {
            if dir > 0 && self.intervals.len() == 1 {
                return self.advance_shared(rel, run, w);
            }
            // Not split: one participant takes it all, serially.
            self.walk = None;
            if !w.claim_all() {
                self.intervals.clear();
                return false;
            }
        }
        let next = if dir > 0 {
            match self.page {
                None => self.first_page(rel, run, 0),
                Some((i, _, last)) => {
                    // Later pages hold keys >= this one's last: the
                    // intervals from the last one loaded on, if it goes on
                    // past `last`, else from the next.
                    let e = self.after;
                    let j = if e > 0 && self.intervals[e - 1].1 >= last { e - 1 } else { e };
                    match self.intervals.get(j) {
                        None => None,
                        Some(&(lo, _)) if lo <= last => Some(i + 1).filter(|&i| i < run.pages()).map(|i| (i, None, 0, Some(j))),
                        Some(_) => self.first_page(rel, run, j),
                    }
                }
            }
        } else {
            let page = match self.page {
                None => self.last_of(rel, run, self.intervals.len() - 1).map(|p| run.page_of(p)),
                Some((i, first, _)) => {
                    // Earlier pages hold keys <= this one's first.
                    let j = self.intervals.partition_point(|iv| iv.0 <= first);
                    match j.checked_sub(1).map(|j| (j, self.intervals[j])) {
                        None => None,
                        Some((_, (_, hi))) if hi >= first => i.checked_sub(1),
                        Some((j, _)) => self.last_of(rel, run, j).map(|p| run.page_of(p)),
                    }
                }
            };
            page.map(|i| (i, None, 0, None))
        };
        match next {
            Some(page) => {
                self.load(rel, run, page, dir);
                true
            }
            None => false,
        }
    }

    fn next(&mut self, rel: pg_sys::Relation, run: &Run, dir: isize) -> Option<(u64, Tid)> {
        if !self.started {
            self.started = true;
            self.pos = 0;
        } else {
            self.pos += dir;
        }
        loop {
            pgrx::check_for_interrupts!();
            if let Some(&item) = usize::try_from(self.pos).ok().and_then(|p| self.items.get(p)) {
                return Some(item);
            }
            if !self.advance(rel, run, dir) {
                // Just outside the items: a change of direction resumes at
                // the last one returned.
                self.pos = if dir > 0 { self.items.len() as isize } else { -1 };
                return None;
            }
        }
    }
}

fn merged_under_parallel_scan(index: pg_sys::Relation) -> ! {
    // SAFETY: rd_rel of an open relation.
    let name = unsafe { pgrx::name_data_to_str(&(*(*index).rd_rel).relname).to_string() };
    crate::error::raise(
        pgrx::prelude::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("gpu_learned index \"{name}\" was merged as a parallel scan of it started"),
        "Run the query again.",
    )
}

/// A match: whether it is a NULL, its key, its TID.
type Item = (bool, u64, Tid);

pub struct ScanState {
    key_type: pg_sys::Oid,
    index: pg_sys::Relation,
    run: Option<Arc<Run>>,
    cursor: RunCursor,
    delta: DeltaScan,
    /// Each side's next match in direction `dir` (run, delta), and
    /// whether it has none left.
    heads: [Option<Item>; 2],
    done: [bool; 2],
    dir: isize,
    last: Item,
    /// The plan reads no NULL: of the delta, only its key tree could match.
    keys_only: bool,
}

/// The run's code intervals for the scan keys' plan (the run holds no NULLs).
fn intervals(plan: &Plan) -> Vec<(u64, u64)> {
    match plan {
        Plan::Range { b, .. } => vec![(b.lo, b.hi)],
        Plan::Probes(p) => p.iter().map(|&c| (c, c)).collect(),
        Plan::Empty | Plan::Nulls => Vec::new(),
    }
}

impl ScanState {
    /// Starts both sides in direction `dir` on one generation: the run's,
    /// and the delta's first match read between two reads of the
    /// generation (a merge switches both at once; the pages of the one a
    /// scan started on stay while it can read them). The participants of
    /// a parallel scan agree on it first: one that comes after a merge
    /// takes no part (before it claims anything; the first participant,
    /// on the agreed generation, goes on until every walk is done).
    ///
    /// A serial key scan reads the metapage first: while the delta's key
    /// tree is clear (`delta_clear`) the run answers alone (a lookup then
    /// reads the metapage and one data page). Another serial scan starts
    /// from the run this backend cached without reading the metapage
    /// first: the generation read after the delta checks it too
    /// (generations only grow, so one equal to the cached run's after the
    /// delta was read was its all along).
    fn start(&mut self, scan: &pg_sys::IndexScanDescData, dir: isize) {
        let serial = scan.parallel_scan.is_null();
        let mut fresh = !serial || self.keys_only;
        loop {
            let (run, delta_has_keys) = match run::cached(self.index) {
                Some(run) if !fresh => (run, true),
                _ => run::current(self.index),
            };
            let generation = run.meta.generation;
            if Walk::nth(scan, 2).is_some_and(|w| !w.agree(generation)) {
                (self.heads, self.done, self.dir) = ([None, None], [true, true], dir);
                return;
            }
            self.run = Some(run);
            let skip_delta = serial && self.keys_only && !delta_has_keys;
            (self.heads, self.done, self.dir) = ([None, None], [false, skip_delta], dir);
            if skip_delta {
                return;
            }
            self.heads[1] = self.fetch(scan, 1, dir);
            self.done[1] = self.heads[1].is_none();
            if run::generation(self.index) == generation {
                return;
            }
            if !scan.parallel_scan.is_null() {
                // This participant has taken part of the delta's walk on
                // the other generation: nothing to do but fail.
                merged_under_parallel_scan(self.index);
            }
            self.delta.rescan(scan);
            fresh = true;
        }
    }

    fn fetch(&mut self, scan: &pg_sys::IndexScanDescData, side: usize, dir: isize) -> Option<Item> {
        if side == 0 {
            let run = self.run.get_or_insert_with(|| run::get(self.index)).clone();
            self.cursor.next(self.index, &run, dir).map(|(k, t)| (false, k, t))
        } else {
            let found = self.delta.next(scan, dir > 0)?;
            let (k, null) = self.delta.last_item();
            Some((null, k, tid_from(found.tid)))
        }
    }

    fn next_item(&mut self, scan: &pg_sys::IndexScanDescData, dir: isize) -> Option<Item> {
        if self.dir == 0 {
            self.start(scan, dir);
        } else if dir != self.dir {
            (self.heads, self.done, self.dir) = ([None, None], [false, false], dir);
        }
        for side in 0..2 {
            if self.heads[side].is_none() && !self.done[side] {
                self.heads[side] = self.fetch(scan, side, dir);
                self.done[side] = self.heads[side].is_none();
            }
        }
        let rank = |side: usize, h: &Item| (h.0, h.1, side);
        let side = match (&self.heads[0], &self.heads[1]) {
            (None, None) => return None,
            (Some(_), None) => 0,
            (None, Some(_)) => 1,
            (Some(a), Some(b)) => ((rank(0, a) < rank(1, b)) != (dir > 0)) as usize,
        };
        self.heads[side].take()
    }
}

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_learned";
    const INSTEAD: &'static str = "btree";

    fn begin(index: pg_sys::Relation, nkeys: usize, norderbys: usize) -> Self {
        ScanState {
            key_type: super::build::key_type(index),
            index,
            run: None,
            cursor: RunCursor::default(),
            delta: DeltaScan::begin(index, nkeys, norderbys),
            heads: [None, None],
            done: [false, false],
            dir: 0,
            last: (false, 0, 0),
            keys_only: false,
        }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        self.delta.rescan(scan);
        let plan = plan_of(scan, self.key_type);
        self.keys_only = matches!(plan, Plan::Empty | Plan::Probes(_) | Plan::Range { with_nulls: false, .. });
        self.cursor.reset(intervals(&plan), scan.xs_want_itup);
        (self.heads, self.done, self.dir, self.run) = ([None, None], [false, false], 0, None);
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, forward: bool) -> Option<Found> {
        if self.dir == 0 {
            self.cursor.walk = Walk::nth(scan, 1);
        }
        let item = self.next_item(scan, if forward { 1 } else { -1 })?;
        self.last = item;
        Some(Found { tid: tid_to(item.2), distance: None })
    }

    #[inline]
    fn next_buffered(&mut self, forward: bool) -> Option<(pg_sys::ItemPointerData, pg_sys::Datum)> {
        // The run's next copied entry, where it is the merge's next match:
        // the scan goes on in its direction, nothing of the run is peeked,
        // and the delta is done or its head ranks after the entry.
        let dir = if forward { 1 } else { -1 };
        if dir != self.dir || self.heads[0].is_some() {
            return None;
        }
        let pos = self.cursor.pos + dir;
        let &(k, t) = self.cursor.items.get(usize::try_from(pos).ok()?)?;
        let before_delta = match self.heads[1] {
            Some(h) => ((false, k, 0) < (h.0, h.1, 1)) == forward,
            None => self.done[1],
        };
        if !before_delta {
            return None;
        }
        self.cursor.pos = pos;
        self.last = (false, k, t);
        Some((tid_to(t), keys::decode(k, self.key_type)))
    }

    fn value(&self, _ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        // Every key type is passed by value.
        let (is_null, key, _) = self.last;
        (!is_null).then(|| keys::decode(key, self.key_type))
    }

    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        // The delta first, then the run read after it: of the same
        // generation, or of a later one that holds the entries of the
        // delta read (TIDs twice in a bitmap are one). The run alone while
        // the delta's key tree is clear.
        let (mut run, delta_has_keys) = run::current(self.index);
        if delta_has_keys || !self.keys_only {
            self.delta.all(scan, add);
            run = run::get(self.index);
        }
        let index = self.index;
        let tids = std::iter::from_fn(|| self.cursor.next(index, &run, 1)).map(|(_, tid)| tid_to(tid));
        crate::am::common::scan::add_in_pieces(tids, add);
    }

    fn end(&mut self) {
        self.cursor.pins.release();
        self.delta.end();
        self.run = None;
    }
}
