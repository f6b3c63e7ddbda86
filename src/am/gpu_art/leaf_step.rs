//! The leaf step of a batch of equality probes: every entry equal to one
//! of the sorted distinct points, from the leaves the mirror's hints name.
//!
//! Only the backend's thread may pin and lock buffers, and a batch's
//! points are sparse (128K over 10^7 uuids: ~3 a leaf, so the copy of a
//! leaf, the 8 KB memcpy that streams it in, costs about what searching
//! it does). So this thread share-locks a group of the hinted leaves (in
//! key order, as every gpu_art reader locks leaves; pinned through
//! `RecentPages`), and the pool copies and searches each of them while
//! this thread locks the next group; the group is released when its
//! searches are back. On the H200 host, 128K probes into 10^7 uuids: the
//! function 145-201 -> 90-124 ms.
//!
//! Batch functions take every point's entries at once (`point_entries`);
//! an `= ANY` index scan takes them a few groups at a time, in key order
//! (`Ahead::fill`), keeping the pins of the leaves they came from while it
//! returns them when it is index-only.

use super::keys::KeyKind;
use super::mirror;
use super::page::*;
use super::scan::{ScanState, MIRROR_MIN_POINTS};
use super::tree::Tree;
use crate::storage::{PageRef, Pins};
use gpuindex_engine::art::ByteKeys;
use pgrx::pg_sys;
use rayon::prelude::*;
use std::ops::Range;

/// Leaves share-locked at once while the pool searches them (a backend
/// holds at most 200 LWLocks, and two groups are locked at a time).
pub const GROUP: usize = 64;

/// How far ahead of the point whose leaf is locked next the leaf of a
/// later one is prefetched.
const PREFETCH_POINTS: usize = 24;

/// A leaf locked for the pool: its guard, special area and points.
type Locked = (Shared, Special, Range<usize>);

/// (point, TID) of every entry equal to one of the sorted distinct
/// `points`, in no particular order; past `cap` entries, how many it had
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
        let mut left = groups;
        let from = out.len();
        // The group the pool searches while this thread locks the next one
        // (two groups locked at most).
        let mut searched: Vec<Locked> = Vec::new();
        loop {
            let pages: Vec<(usize, Special, Range<usize>)> =
                searched.iter().map(|(g, s, r)| (g.page().as_ptr() as usize, *s, r.clone())).collect();
            let mut found: Vec<Vec<(usize, Tid)>> = Vec::new();
            let mut next = Vec::with_capacity(GROUP);
            rayon::in_place_scope(|scope| {
                let found = &mut found;
                scope.spawn(move |_| {
                    // One vector per split, in key order (not one a page:
                    // each was freed by this thread, far from its maker).
                    *found = pages
                        .into_par_iter()
                        .with_min_len(4)
                        .fold(Vec::new, |mut v, (page, s, r)| {
                            search_locked(page, s, points, r, &mut v);
                            v
                        })
                        .collect();
                });
                if left > 0 {
                    left -= 1;
                    while self.next < points.len() && next.len() < GROUP {
                        // A few leaves ahead (points are ~3 a leaf when sparse).
                        self.hints.prefetch(self.next + PREFETCH_POINTS);
                        self.next = lock_leaf(&mut self.hints, points, self.next, &mut next, &mut rest);
                    }
                }
            });
            // The searches are back: their pages may go, last locked first
            // (LWLockRelease looks for a lock from the newest held on, and
            // moves down those after it).
            for (g, _, _) in searched.into_iter().rev() {
                match keep.as_deref_mut() {
                    Some(pins) => pins.keep_unlocked(g),
                    None => drop(g),
                }
            }
            out.extend(found.into_iter().flatten());
            if next.is_empty() || out.len() > cap {
                break;
            }
            searched = next;
        }
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
/// the same leaf: into `group` those below its high key on a leaf
/// without long keys, into `rest` the others. Returns the next point.
fn lock_leaf(hints: &mut mirror::Hints, points: &ByteKeys, i: usize, group: &mut Vec<Locked>, rest: &mut Vec<usize>) -> usize {
    let block = hints.block(i);
    let end = i + (i..points.len()).take_while(|&p| hints.block(p) == block).count();
    let g = hints.leaf(i);
    let n = Node::new(g.page());
    let below = match n.high().as_key() {
        Some(high) if n.s.flags & HAS_LONG == 0 => (i..end).take_while(|&p| Key::value(points.get(p)) < high).count(),
        _ => 0,
    };
    rest.extend(i + below..end);
    if below > 0 {
        let s = n.s;
        group.push((g, s, i..i + below));
    }
    end
}

/// (point, TID) of the entries of `points[r]` on a leaf share-locked by
/// the backend, without long keys, whose high key is above every one of
/// them: all their entries are on it.
fn search_locked(page: usize, s: Special, points: &ByteKeys, r: Range<usize>, found: &mut Vec<(usize, Tid)>) {
    thread_local! {
        static IMAGE: std::cell::RefCell<Box<[u8]>> = std::cell::RefCell::new(vec![0u8; pg_sys::BLCKSZ as usize].into_boxed_slice());
    }
    IMAGE.with_borrow_mut(|image| {
        // A copy, searched: one memcpy streams the page in, where a binary
        // search on it waits for each line it reads in turn.
        // SAFETY: the backend holds the page's share lock until this
        // returns (`point_entries`); `s` was read from it under the lock.
        image.copy_from_slice(unsafe { std::slice::from_raw_parts(page as *const u8, pg_sys::BLCKSZ as usize) });
        // SAFETY: a whole page's bytes, alive while the node is used.
        search_page(Node::checked(unsafe { PageRef::new(image.as_ptr()) }, s), points, r, found)
    })
}

fn search_page(n: Node, points: &ByteKeys, r: Range<usize>, found: &mut Vec<(usize, Tid)>) {
    let mut from = 0;
    for p in r {
        let q = Key::value(points.get(p));
        let mut at = from + n.entries_below(from, n.count(), q);
        while at < n.count() && n.stored(at).as_key() == Some(q) {
            found.push((p, n.entry(at).1));
            at += 1;
        }
        from = at;
    }
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
