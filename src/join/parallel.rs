//! EXPLAIN ANALYZE's counters of a join run by several processes (a
//! partial path under a Gather, planned parallel-aware for this alone:
//! each participant still joins its own share of the outer side). Each
//! worker adds its counters to the node's share of the parallel query's
//! shared memory as it shuts down; the leader takes their sum as it shuts
//! down itself, before the Gather above frees that memory: children shut
//! down first, and a Gather has seen every worker finish (their shutdown
//! comes before their tuple queues close) unless a LIMIT stopped it early,
//! when the sum is what the workers had done by then.
//!
//! After the counters, the leader's memory of the inner table's buffers
//! (`RecentPages::seed`): a worker's heap fetches start with it.

use super::exec::Stats;
use super::handout::Handout;
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The workers' counters, in shared memory.
#[repr(C)]
pub(super) struct Shared {
    chunks: AtomicU64,
    probes: AtomicU64,
    matches: AtomicU64,
    counted: AtomicU64,
    fetches: AtomicU64,
    removed_by_join_filter: AtomicU64,
    gpu_batches: AtomicU64,
    extra_pieces: AtomicU64,
    index_ns: AtomicU64,
    heap_ns: AtomicU64,
    /// Outer rows every participant has read so far (reset for a rescan),
    /// and how many the plan expects in all, with its participants
    /// (`chunk_rows`).
    outer_read: AtomicU64,
    outer_expected: u64,
    participants: u64,
    /// How many buffers follow.
    buffers: u64,
    /// A fused call's matches, shared (`handout`).
    pub(super) handout: Handout,
}

impl Shared {
    /// With `buffers` remembered buffers.
    pub(super) fn size(buffers: usize) -> usize {
        std::mem::size_of::<Shared>() + buffers * std::mem::size_of::<pg_sys::Buffer>()
    }

    /// Zeroed counters and `buffers` at `at` (the leader, before the
    /// workers start).
    ///
    /// # Safety
    /// `at` is the node's share of the parallel query's memory,
    /// `size(buffers.len())` bytes, suitably aligned (shm_toc_allocate's
    /// chunks are).
    pub(super) unsafe fn init<'a>(at: *mut std::ffi::c_void, buffers: &[pg_sys::Buffer], workers: i32, rows_each: f64) -> &'a Shared {
        let shared = at.cast::<Shared>();
        let (participants, divisor) = participants(workers);
        let expected = (rows_each * divisor).max(0.0) as u64;
        // SAFETY: as the caller promises.
        unsafe {
            // (Zeroed counters are counters at zero.)
            shared.write(std::mem::zeroed());
            (*shared).outer_expected = expected;
            (*shared).participants = participants;
            (*shared).buffers = buffers.len() as u64;
            Handout::init(&raw mut (*shared).handout);
            std::ptr::copy_nonoverlapping(buffers.as_ptr(), shared.add(1).cast(), buffers.len());
            &*shared
        }
    }

    /// The leader's remembered buffers of the inner table.
    pub(super) fn buffers(&self) -> &[pg_sys::Buffer] {
        // SAFETY: `init` wrote this many after the counters.
        unsafe { std::slice::from_raw_parts((self as *const Shared).add(1).cast(), self.buffers as usize) }
    }

    /// The outer rows a participant reads next, at most `size`: where
    /// fewer are left than its share of two chunks each (a participant
    /// holds the chunk it joins and the one it read ahead), a share of
    /// what is left, so that the participants run out of work about
    /// together (a guided schedule). On the H200 host the leader of a
    /// parallel kNN join sat idle ~5 ms of 36 while each worker finished
    /// its two chunks of ~1,000 rows. Never below `least`. An estimate
    /// off the mark only sizes chunks.
    pub(super) fn chunk_rows(&self, size: usize, least: usize) -> usize {
        let left = self.outer_expected.saturating_sub(self.outer_read.load(Relaxed));
        size.min(((left / (2 * self.participants.max(1))) as usize).max(least))
    }

