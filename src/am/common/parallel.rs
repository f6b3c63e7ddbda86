//! Parallel index scans: what the participants (leader and workers) of
//! one scan share, in the parallel query's shared memory. As nbtree does
//! it: the walk over the leaves is one, each page read by one participant
//! while the others wait for its right link, and the items of the pages
//! taken are returned by whoever took them (Gather merges or concatenates
//! the streams). A scan whose plan cannot be split that way is claimed
//! whole by the first participant to start; the others return nothing.

use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering};

const NOT_STARTED: u64 = 0;
/// A participant is reading the next page.
const BUSY: u64 = 1;
const DONE: u64 = 2;
/// NEXT | block: the page to read next.
const NEXT: u64 = 1 << 32;
/// AGREED | value: a walk that shares a value (`agree`).
const AGREED: u64 = 1 << 63;

#[repr(C)]
pub struct SharedWalk {
    state: AtomicU64,
    cv: pg_sys::ConditionVariable,
}

/// What `Walk::seize` gave this participant.
pub enum Seized {
    /// The walk's first page: find it (and `release` its successor).
    First,
    /// This page (then `release` its successor).
    Page(u32),
    /// The walk is over.
    Done,
}

/// A participant's handle on the shared walk.
#[derive(Clone, Copy)]
pub struct Walk(*mut SharedWalk);

impl Walk {
    /// The scan's shared walk, if it is a parallel scan.
    pub fn of(scan: &pg_sys::IndexScanDescData) -> Option<Walk> {
        Walk::nth(scan, 0)
    }

    /// Walk `i` of a scan whose access method has several (`enable_walks`).
    pub fn nth(scan: &pg_sys::IndexScanDescData, i: usize) -> Option<Walk> {
        let p = scan.parallel_scan;
        // SAFETY: a parallel scan's area starts ps_offset bytes into its
        // descriptor (OffsetToPointer), laid out by `init`.
        (!p.is_null()).then(|| Walk(unsafe { (p as *mut u8).add((*p).ps_offset) as *mut SharedWalk }.wrapping_add(i)))
    }

    fn state(&self) -> &AtomicU64 {
        // SAFETY: shared memory that outlives the scan.
        unsafe { &(*self.0).state }
    }

    /// Takes the next page of the walk, waiting while another participant
    /// reads the one before.
    pub fn seize(&self) -> Seized {
        let seized = loop {
            let s = self.state().load(Ordering::Acquire);
            match s {
                DONE => break Seized::Done,
                BUSY => {
                    // SAFETY: the shared condition variable; the sleep
                    // checks for interrupts (an ERROR elsewhere in the
                    // query ends this participant too).
                    unsafe { pg_sys::ConditionVariableSleep(&mut (*self.0).cv, pg_sys::WaitEventIPC::WAIT_EVENT_BTREE_PAGE) };
                }
                _ if self.state().compare_exchange(s, BUSY, Ordering::AcqRel, Ordering::Acquire).is_ok() => {
                    break if s == NOT_STARTED { Seized::First } else { Seized::Page((s - NEXT) as u32) };
                }
                _ => {}
            }
        };
        // SAFETY: ends a sleep started above (a no-op otherwise).
        unsafe { pg_sys::ConditionVariableCancelSleep() };
        seized
    }

    /// Ends this participant's turn: `next` is the page after the one it
    /// read (None: the walk is over).
    pub fn release(&self, next: Option<u32>) {
        self.state().store(next.map_or(DONE, |b| NEXT + b as u64), Ordering::Release);
        // SAFETY: the shared condition variable.
        unsafe { pg_sys::ConditionVariableBroadcast(&mut (*self.0).cv) };
    }

    /// For a walk used to share one value (below 2^63) among the
    /// participants: the first to come sets it; true when `value` is it.
    pub fn agree(&self, value: u64) -> bool {
        let v = value | AGREED;
        match self.state().compare_exchange(NOT_STARTED, v, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(s) => s == v,
        }
    }

    /// For a scan that is not split: true for the one participant that
    /// takes it all.
    pub fn claim_all(&self) -> bool {
        self.state().compare_exchange(NOT_STARTED, DONE, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// amestimateparallelscan (PG 15 and 16 take no arguments), for `N` walks.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amestimateparallelscan<const N: usize>() -> pg_sys::Size {
    N * std::mem::size_of::<SharedWalk>()
}

/// aminitparallelscan.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn aminitparallelscan<const N: usize>(target: *mut std::ffi::c_void) {
    // SAFETY: `target` has amestimateparallelscan's bytes, MAXALIGNed
    // (SharedWalk's size is a multiple of its 8-byte alignment).
    unsafe {
        for i in 0..N {
            let w = (target as *mut SharedWalk).add(i);
            std::ptr::addr_of_mut!((*w).state).write(AtomicU64::new(NOT_STARTED));
            pg_sys::ConditionVariableInit(&mut (*w).cv);
        }
    }
}

/// amparallelrescan: the leader starts the walks again.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amparallelrescan<const N: usize>(scan: pg_sys::IndexScanDesc) {
    for i in 0..N {
        // SAFETY: a parallel scan (the executor calls this for no other).
        if let Some(w) = Walk::nth(unsafe { &*scan }, i) {
            w.state().store(NOT_STARTED, Ordering::Release);
        }
    }
}

/// Turns parallel scans on for an access method whose scan uses `Walk`.
pub fn enable(am: &mut pg_sys::IndexAmRoutine) {
    enable_walks::<1>(am);
}

/// The same for a scan of `N` structures, walk i for the i-th
/// (`Walk::nth`).
pub fn enable_walks<const N: usize>(am: &mut pg_sys::IndexAmRoutine) {
    am.amcanparallel = true;
    am.amestimateparallelscan = Some(amestimateparallelscan::<N>);
    am.aminitparallelscan = Some(aminitparallelscan::<N>);
    am.amparallelrescan = Some(amparallelrescan::<N>);
}
