//! The leaf step of a batch: every entry of the ascending distinct probes,
//! from the leaf pages the mirror's hints name.
//!
//! Only the backend's thread may pin and lock PostgreSQL's buffers, but
//! in a large batch (a join's chunk: 10^6 probes over 2x10^4 leaves, ~50
//! a leaf) the searches, not the pins, are most of the step. So the
//! backend's thread walks the leaves in key order, and a leaf that holds
//! at least `COPY_MIN` of the probes is copied under its lock (one 8 KB
//! memcpy, which also streams its lines in at once) and searched on the
//! pool's threads, a round of copies at a time while the walk goes on;
//! the probes of sparser leaves are searched in place, as a lookup would,
//! except a key's long run (a hot key's thousands of leaves), whose leaves
//! are copied so too.
//! Leaves are pinned through the buffers this backend last found them in
//! (`RecentPages`), and the next few asked for from the CPU ahead.
//!
//! Locally (2 cores, 10^6 probes into 10^7 int8 keys, a join's chunk):
//! the step took 92-115 ms searching in place, 32-42 ms so.

use super::mirror::{blocks, hinted_leaf_by};
use super::page::*;
use super::tree::Tree;
use crate::storage::RecentPages;
use pgrx::pg_sys;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::ops::Range;

/// A leaf holding at least this many probes is copied for the pool.
const COPY_MIN: usize = 8;
/// Leaves copied for one search on the pool: 1 MiB of copies, still in
/// the caches when searched (smaller rounds cost more hand-offs), and a
/// block the engine's allocator keeps for the next batch (smaller ones
/// glibc maps afresh: a join's run faulted 6 MB more in).
const ROUND: usize = 128;
/// A key with at least this many entries on a leaf has that leaf copied
/// for the pool too (an 8 KB memcpy against ~3 ns an entry gathered in
/// place: a Zipf batch's hottest keys hold millions, a run page ~1,300),
/// unless a tally counts them there. On the H200 host a Zipf batch of
/// 5.7M entries: the walk 34-51 -> 16-25 ms, the whole step 48-70 -> 31-43.
const RUN_COPY_MIN: usize = 256;
/// A round is also sent once its copies may hold this many entries, so
/// that their vector (16 bytes an entry, a leaf's ~1,360 at most past it)
/// stays below the allocator's large blocks (1 MiB): a Zipf batch's
/// dozens of rounds of run leaves each took one, which pushed the batch's
/// big kept blocks out (38K page faults a query locally, against 3K).
const ROUND_ENTRIES: usize = 60_000;
const PAGE_WORDS: usize = pg_sys::BLCKSZ as usize / 8;

/// The first live leaf from `page` rightwards whose key range can hold q
/// (past dead pages, and pages split off since a hint was made); `from`
/// becomes 0 on a move.
pub fn live_leaf_for(rel: pg_sys::Relation, mut page: Shared, mut from: usize, q: u64) -> (Shared, usize) {
    loop {
        let s = page.page().special();
        if !is_dead(&s) && (s.flags & RIGHTMOST != 0 || q <= s.high) {
            return (page, from);
        }
        page = Shared::lock(rel, s.right);
        from = 0;
    }
}

/// The fewest entries of a key on one leaf that a tally counts: each page
/// it counts on is looked at in the map twice (during the search and once
/// it is over), where a caller checking the gathered entries looks once;
/// that pays for keys held by many rows, not for a uniform key's one
/// (locally, 119K uniform matches: 41.9 / 36.4 ms gathered, 43.8 / 42.2
/// with every key counted, 42.9 / 37.7 so; the H200 host's A/B could not
/// tell them apart from the order the builds ran in).
const KEY_MIN: usize = 32;

/// A counting walk's tally (`BatchSearch::count`): the entries of a probe
/// (`KEY_MIN` or more on a leaf) on heap pages that `visible` says are
/// all-visible are counted, as many times as the probe is asked (`asked`),
/// not returned.
pub struct Tally<'a> {
    pub visible: &'a mut dyn FnMut(u32) -> bool,
    pub asked: &'a [u32],
    pub counted: u64,
}

