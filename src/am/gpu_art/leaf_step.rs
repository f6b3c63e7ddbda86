//! The leaf step of a batch of equality probes: every entry equal to one
//! of the sorted distinct points, from the leaves the mirror's hints name.
//!
//! Only the backend's thread may pin and lock buffers, and a batch's
//! points are sparse (128K over 10^7 uuids: ~3 a leaf, so the copy of a
//! leaf, the 8 KB memcpy that streams it in, costs about what searching
//! it does). So this thread share-locks the hinted leaves one by one (in
//! key order, as every gpu_art reader locks leaves; pinned through
//! `RecentPages`) and hands each to the pool's searchers (`handoff`),
//! releasing it as soon as its search is back, a few leaves held at once.
//!
//! Batch functions take every point's entries at once (`point_entries`);
//! an `= ANY` index scan takes them a few groups at a time, in key order
//! (`Ahead::fill`), keeping the pins of the leaves they came from while it
//! returns them when it is index-only.

use super::handoff::{backoff, FinishOnDrop, Handoff, MAX_HELD};
use super::keys::KeyKind;
use super::mirror;
use super::page::*;
use super::scan::{ScanState, MIRROR_MIN_POINTS};
use super::tree::Tree;
use crate::storage::Pins;
use gpuindex_engine::art::ByteKeys;
use std::collections::VecDeque;
use std::ops::Range;

/// The unit of `Ahead::fill`'s `groups`: leaves a fill locks at most.
pub const GROUP: usize = 64;

/// How far ahead of the point whose leaf is locked next the leaf of a
/// later one is prefetched.
const PREFETCH_POINTS: usize = 24;

/// (point, TID) of every entry equal to one of the sorted distinct
/// `points`, in point order; past `cap` entries, how many it had
/// found when it stopped (soon after).
pub fn point_entries(tree: &Tree, kind: KeyKind, points: &ByteKeys, what: &'static str, cap: usize) -> Result<Vec<(usize, Tid)>, usize> {
    let mut out = Vec::with_capacity(points.len().min(cap));
    if points.len() < MIRROR_MIN_POINTS {
        walk(tree, kind, points, (0..points.len()).collect(), what, None, None, cap, &mut out);
    } else {
        Ahead::new(tree, points, what).fill(tree, kind, points, usize::MAX, None, cap, &mut out);
    }
    if out.len() > cap {
        return Err(out.len());
    }
    Ok(out)
}

/// A forward walk over sorted distinct points whose leaves the pool
/// searches: where it stands and the mirror's hints.
pub struct Ahead {
    pub hints: mirror::Hints,
    /// The next point whose leaf is to be locked.
    next: usize,
    what: &'static str,
}

impl Ahead {
    /// A walk over `points` (at least `MIRROR_MIN_POINTS`), its hints made
    /// in one mirror batch.
    pub fn new(tree: &Tree, points: &ByteKeys, what: &'static str) -> Ahead {
        Ahead { hints: mirror::Hints::of(tree, points, what), next: 0, what }
    }

    pub fn done(&self, points: &ByteKeys) -> bool {
        self.next >= points.len()
    }

