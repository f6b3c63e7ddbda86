//! Leaves handed to the pool one at a time, while this thread (the only
//! one that may lock buffers) locks the next.
//!
//! Each leaf this thread share-locks goes into a small ring; the pool's
//! threads, spinning on it for the length of a batch, copy and search it
//! (`search_locked`), and the leaf is released as soon as its search is
//! back. Few leaves are held at once (`MAX_HELD`): with more than 8 pins
//! held, every pin and unpin is a lookup in PostgreSQL's private refcount
//! table, and every LWLockRelease scans the locks taken after the one it
//! releases. Locally (2 cores, 128K URL probes into 10^7 rows, 77K
//! leaves), this thread's locking and releasing took 28-35 ms with up to 128
//! leaves held (groups of 64, one rayon job a group, a wake-up each) and
//! 20-24 ms this way; the leaf step 57-68 ms, now 44-55.
//!
//! While it waits for a search, this thread takes a published leaf itself
//! (so the batch progresses however few of the pool's threads run).

use super::page::*;
use gpuindex_engine::art::ByteKeys;
use pgrx::pg_sys;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Leaves locked and not yet released at most (also the ring's size).
pub const MAX_HELD: usize = 16;

/// The pool's threads that search (with this one): enough to keep up
/// with this thread's locking, few enough not to take the cores (or the
/// hyperthread siblings) this thread runs on.
const SEARCHERS: usize = 8;

/// A value alone on its cache line (the counters are written by one
/// thread and read by the spinning others).
#[derive(Default)]
#[repr(align(64))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// TIDs of a leaf's entries its slot reports at most (with more, the
/// backend keeps the leaf's pin in an index-only scan).
const SLOT_TIDS: usize = 24;

/// One published leaf: its locked page and the points it answers; once
/// its search is back, how many entries it found and their TIDs.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    page: AtomicUsize,
    start: AtomicUsize,
    end: AtomicUsize,
    done: AtomicBool,
    found: AtomicUsize,
    tids: [AtomicU64; SLOT_TIDS],
}

pub struct Handoff<'a> {
    points: &'a ByteKeys,
    slots: [Slot; MAX_HELD],
    /// Leaves published, and claimed by a searcher, so far.
    published: Line<AtomicUsize>,
    claimed: Line<AtomicUsize>,
    /// No more leaves come (set at the end, and at an ERROR).
    finished: Line<AtomicBool>,
    /// Entries found so far.
    found: Line<AtomicUsize>,
    /// A search panicked (a page it could not read): its leaf still
    /// counts as done, so that nothing waits for it forever.
    failed: AtomicBool,
    /// Each pool thread's entries, in the order it searched its leaves.
    results: Mutex<Vec<Vec<(usize, Tid)>>>,
}

impl<'a> Handoff<'a> {
    pub fn new(points: &'a ByteKeys) -> Self {
        Handoff {
            points,
            slots: Default::default(),
            published: Line::default(),
            claimed: Line::default(),
            finished: Line::default(),
            found: Line::default(),
            failed: AtomicBool::new(false),
            results: Mutex::new(Vec::new()),
        }
    }

    /// Publishes leaf `page` (share-locked by this thread until `done`
    /// says its search is back) with its points `r`; returns its number.
    /// Fewer than `MAX_HELD` published leaves may be unconsumed.
    pub fn publish(&self, page: *const u8, r: Range<usize>) -> usize {
        let n = self.published.load(Ordering::Relaxed);
        let slot = &self.slots[n % MAX_HELD];
        slot.page.store(page as usize, Ordering::Relaxed);
        slot.start.store(r.start, Ordering::Relaxed);
        slot.end.store(r.end, Ordering::Relaxed);
        self.published.store(n + 1, Ordering::Release);
        n
    }

    /// Whether leaf n's search is back (its page may be released).
    pub fn done(&self, n: usize) -> bool {
        self.slots[n % MAX_HELD].done.load(Ordering::Acquire)
    }

    /// Puts the TIDs leaf n's search found (it is back) into `out`; false
    /// if there were more than a slot reports.
    pub fn tids(&self, n: usize, out: &mut Vec<Tid>) -> bool {
        let slot = &self.slots[n % MAX_HELD];
        let found = slot.found.load(Ordering::Relaxed);
        out.clear();
        out.extend(slot.tids.iter().take(found).map(|t| t.load(Ordering::Relaxed)));
        found <= SLOT_TIDS
    }

    /// Frees leaf n's slot for a later leaf (its search is back).
    pub fn consume(&self, n: usize) {
        self.slots[n % MAX_HELD].done.store(false, Ordering::Relaxed);
    }