impl Tally<'_> {
    /// Counts or gathers (into `out`) entries `range` of a leaf or run
    /// page, found for probe `probe` (a build leaves a key's entries in
    /// TID order: a Zipf key's come dozens a heap page).
    pub(crate) fn take(&mut self, page: &PageKeys, range: Range<usize>, probe: usize, out: &mut Vec<(u64, Tid)>) {
        if range.len() < KEY_MIN {
            out.extend(page.entries(range.start, range.end));
            return;
        }
        let start = range.start;
        let asked = self.asked[probe];
        self.count_key(page.blocks(range.start, range.end), asked, |r| out.extend(page.entries(start + r.start, start + r.end)));
    }

    /// Counts what it can of `found` (the entries a copied leaf held for
    /// the ascending `probes`, the first of them probe `first`, in key
    /// order) and keeps the rest in `out`, in order.
    fn take_found(&mut self, found: &[(u64, Tid)], probes: &[u64], first: usize, out: &mut Vec<(u64, Tid)>) {
        let mut probe = 0;
        for key in found.chunk_by(|a, b| a.0 == b.0) {
            if key.len() < KEY_MIN {
                out.extend_from_slice(key);
                continue;
            }
            probe += probes[probe..].partition_point(|&p| p < key[0].0);
            let asked = self.asked[first + probe];
            self.count_key(key.iter().map(|e| (e.1 >> 16) as u32), asked, |r| out.extend_from_slice(&key[r]));
        }
    }

    /// Counts one key's entries (their heap `blocks`, in TID order) a run
    /// of one heap page at a time where `visible` says the page is
    /// all-visible, `asked` times each; hands the other runs (ranges of
    /// `blocks`) to `gather`.
    fn count_key(&mut self, blocks: impl Iterator<Item = u32>, asked: u32, mut gather: impl FnMut(Range<usize>)) {
        let (mut run, mut block) = (0, None);
        for (i, b) in (0..).zip(blocks.map(Some).chain([None])) {
            if b == block {
                continue;
            }
            if let Some(page) = block {
                if (self.visible)(page) {
                    self.counted += (i - run) as u64 * u64::from(asked);
                } else {
                    gather(run..i);
                }
            }
            (run, block) = (i, b);
        }
    }
}

/// Probes `probes` of one leaf, all below its high key (or it is the
/// rightmost): none of their runs goes on to the right page.
fn search_leaf(l: &Leaf, mut from: usize, probes: &[u64], out: &mut Vec<(u64, Tid)>) {
    for &q in probes {
        let start = l.lower_bound_from(from, q);
        from = l.run_end(start, q);
        out.extend(l.entries(start, from));
    }
}

/// What one stretch of the walk found: a copied leaf's probes, searched
/// later, or entries found in place (a range of `Round::in_place`).
enum Part {
    Copied { copy: usize, from: usize, probes: Range<usize> },
    InPlace(Range<usize>),
}

/// Up to `ROUND` copied leaves and what the walk found in place between
/// them, searched together on one of the pool's threads.
#[derive(Default)]
struct Round {
    copies: Vec<u64>,
    copied: usize,
    /// Entries the copies may hold at most (each past its `from`).
    bound: usize,
    /// Entries of the long runs copied (known at the walk).
    promised: usize,
    parts: Vec<Part>,
    in_place: Vec<(u64, Tid)>,
}

impl Round {
    /// Copies the locked leaf `page` (`count` entries), for `probes`
    /// searched from `from`.
    fn copy(&mut self, page: &Shared, count: usize, from: usize, probes: Range<usize>) {
        let n = self.copied;
        self.copies.resize(ROUND * PAGE_WORDS, 0);
        // SAFETY: the locked page is BLCKSZ bytes; the copy as many.
        unsafe {
            std::ptr::copy_nonoverlapping(page.page().as_ptr(), self.copies[n * PAGE_WORDS..].as_mut_ptr().cast(), pg_sys::BLCKSZ as usize)
        };
        self.parts.push(Part::Copied { copy: n, from, probes });
        self.copied += 1;
        self.bound += count - from;
    }

    /// Whether the round is to be searched now.
    fn full(&self) -> bool {
        self.copied == ROUND || self.bound >= ROUND_ENTRIES
    }

