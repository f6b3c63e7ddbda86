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
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The workers' counters, in shared memory.
#[repr(C)]
#[derive(Default)]
pub(super) struct Shared {
    chunks: AtomicU64,
    probes: AtomicU64,
    matches: AtomicU64,
    fetches: AtomicU64,
    removed_by_join_filter: AtomicU64,
    gpu_batches: AtomicU64,
    extra_pieces: AtomicU64,
    index_ns: AtomicU64,
    heap_ns: AtomicU64,
    /// How many buffers follow.
    buffers: u64,
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
    pub(super) unsafe fn init<'a>(at: *mut std::ffi::c_void, buffers: &[pg_sys::Buffer]) -> &'a Shared {
        let shared = at.cast::<Shared>();
        // SAFETY: as the caller promises.
        unsafe {
            shared.write(Shared { buffers: buffers.len() as u64, ..Shared::default() });
            std::ptr::copy_nonoverlapping(buffers.as_ptr(), shared.add(1).cast(), buffers.len());
            &*shared
        }
    }

    /// The leader's remembered buffers of the inner table.
    pub(super) fn buffers(&self) -> &[pg_sys::Buffer] {
        // SAFETY: `init` wrote this many after the counters.
        unsafe { std::slice::from_raw_parts((self as *const Shared).add(1).cast(), self.buffers as usize) }
    }

    pub(super) fn add(&self, s: &Stats) {
        self.chunks.fetch_add(s.chunks, Relaxed);
        self.probes.fetch_add(s.probes, Relaxed);
        self.matches.fetch_add(s.matches, Relaxed);
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
            fetches: self.fetches + o.fetches,
            removed_by_join_filter: self.removed_by_join_filter + o.removed_by_join_filter,
            gpu_batches: self.gpu_batches + o.gpu_batches,
            extra_pieces: self.extra_pieces + o.extra_pieces,
            index_time: self.index_time + o.index_time,
            heap_time: self.heap_time + o.heap_time,
        }
    }
}

/// Whether this process is a parallel worker.
pub(super) fn in_worker() -> bool {
    // SAFETY: a process global.
    unsafe { pg_sys::ParallelWorkerNumber >= 0 }
}
