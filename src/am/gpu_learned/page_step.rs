//! The page step of a large batch of equality probes on all cores: every
//! live run entry equal to one of the sorted distinct codes, in code order.
//!
//! At 10^8 rows a 128K-key batch puts about one probe on each data page it
//! reads, and the backend's thread spent most of a probe waiting for the
//! page's lines (its special area, the model's window, the TIDs) one after
//! another. Only that thread may pin and lock buffers, so it share-locks a
//! group of the pages the model predicts (pinned through `RecentPages`)
//! while the pool searches the group before, in place; a group is released
//! when its searches are back. A probe whose entries may lie beyond its
//! predicted page (the model's window crossed a page boundary, or the
//! probe is one of the page's fence keys) is found by the page walk
//! (`Run::collect_all_equal`) once its group is back, and merged in.
//!
//! Index scans take a few groups at a time (`Ahead::fill`), the batch
//! function and the join all of them at once.

use super::page::RunPage;
use super::run::Run;
use crate::am::gpu_btree::page::Shared;
use crate::storage::{PageRef, Pins, RecentPages, Tid};
use rayon::prelude::*;
use std::ops::Range;

/// Pages share-locked at once while the pool searches them (a backend
/// holds at most 200 LWLocks: two groups, and the page walk's one or two).
const GROUP: usize = 64;

/// Probes below which the page walk alone answers (its one page at a time
/// costs no pool hand-offs; gpu_art's `= ANY` found 1K keys slower
/// through the pool).
pub const AHEAD_MIN_PROBES: usize = 4096;

/// A data page locked for the pool: its guard, index, and the probes whose
/// predictions fall on it.
type Locked = (Shared, usize, Range<usize>);

/// What the pool found on one page: its entries in code order, and the
/// probes it left to the page walk.
type Searched = Result<(Vec<(u64, Tid)>, Vec<usize>), String>;

/// A forward walk over sorted distinct codes and their predicted positions.
#[derive(Default)]
pub struct Ahead {
    /// The next probe whose page is to be locked.
    next: usize,
}

impl Ahead {
    pub fn done(&self, codes: &[u64]) -> bool {
        self.next >= codes.len()
    }

    /// Appends to `out` every live (code, TID) of the next probes, from at
    /// most `groups` groups of pages, in code order. `keep`: the pins of
    /// the pages read are kept there (index-only scans: VACUUM cannot
    /// remove the entries while they are returned).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &mut self,
        run: &Run,
        recent: &mut RecentPages,
        codes: &[u64],
        hints: &[u64],
        groups: usize,
        mut keep: Option<&mut Pins>,
        out: &mut Vec<(u64, Tid)>,
    ) {
        if run.n() == 0 {
            self.next = codes.len();
            return;
        }
        crate::batch::ensure_cpu_pool();
        let mut left = groups;
        // The group the pool searches while this thread locks the next
        // one, and the probes of its own that go to the page walk.
        let (mut searched, mut searched_rest): (Vec<Locked>, Vec<usize>) = Default::default();
        loop {
            let pages: Vec<(usize, usize, Range<usize>)> =
                searched.iter().map(|(g, i, r)| (g.page().as_ptr() as usize, *i, r.clone())).collect();
            let mut found: Vec<Searched> = Vec::new();
            let (mut next, mut next_rest) = (Vec::with_capacity(GROUP), Vec::new());
            rayon::in_place_scope(|scope| {
                let found = &mut found;
                scope.spawn(move |_| {
                    *found =
                        pages.into_par_iter().with_min_len(4).map(|(page, i, r)| search_locked(run, page, i, codes, hints, r)).collect();
                });
                if left > 0 {
                    left -= 1;
                    while self.next < codes.len() && next.len() < GROUP {
                        self.next = lock_page(run, recent, hints, self.next, &mut next, &mut next_rest);
                    }
                }
            });
            if let Some(pins) = keep.as_deref_mut() {
                searched.iter().for_each(|(g, _, _)| pins.keep(g));
            }
            drop(searched);
            let mut pooled = Vec::new();
            for f in found {
                let (entries, walked) = f.unwrap_or_else(|what| super::page::learned_corrupted(what));
                pooled.extend(entries);
                searched_rest.extend(walked);
            }
            if searched_rest.is_empty() {
                out.extend(pooled);
            } else {
                searched_rest.sort_unstable();
                let mut walked = Vec::new();
                for p in searched_rest {
                    run.collect_all_equal(recent, &codes[p..p + 1], &hints[p..p + 1], keep.as_deref_mut(), &mut walked);
                }
                merge_by_code(pooled, walked, out);
            }
            if next.is_empty() && next_rest.is_empty() {
                break;
            }
            (searched, searched_rest) = (next, next_rest);
        }
        // Held locks hold interrupts off: answer them once released.
        pgrx::check_for_interrupts!();
    }
}

