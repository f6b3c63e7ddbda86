//! A fused call's matches shared among the participants of a parallel
//! plan (`path::add_shared_matches_path`). The first participant to need
//! matches searches the call (`fused.rs`), piece by piece
//! (`search::Pieces`), and hands each piece out through the parallel
//! query's DSA as it is found, in parts of growing size (`publish`);
//! every participant takes ranges of them, in
//! heap order (each fetches runs of neighbouring pages), the searcher too
//! once it has handed out the last. A piece's memory is freed by the
//! participant that copies its last range.
//!
//! No participant waits on another that may stop: the searcher hands out
//! every piece before it takes a match, so a LIMIT or a rescan that stops
//! the leader never leaves a worker waiting for a piece it would search.
//! What the pieces hold is bounded by `gpuindex.batch_work_mem`; pieces
//! beyond it the searcher keeps and joins alone, after the shared ones.
//!
//! Sharing the keys instead (each participant searching some) was tried
//! and lost: on Zipf keys the share holding the first rank held 1.3M of
//! the 2.9M matches.

use crate::storage::Tid;
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A match handed out: its TID and its position in the call's array.
pub(super) type Match = (Tid, i64);

/// The matches of the first part a piece is handed out in (1 MB).
const FIRST_PART: usize = 1 << 16;

/// In the node's share of the parallel query's memory.
#[repr(C)]
pub(super) struct Handout {
    /// A spinlock over `state` (held for a few loads and stores).
    lock: AtomicU32,
    /// Whether a participant has become the searcher.
    searcher: AtomicU32,
    /// Where takers wait for a piece.
    cv: UnsafeCell<pg_sys::ConditionVariable>,
    state: UnsafeCell<State>,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct State {
    /// The pieces with matches not yet taken, first to last (0: none).
    first: pg_sys::dsa_pointer,
    last: pg_sys::dsa_pointer,
    /// Of the first.
    taken: u64,
    /// Every piece to share is out.
    done: bool,
    /// The bytes handed out so far.
    bytes: u64,
    /// The index's count of finished bulk deletes when the search began
    /// (`bulk_deletes::finished`; `u64::MAX`: none known).
    bulk_deletes: u64,
}

/// A piece in the DSA, its matches after it.
#[repr(C)]
struct Piece {
    next: pg_sys::dsa_pointer,
    len: u64,
    copied: AtomicU64,
}

/// What `Handout::take` found.
pub(super) enum Taken {
    /// Matches appended (the search's count of bulk deletes with them).
    Some(Option<u64>),
    /// None yet: the search goes on.
    Wait,
    /// None left to share.
    Done,
}

impl Handout {
    /// Before the workers start.
    ///
    /// # Safety
    /// `this` in the node's share of the parallel query's memory.
    pub(super) unsafe fn init(this: *mut Handout) {
        let state = State { first: 0, last: 0, taken: 0, done: false, bytes: 0, bulk_deletes: u64::MAX };
        // SAFETY: the caller's contract.
        unsafe {
            this.write(Handout {
                lock: AtomicU32::new(0),
                searcher: AtomicU32::new(0),
                cv: UnsafeCell::new(std::mem::zeroed()),
                state: UnsafeCell::new(state),
            });
            pg_sys::ConditionVariableInit((*this).cv.get());
        }
    }

    /// Before a rescan's workers start (none running): the pieces a
    /// LIMIT left freed, and the search to do again.
    ///
    /// # Safety
    /// `this` initialised by `init`; `dsa` the query's area.
    pub(super) unsafe fn reset(this: *mut Handout, dsa: *mut pg_sys::dsa_area) {
        // SAFETY: the caller's contract: the pieces in the list are the
        // ones not freed.
        unsafe {
            let mut p = (*(*this).state.get()).first;
            while p != 0 && !dsa.is_null() {
                let next = (*piece(dsa, p)).next;
                pg_sys::dsa_free(dsa, p);
                p = next;
            }
            Handout::init(this);
        }
    }

    /// Runs `f` on the state under the lock.
    fn locked<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut spins = 0u32;
        while self.lock.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the lock is held.
        let out = f(unsafe { &mut *self.state.get() });
        self.lock.store(0, Ordering::Release);
        out
    }

    fn wake(&self) {
        // SAFETY: the shared condition variable.
        unsafe { pg_sys::ConditionVariableBroadcast(self.cv.get()) };
    }