    /// Appends to `out` (point, TID) of the entries of the next points,
    /// from at most `groups` groups of leaves, in key order (the entries
    /// of points left to the scan's walk merged in by point).
    /// `keep`: the pins of every leaf an entry came from are kept there
    /// (index-only scans: VACUUM cannot remove the entries meanwhile).
    /// Stops once `out` holds more than `cap` entries.
    ///
    /// A point goes to the scan's walk where its leaf has long keys (their
    /// chains are read through the relation) or it is not below the
    /// leaf's high key (a hint made before a split, or entries that may go
    /// on to the right: on uuids, a leaf in 80 ends with a probed key).
    pub fn fill(
        &mut self,
        tree: &Tree,
        kind: KeyKind,
        points: &ByteKeys,
        groups: usize,
        mut keep: Option<&mut Pins>,
        cap: usize,
        out: &mut Vec<(usize, Tid)>,
    ) {
        let mut rest = Vec::new();
        let from = out.len();
        let mut budget = groups.saturating_mul(GROUP);
        let h = Handoff::new(points);
        // Leaves locked, by publication number, oldest first (outside the
        // scope: at an ERROR the scope waits for the pool's searches
        // before these locks go).
        let mut held: VecDeque<(usize, Shared)> = VecDeque::with_capacity(MAX_HELD);
        let (mut mine, mut tids) = (Vec::new(), Vec::new());
        rayon::in_place_scope(|scope| {
            let _finish = FinishOnDrop(&h);
            for _ in 0..Handoff::searchers() {
                scope.spawn(|_| h.work());
            }
            let mut idle = 0;
            loop {
                let stop = budget == 0 || self.next >= points.len() || from + h.found() > cap;
                // Leaves whose searches are back go (all at the end); at
                // MAX_HELD this thread searches one itself or waits.
                loop {
                    let back = held.iter().take_while(|(n, _)| h.done(*n)).count();
                    if back > 0 {
                        // An index-only scan keeps the pins of leaves whose
                        // entries' heap pages are not all-visible (Pins).
                        let (mut kept, mut gone) = (Vec::new(), Vec::with_capacity(back));
                        for (n, g) in held.drain(..back) {
                            let pin =
                                keep.as_deref_mut().is_some_and(|pins| !(h.tids(n, &mut tids) && pins.all_visible(tids.iter().copied())));
                            h.consume(n);
                            if pin {
                                kept.push(g)
                            } else {
                                gone.push(g)
                            }
                        }
                        if let Some(pins) = keep.as_deref_mut() {
                            pins.keep_unlocked_all(kept);
                        }
                        crate::storage::release_all(gone);
                    }
                    if held.len() < MAX_HELD && (!stop || held.is_empty()) {
                        break;
                    }
                    if !h.work_one(&mut mine) {
                        idle = backoff(idle);
                    }
                }
                if stop {
                    break;
                }
                // A few leaves ahead (points are ~3 a leaf when sparse).
                self.hints.prefetch(self.next + PREFETCH_POINTS);
                let (next, leaf) = lock_leaf(&mut self.hints, points, self.next, &mut rest);
                self.next = next;
                budget -= 1;
                if let Some((g, r)) = leaf {
                    held.push_back((h.publish(g.page().as_ptr(), r), g));
                }
            }
        });
        out.extend(h.entries(mine));
        // Held locks hold interrupts off: the walk answers them once released.
        pgrx::check_for_interrupts!();
        if !rest.is_empty() && out.len() <= cap {
            let mut walked = Vec::new();
            walk(tree, kind, points, rest, self.what, Some(&self.hints), keep, cap - out.len(), &mut walked);
            merge_by_point(out, from, walked);
        }
    }
}

/// Merges `walked` into `out[from..]`, both in point order (and so in key
/// order: points are sorted), their points distinct.
fn merge_by_point(out: &mut Vec<(usize, Tid)>, from: usize, walked: Vec<(usize, Tid)>) {
    let searched = out.split_off(from);
    out.reserve(searched.len() + walked.len());
    let (mut a, mut b) = (searched.into_iter().peekable(), walked.into_iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        let e = if x.0 < y.0 { a.next() } else { b.next() };
        out.extend(e);
    }
    out.extend(a.chain(b));
}

/// Locks the leaf hinted for point i and the points after it hinted to
/// the same leaf: those below its high key on a leaf without long keys
/// come back with it (None: no such point, the leaf released), the
/// others go into `rest`. Returns the next point.
fn lock_leaf(hints: &mut mirror::Hints, points: &ByteKeys, i: usize, rest: &mut Vec<usize>) -> (usize, Option<(Shared, Range<usize>)>) {
    let block = hints.block(i);
    let end = i + (i..points.len()).take_while(|&p| hints.block(p) == block).count();
    let g = hints.leaf(i);
    let n = Node::new(g.page());
    let below = match n.high().as_key() {
        Some(high) if n.s.flags & HAS_LONG == 0 => (i..end).take_while(|&p| Key::value(points.get(p)) < high).count(),
        _ => 0,
    };
    rest.extend(i + below..end);
    (end, (below > 0).then(|| (g, i..i + below)))
}

/// (point, TID) of every entry equal to one of `points[which]` (ascending),
/// in key order, through the scan's walk over the leaves, from the
/// batch's hints where it has them (one mirror batch for all points: the
/// GPU service's too); `keep`: the pins of the leaves it read are kept
/// there. Appended to `out`, until it holds more than `cap`.
#[allow(clippy::too_many_arguments)]
fn walk(
    tree: &Tree,
    kind: KeyKind,
    points: &ByteKeys,
    which: Vec<usize>,
    what: &'static str,
    hints: Option<&mirror::Hints>,
    keep: Option<&mut Pins>,
    cap: usize,
    out: &mut Vec<(usize, Tid)>,
) {
    let mut some = ByteKeys::new();
    for &p in &which {
        some.push(points.get(p));
    }
    let mut scan = ScanState::over(kind, some, what);
    if keep.is_some() {
        scan.keep_every_pin();
    }
    if let Some(h) = hints {
        scan.set_hints(mirror::Hints::from_blocks(tree, which.iter().map(|&p| h.block(p)).collect()));
    }
    while out.len() <= cap {
        let Some((point, tid)) = scan.next_entry(tree) else { break };
        out.push((which[point], tid));
    }
    if let Some(pins) = keep {
        pins.append(scan.take_pins());
    }
}