    /// Notes the entries the walk just put past `start` in place.
    fn found_in_place(&mut self, start: usize) {
        let end = self.in_place.len();
        match self.parts.last_mut() {
            Some(Part::InPlace(r)) if r.end == start => r.end = end,
            _ => self.parts.push(Part::InPlace(start..end)),
        }
    }

    /// The copied leaves' entries, in order, and where each copied part's
    /// end in them (the walk's own entries stay in `in_place`: `Rounds::
    /// finish` puts each part in its place, copying every entry once).
    fn search(&self, probes: &[u64]) -> Copied {
        let mut out = Copied { entries: Vec::with_capacity(self.bound), ends: Vec::with_capacity(self.copied) };
        for p in &self.parts {
            if let Part::Copied { copy, from, probes: r } = p {
                // SAFETY: a copy of a leaf this backend read under its
                // lock (and checked there: Leaf::new cannot fail here).
                let page = unsafe { PageRef::new(self.copies[copy * PAGE_WORDS..].as_ptr().cast()) };
                search_leaf(&Leaf::new(page), *from, &probes[r.clone()], &mut out.entries);
                out.ends.push(out.entries.len());
            }
        }
        out
    }

    /// The round's entries in the walk's order, a part at a time: a copied
    /// part's with the range of `probes` it was searched for.
    fn parts_found<'a>(&'a self, copied: &'a Copied) -> impl Iterator<Item = (&'a [(u64, Tid)], Option<Range<usize>>)> + 'a {
        let mut start = 0;
        let mut ends = copied.ends.iter();
        self.parts.iter().map(move |p| match p {
            Part::Copied { probes, .. } => {
                let end = *ends.next().expect("an end for each copied part");
                let found = &copied.entries[start..end];
                start = end;
                (found, Some(probes.clone()))
            }
            Part::InPlace(r) => (&self.in_place[r.clone()], None),
        })
    }

    /// The round's entries in the walk's order, after `out`, less those
    /// `tally` counts of the copied leaves' (the walk's own were counted or
    /// gathered as it found them).
    fn put_in_order(&self, copied: &Copied, probes: &[u64], tally: &mut Tally, out: &mut Vec<(u64, Tid)>) {
        for (found, searched) in self.parts_found(copied) {
            match searched {
                Some(r) => tally.take_found(found, &probes[r.clone()], r.start, out),
                None => out.extend_from_slice(found),
            }
        }
    }

    /// Writes the round's entries, in the walk's order, into `out` (as
    /// many places as it has entries).
    fn write_in_order(&self, copied: &Copied, out: &mut [std::mem::MaybeUninit<(u64, Tid)>]) {
        let mut at = 0;
        for (found, _) in self.parts_found(copied) {
            out[at..at + found.len()].write_copy_of_slice(found);
            at += found.len();
        }
    }

    /// The round's entries: `copied`'s and the walk's.
    fn len(&self, copied: &Copied) -> usize {
        copied.entries.len() + self.in_place.len()
    }
}

/// The entries a round's copied leaves hold, and where each copied part's
/// end in them.
#[derive(Default)]
struct Copied {
    entries: Vec<(u64, Tid)>,
    ends: Vec<usize>,
}

/// A searched round: its number, its copied leaves' entries (or the
/// search's panic), the round.
type Searched = (usize, std::thread::Result<Copied>, Round);

/// The rounds handed to the pool: at most two more than the pool has
/// threads at once (each holds its copies), their entries kept by number
/// until the walk ends.
struct Rounds {
    in_flight: usize,
    sent: usize,
    back: usize,
    /// Entries the rounds back have found.
    gathered: usize,
    /// Entries of the long runs copied in the rounds not back.
    promised: usize,
    found: Vec<(usize, Copied, Round)>,
    /// Copy buffers of the rounds back, for the next rounds.
    spare: Vec<Vec<u64>>,
    tx: std::sync::mpsc::Sender<Searched>,
    rx: std::sync::mpsc::Receiver<Searched>,
}

impl Rounds {
    /// Entries found so far, `round` (being filled) included.
    fn found(&self, round: &Round) -> usize {
        self.gathered + self.promised + round.promised + round.in_place.len()
    }