/// Every live (code, TID) of the sorted distinct `codes` (`hints`: their
/// predicted positions), in code order.
pub fn all_equal(run: &Run, recent: &mut RecentPages, codes: &[u64], hints: &[u64], out: &mut Vec<(u64, Tid)>) {
    if codes.len() < AHEAD_MIN_PROBES {
        run.collect_all_equal(recent, codes, hints, None, out);
    } else {
        Ahead::default().fill(run, recent, codes, hints, usize::MAX, None, out);
    }
}

/// Locks the data page predicted for probe i, for it and the probes after
/// it predicted on the same page (into `group`); a probe predicted before
/// the group's last page (the model's predictions may step back at a
/// segment's start) goes to `rest`. Returns the next probe.
fn lock_page(run: &Run, recent: &mut RecentPages, hints: &[u64], i: usize, group: &mut Vec<Locked>, rest: &mut Vec<usize>) -> usize {
    let last = run.n() - 1;
    let page = |p: usize| run.page_of((hints[p] as usize).min(last));
    let at = page(i);
    if group.last().is_some_and(|(_, j, _)| at <= *j) {
        rest.push(i);
        return i + 1;
    }
    let end = i + (i..hints.len()).take_while(|&p| page(p) == at).count();
    group.push((run.page(recent, at), at, i..end));
    end
}

/// The entries of `codes[r]` on data page `i`, share-locked by the backend
/// at address `page`, and the probes whose entries may lie beyond it
/// (every earlier page ends at or below the page's first key, every later
/// one starts at or above its last). No PostgreSQL call: a damaged page
/// comes back as the error to raise.
fn search_locked(run: &Run, page: usize, i: usize, codes: &[u64], hints: &[u64], r: Range<usize>) -> Searched {
    // SAFETY: the backend holds the page's share lock until this returns
    // (`Ahead::fill`).
    let p = RunPage::checked(unsafe { PageRef::new(page as *const u8) })?;
    let (first, last_page) = (run.first(i), i + 1 == run.pages());
    let mut entries = Vec::new();
    let mut rest = Vec::new();
    // Where the last probe's entries ended (the next one's search starts
    // there; the first one's at the model's window).
    let mut from = None;
    for j in r {
        let q = codes[j];
        if !((q > p.s.low || i == 0) && (q < p.s.high || last_page)) {
            rest.push(j);
            continue;
        }
        let start = match from {
            None => p.lower_bound_near(q, (hints[j] as usize).saturating_sub(first), run.pgm.eps),
            Some(f) => p.lower_bound_from(f, q),
        };
        let end = p.upper_bound_from(start, q);
        p.copy_live(start, end, &mut entries);
        from = Some(end);
    }
    Ok((entries, rest))
}

/// `a` and `b`, each in code order and with no code in both, merged into `out`.
fn merge_by_code(a: Vec<(u64, Tid)>, b: Vec<(u64, Tid)>, out: &mut Vec<(u64, Tid)>) {
    out.reserve(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.0 <= y.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return,
        };
        out.push(if take_a { a.next() } else { b.next() }.expect("peeked"));
    }
}