    pub fn found(&self) -> usize {
        self.found.load(Ordering::Relaxed)
    }

    /// Searches one published leaf no one has claimed into `out`; false
    /// if there is none.
    pub fn work_one(&self, out: &mut Vec<(usize, Tid)>) -> bool {
        let n = self.claimed.load(Ordering::Relaxed);
        if n >= self.published.load(Ordering::Acquire)
            || self.claimed.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return false;
        }
        let slot = &self.slots[n % MAX_HELD];
        let r = slot.start.load(Ordering::Relaxed)..slot.end.load(Ordering::Relaxed);
        let before = out.len();
        let page = slot.page.load(Ordering::Relaxed);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| search_locked(page, self.points, r, out))).is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        let mine = &out[before..];
        for (t, e) in slot.tids.iter().zip(mine) {
            t.store(e.1, Ordering::Relaxed);
        }
        slot.found.store(mine.len(), Ordering::Relaxed);
        self.found.fetch_add(mine.len(), Ordering::Relaxed);
        slot.done.store(true, Ordering::Release);
        true
    }

    /// How many of the pool's threads to run `work` on.
    pub fn searchers() -> usize {
        rayon::current_num_threads().saturating_sub(1).clamp(1, SEARCHERS)
    }

    /// A pool thread's part: searches published leaves until `finish`.
    pub fn work(&self) {
        let mut out = Vec::new();
        let mut idle = 0u32;
        loop {
            if self.work_one(&mut out) {
                idle = 0;
            } else if self.finished.load(Ordering::Acquire)
                && self.claimed.load(Ordering::Relaxed) >= self.published.load(Ordering::Acquire)
            {
                break;
            } else {
                idle = backoff(idle);
            }
        }
        self.results.lock().unwrap_or_else(|e| e.into_inner()).push(out);
    }

    /// No more leaves: the pool's threads return.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// The entries found, with `mine` (this thread's), in point order.
    pub fn entries(self, mut mine: Vec<(usize, Tid)>) -> Vec<(usize, Tid)> {
        if self.failed.load(Ordering::Relaxed) {
            corrupted("a leaf's search failed (see the server log for the panic)".into());
        }
        for v in self.results.into_inner().unwrap_or_else(|e| e.into_inner()) {
            mine.extend(v);
        }
        // Stable: a point's entries stay in their leaf's order.
        mine.par_sort_by_key(|e| e.0);
        mine
    }
}

/// Spins a while, then yields (a pool thread may share a core with the
/// backend); returns the next count.
pub fn backoff(idle: u32) -> u32 {
    if idle < 4096 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    idle.saturating_add(1)
}

/// Finishes a handoff when dropped: at an ERROR too, so that the pool's
/// threads return and the scope ends.
pub struct FinishOnDrop<'h, 'a>(pub &'h Handoff<'a>);

impl Drop for FinishOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// (point, TID) of the entries of `points[r]` on a leaf share-locked by
/// the backend, without long keys, whose high key is above every one of
/// them: all their entries are on it.
fn search_locked(page: usize, points: &ByteKeys, r: Range<usize>, found: &mut Vec<(usize, Tid)>) {
    thread_local! {
        static IMAGE: std::cell::RefCell<Box<[u8]>> = std::cell::RefCell::new(vec![0u8; pg_sys::BLCKSZ as usize].into_boxed_slice());
    }
    IMAGE.with_borrow_mut(|image| {
        // A copy, searched: one memcpy streams the page in, where a binary
        // search on it waits for each line it reads in turn.
        // SAFETY: the backend holds the page's share lock until the search
        // is back (`done`).
        image.copy_from_slice(unsafe { std::slice::from_raw_parts(page as *const u8, pg_sys::BLCKSZ as usize) });
        // SAFETY: a whole page's bytes, alive while the node is used.
        let copy = unsafe { PageRef::new(image.as_ptr()) };
        // (Its special area as the backend checked it: copied under the lock.)
        let s = copy.special();
        search_page(Node::checked(copy, s), points, r, found)
    })
}

fn search_page(n: Node, points: &ByteKeys, r: Range<usize>, found: &mut Vec<(usize, Tid)>) {
    let mut from = 0;
    for p in r {
        // The point without the leaf's prefix (a point without it has no
        // entry here: below all of them, or above).
        let t = match n.strip(super::page::Key::value(points.get(p))) {
            Ok(t) => t,
            Err(std::cmp::Ordering::Less) => continue,
            Err(_) => return,
        };
        let mut at = from + n.tails_below(from, n.count(), t);
        while at < n.count() && n.tail(at) == Some(t) {
            found.push((p, n.entry(at).1));
            at += 1;
        }
        from = at;
    }
}