    fn take_back(&mut self, (n, found, mut round): Searched) {
        self.back += 1;
        self.promised -= round.promised;
        match found {
            Ok(f) => {
                self.gathered += round.len(&f);
                self.spare.push(std::mem::take(&mut round.copies));
                self.found.push((n, f, round))
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Hands `round` to the pool; returns an empty one to fill next.
    fn send<'s, 'p: 's>(&mut self, scope: &rayon::Scope<'s>, round: Round, probes: &'p [u64]) -> Round {
        let (n, tx) = (self.sent, self.tx.clone());
        self.promised += round.promised;
        scope.spawn(move |_| {
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| round.search(probes)));
            let _ = tx.send((n, found, round));
        });
        self.sent += 1;
        while let Ok(s) = self.rx.try_recv() {
            self.take_back(s);
        }
        if self.sent - self.back >= self.in_flight {
            let s = self.rx.recv().expect("a round's sender is kept here");
            self.take_back(s);
        }
        Round { copies: self.spare.pop().unwrap_or_default(), ..Round::default() }
    }

    /// Every round's entries, in the walk's order (less what `tally`
    /// counts of the copied leaves').
    fn finish(mut self, probes: &[u64], tally: Option<&mut Tally>) -> Vec<(u64, Tid)> {
        while self.back < self.sent {
            let s = self.rx.recv().expect("a round's sender is kept here");
            self.take_back(s);
        }
        self.found.sort_unstable_by_key(|f| f.0);
        if let [(_, copied, round)] = &mut self.found[..] {
            if copied.entries.is_empty() {
                // The walk found them all in place: in order already.
                return std::mem::take(&mut round.in_place);
            }
        }
        let total = self.found.iter().map(|(_, c, r)| r.len(c)).sum();
        let mut out = Vec::with_capacity(total);
        match tally {
            Some(t) => {
                for (_, copied, round) in &self.found {
                    round.put_in_order(copied, probes, t, &mut out);
                }
            }
            None => {
                // Each round's entries into their place, on all cores (a
                // Zipf batch's millions of entries, 16 bytes each).
                let mut rest = &mut out.spare_capacity_mut()[..total];
                let mut places = Vec::with_capacity(self.found.len());
                for (_, copied, round) in &self.found {
                    let (place, after) = rest.split_at_mut(round.len(copied));
                    places.push(place);
                    rest = after;
                }
                self.found.par_iter().zip(places).for_each(|((_, copied, round), place)| round.write_in_order(copied, place));
                // SAFETY: every place written above.
                unsafe { out.set_len(total) };
            }
        }
        out
    }
}

/// Leaves asked for ahead of the walk (their runs of equal hints).
const LEAVES_AHEAD: usize = 3;

/// The runs of equal hints ahead of the walk, each asked for from the CPU
/// before its turn: a dense leaf whole (it will be copied), a sparse one's
/// header and special area. Each hint is looked at once.
struct Ahead {
    /// Where the next run starts.
    cursor: usize,
    /// Starts of the runs asked for, past the walk's probe.
    starts: VecDeque<usize>,
}

impl Ahead {
    fn at(&mut self, i: usize, hints: &[u32], recent: &RecentPages) {
        while self.starts.front().is_some_and(|&s| s <= i) {
            self.starts.pop_front();
        }
        self.cursor = self.cursor.max(i);
        while self.starts.len() < LEAVES_AHEAD && self.cursor < hints.len() {
            let (start, b) = (self.cursor, hints[self.cursor]);
            self.cursor += hints[start..].iter().take_while(|&&h| h == b).count();
            let last = pg_sys::BLCKSZ as usize / 64 - 1;
            if self.cursor - start >= COPY_MIN {
                recent.prefetch_page(b, 0..=last);
            } else {
                recent.prefetch_page(b, [0, last].into_iter());
            }
            self.starts.push_back(start);
        }
    }
}