    /// Counts `rows` more outer rows read.
    pub(super) fn read(&self, rows: usize) {
        self.outer_read.fetch_add(rows as u64, Relaxed);
    }

    /// Before a rescan's workers start: no outer row read yet, no match
    /// handed out.
    ///
    /// # Safety
    /// `this` initialised by `init`; `dsa` the query's area.
    pub(super) unsafe fn rescan(this: *mut Shared, dsa: *mut pg_sys::dsa_area) {
        // SAFETY: the caller's contract.
        unsafe {
            (*this).outer_read.store(0, Relaxed);
            Handout::reset(&raw mut (*this).handout, dsa);
        }
    }

    /// The participants of the plan.
    pub(super) fn participants(&self) -> u64 {
        self.participants
    }

    pub(super) fn add(&self, s: &Stats) {
        self.chunks.fetch_add(s.chunks, Relaxed);
        self.probes.fetch_add(s.probes, Relaxed);
        self.matches.fetch_add(s.matches, Relaxed);
        self.counted.fetch_add(s.counted, Relaxed);
        self.fetches.fetch_add(s.fetches, Relaxed);
        self.removed_by_join_filter.fetch_add(s.removed_by_join_filter, Relaxed);
        self.gpu_batches.fetch_add(s.gpu_batches, Relaxed);
        self.extra_pieces.fetch_add(s.extra_pieces, Relaxed);
        self.index_ns.fetch_add(s.index_time.as_nanos() as u64, Relaxed);
        self.heap_ns.fetch_add(s.heap_time.as_nanos() as u64, Relaxed);
    }

    pub(super) fn sum(&self) -> Stats {
        Stats {
            chunks: self.chunks.load(Relaxed),
            probes: self.probes.load(Relaxed),
            matches: self.matches.load(Relaxed),
            counted: self.counted.load(Relaxed),
            fetches: self.fetches.load(Relaxed),
            removed_by_join_filter: self.removed_by_join_filter.load(Relaxed),
            gpu_batches: self.gpu_batches.load(Relaxed),
            extra_pieces: self.extra_pieces.load(Relaxed),
            index_time: Duration::from_nanos(self.index_ns.load(Relaxed)),
            heap_time: Duration::from_nanos(self.heap_ns.load(Relaxed)),
        }
    }
}

impl Stats {
    /// Both processes' counters.
    pub(super) fn plus(&self, o: &Stats) -> Stats {
        Stats {
            chunks: self.chunks + o.chunks,
            probes: self.probes + o.probes,
            matches: self.matches + o.matches,
            counted: self.counted + o.counted,
            fetches: self.fetches + o.fetches,
            removed_by_join_filter: self.removed_by_join_filter + o.removed_by_join_filter,
            gpu_batches: self.gpu_batches + o.gpu_batches,
            extra_pieces: self.extra_pieces + o.extra_pieces,
            index_time: self.index_time + o.index_time,
            heap_time: self.heap_time + o.heap_time,
        }
    }
}

/// The participants of a parallel plan of `workers` workers, and the
/// share of all rows PostgreSQL's planner gives each (its partial paths'
/// rows are the rows over this divisor: costsize.c's
/// get_parallel_divisor, the leader counted as 1 - 0.3 a worker).
fn participants(workers: i32) -> (u64, f64) {
    let workers = workers.max(0) as f64;
    // SAFETY: a GUC variable.
    let leader = unsafe { pg_sys::parallel_leader_participation };
    let share = if leader { (1.0 - 0.3 * workers).max(0.0) } else { 0.0 };
    (workers as u64 + leader as u64, workers + share)
}

/// Whether this process is a parallel worker.
pub(super) fn in_worker() -> bool {
    // SAFETY: a process global.
    unsafe { pg_sys::ParallelWorkerNumber >= 0 }
}