    /// Whether this participant searches the call (the first to ask).
    pub(super) fn become_searcher(&self) -> bool {
        self.searcher.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The searcher: the index's count of bulk deletes as its search
    /// begins, for the takers' index-only fetches.
    pub(super) fn began(&self, bulk_deletes: Option<u64>) {
        self.locked(|s| s.bulk_deletes = bulk_deletes.unwrap_or(u64::MAX));
    }

    /// The searcher: hands out the matches of a piece of its search, each
    /// made a `Match` by `each`, in parts: the first of `FIRST_PART`
    /// matches, each next twice the last (takers start after a small copy,
    /// not after the whole piece's, and later ranges stay long); how many
    /// were handed out, fewer where the parts out would pass `budget`
    /// bytes.
    ///
    /// # Safety
    /// `dsa` the query's area.
    pub(super) unsafe fn publish<T: Sync>(
        &self,
        dsa: *mut pg_sys::dsa_area,
        matches: &[T],
        each: impl Fn(&T) -> Match + Sync,
        budget: u64,
    ) -> usize {
        let (mut out, mut part) = (0, FIRST_PART);
        while out < matches.len() {
            let part_matches = &matches[out..(out + part).min(matches.len())];
            let bytes = std::mem::size_of::<Piece>() + part_matches.len() * std::mem::size_of::<Match>();
            // (Only the searcher adds to `bytes`.)
            if self.locked(|s| s.bytes) + bytes as u64 > budget {
                break;
            }
            // SAFETY: the caller's contract; a new chunk of `bytes` (an
            // ERROR where the area cannot grow, which ends the query).
            let p = unsafe {
                let p = pg_sys::dsa_allocate_extended(dsa, bytes, pg_sys::DSA_ALLOC_HUGE as i32);
                let at = piece(dsa, p);
                at.write(Piece { next: 0, len: part_matches.len() as u64, copied: AtomicU64::new(0) });
                write_all(at.add(1).cast::<Match>(), part_matches, &each);
                p
            };
            self.locked(|s| {
                // SAFETY: `last`, when set, is in the list: not freed.
                match s.last {
                    0 => s.first = p,
                    last => unsafe { (*piece(dsa, last)).next = p },
                }
                s.last = p;
                s.bytes += bytes as u64;
            });
            self.wake();
            out += part_matches.len();
            part *= 2;
        }
        out
    }

    /// The searcher: every piece to share is out.
    pub(super) fn finish(&self) {
        self.locked(|s| s.done = true);
        self.wake();
    }

    /// Appends the next range of matches to `into`, `size(left)` of them
    /// where `left` are left in the first piece.
    ///
    /// # Safety
    /// `dsa` the query's area.
    pub(super) unsafe fn take(&self, dsa: *mut pg_sys::dsa_area, size: impl Fn(u64) -> u64, into: &mut Vec<Match>) -> Taken {
        let got = self.locked(|s| {
            if s.first == 0 {
                return Err(s.done);
            }
            let p = s.first;
            // SAFETY: a piece in the list, not freed.
            let len = unsafe { (*piece(dsa, p)).len };
            let left = len - s.taken;
            let n = size(left).clamp(1, left);
            let start = s.taken;
            s.taken += n;
            // A piece taken whole leaves the list at once (its memory may
            // be freed as soon as its ranges are copied).
            if s.taken == len {
                // SAFETY: as above.
                s.first = unsafe { (*piece(dsa, p)).next };
                s.taken = 0;
                if s.first == 0 {
                    s.last = 0;
                }
            }
            Ok((p, start, n, s.bulk_deletes))
        });
        let (p, start, n, bulk_deletes) = match got {
            Ok(got) => got,
            Err(done) => return if done { Taken::Done } else { Taken::Wait },
        };
        // SAFETY: the piece is kept until its ranges are copied, this one
        // among them.
        unsafe {
            let at = piece(dsa, p);
            let from = at.add(1).cast::<Match>().add(start as usize);
            into.extend_from_slice(std::slice::from_raw_parts(from, n as usize));
            if (*at).copied.fetch_add(n, Ordering::AcqRel) + n == (*at).len {
                pg_sys::dsa_free(dsa, p);
            }
        }
        Taken::Some((bulk_deletes != u64::MAX).then_some(bulk_deletes))
    }

    /// Sleeps until a piece is out or the last one (checking for
    /// interrupts: an ERROR elsewhere in the query ends this participant
    /// too). The first call after a check only prepares the sleep, so no
    /// wake-up is lost between the check and the sleep; `end_sleep` after
    /// the last.
    pub(super) fn sleep(&self) {
        // SAFETY: the shared condition variable.
        unsafe { pg_sys::ConditionVariableSleep(self.cv.get(), pg_sys::PG_WAIT_EXTENSION) };
    }

    pub(super) fn end_sleep() {
        // SAFETY: ends a sleep prepared by `sleep` (a no-op otherwise).
        unsafe { pg_sys::ConditionVariableCancelSleep() };
    }
}

/// Writes `each` of `from` at `to` on: millions on all cores (a serial
/// copy of a Zipf batch's last piece, 1.4M matches, took 10-16 ms of
/// the searcher's time on the H200 host).
///
/// # Safety
/// `to` has room for `from.len()` matches, mapped in this process.
unsafe fn write_all<T: Sync>(to: *mut Match, from: &[T], each: &(impl Fn(&T) -> Match + Sync)) {
    use rayon::prelude::*;
    const EACH: usize = 1 << 14;
    if from.len() < 4 * EACH {
        for (i, m) in from.iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { to.add(i).write(each(m)) };
        }
        return;
    }
    struct To(*mut Match);
    // SAFETY: each chunk writes its own range.
    unsafe impl Sync for To {}
    let to = To(to);
    crate::batch::ensure_cpu_pool();
    from.par_chunks(EACH).enumerate().for_each(|(c, chunk)| {
        let to = &to;
        for (i, m) in chunk.iter().enumerate() {
            // SAFETY: below `from.len()`, written once.
            unsafe { to.0.add(c * EACH + i).write(each(m)) };
        }
    });
}

/// A piece's header.
///
/// # Safety
/// `p` a piece allocated in `dsa`, not freed.
unsafe fn piece(dsa: *mut pg_sys::dsa_area, p: pg_sys::dsa_pointer) -> *mut Piece {
    // SAFETY: the caller's contract.
    unsafe { pg_sys::dsa_get_address(dsa, p).cast() }
}