/// Every (key, TID) whose key is one of the ascending distinct `probes`,
/// in key order; `hints[i]` is the leaf block where probe i's search
/// starts (checked: a stale hint costs a descent or moves right). Where
/// they pass `cap` the walk stops soon after and says how many it had
/// found (a key held by 10^9 rows is not gathered to learn that a batch
/// is too big). With a `tally`, the entries on all-visible heap pages are
/// counted instead: those the walk finds in place as it finds them (a
/// key's run may span thousands of leaves: with a tally it is walked in
/// place), the copied leaves' once they are back.
pub fn probe_leaves(
    tree: &Tree,
    hints: &[u32],
    probes: &[u64],
    cap: usize,
    mut tally: Option<&mut Tally>,
) -> Result<Vec<(u64, Tid)>, usize> {
    let (rel, blocks) = (tree.rel, blocks(tree));
    let mut recent = RecentPages::of(rel);
    let mut ahead = Ahead { cursor: 0, starts: VecDeque::new() };
    let (tx, rx) = std::sync::mpsc::channel();
    let in_flight = rayon::current_num_threads() + 2;
    let mut rounds = Rounds { in_flight, sent: 0, back: 0, gathered: 0, promised: 0, found: Vec::new(), spare: Vec::new(), tx, rx };
    // Entries found when the walk stopped past `cap`.
    let mut over = None;
    // The walk runs on this thread (it pins and locks buffers); the
    // rounds' searches on the pool's, as the walk goes on.
    rayon::in_place_scope(|scope| {
        let mut round = Round::default();
        // The page the last probe stopped on, and the entry past its key.
        let mut current: Option<(Shared, usize)> = None;
        let mut i = 0;
        while i < probes.len() {
            if rounds.found(&round) > cap {
                over = Some(rounds.found(&round));
                return;
            }
            let q = probes[i];
            let stay = current.as_ref().is_some_and(|(g, _)| {
                let s = g.page().special();
                s.flags & RIGHTMOST != 0 || q <= s.high
            });
            let (page, from) = match current.take() {
                Some(at) if stay => at,
                old => {
                    drop(old);
                    ahead.at(i, hints, &recent);
                    (hinted_leaf_by(tree, hints[i], blocks, q, |b| recent.lock_shared(b)), 0)
                }
            };
            let (page, from) = live_leaf_for(rel, page, from, q);
            let l = Leaf::new(page.page());
            let below_high = |p: u64| l.rightmost() || p < l.s.high;
            if probes.get(i + COPY_MIN - 1).is_some_and(|&p| below_high(p)) {
                let end = i + COPY_MIN + probes[i + COPY_MIN..].partition_point(|&p| below_high(p));
                round.copy(&page, l.count(), from, i..end);
                // The next probe is at least the high key: from the start.
                current = Some((page, 0));
                i = end;
                if round.full() {
                    round = rounds.send(scope, round, probes);
                    pgrx::check_for_interrupts!();
                }
            } else {
                // q alone on this leaf: its run from here, maybe on
                // into the leaves to the right.
                let start = l.lower_bound_from(from, q);
                let pos = l.run_end(start, q);
                if tally.is_none() && pos - start >= RUN_COPY_MIN {
                    round.copy(&page, l.count(), start, i..i + 1);
                    round.promised += pos - start;
                } else {
                    let at = round.in_place.len();
                    match tally.as_deref_mut() {
                        Some(t) => t.take(&l, start..pos, i, &mut round.in_place),
                        None => round.in_place.extend(l.entries(start, pos)),
                    }
                    round.found_in_place(at);
                }
                // Equal keys go on to the right page only if this
                // page's high key is q (its lock taken before this one's
                // goes, as a B-link walk right does).
                if pos < l.count() || l.rightmost() || l.s.high != q {
                    current = Some((page, pos));
                    i += 1;
                } else {
                    let right = recent.lock_shared(l.s.right);
                    drop(page);
                    current = Some(live_leaf_for(rel, right, 0, q));
                }
                if round.full() {
                    round = rounds.send(scope, round, probes);
                    pgrx::check_for_interrupts!();
                }
            }
        }
        if !round.parts.is_empty() {
            rounds.send(scope, round, probes);
        }
    });
    let found = rounds.finish(probes, tally);
    match over {
        Some(n) => Err(n),
        None if found.len() > cap => Err(found.len()),
        None => Ok(found),
    }
}
