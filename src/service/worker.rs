//! The service's background worker: it owns the only CUDA context and one
//! copy of each index image, takes the backends' requests in posting
//! order, closes an epoch when its requests hold
//! `gpuindex.epoch_max_queries` queries or `gpuindex.epoch_us` after the
//! first (on the GPU also at once when it holds whole tiles of 32
//! queries, taking no more than whole tiles once it has more than one:
//! `epoch_limit`), and runs one batch per image for the whole epoch. Up
//! to two epochs are in flight: one searching, the next queued behind it,
//! each answered as soon as its search is done.
//!
//! Only the worker's own thread calls PostgreSQL (latches, logging,
//! configuration); the batches run on the rayon pool or the GPU over
//! plain memory. An ERROR or panic ends the worker with exit code 1 and
//! the postmaster starts it again a second later; the new incarnation
//! answers what the old one held as lost (`ST_RESTARTED`).

use super::epoch::{self, Epoch, Searcher};
use super::images::{self, Store};
use super::segment::Segment;
use super::shmem::{self, *};
use crate::guc;
use gpuindex_engine::executor::Policy;
use gpuindex_engine::gpu::{self, Gpu};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Registers the worker (from _PG_init under shared_preload_libraries).
pub fn register() {
    BackgroundWorkerBuilder::new("gpuindex service")
        .set_type("gpuindex service")
        .set_library("gpuindex")
        .set_function("gpuindex_service_main")
        .enable_shmem_access(None)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// A request taken from its slot.
pub(super) struct Job {
    pub slot: usize,
    pub generation: u32,
    pub head: Head,
    pub queries: Vec<f32>,
    pub path: String,
    /// The requester's segment (a batch larger than a slot), mapped until
    /// the answer is written.
    pub segment: Option<Segment>,
}

/// The worker's entry point (the postmaster finds it by name).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn gpuindex_service_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let sh = shmem::shared().expect("the worker runs only where gpuindex was preloaded");
    recover(sh);
    let incarnation = sh.incarnation.fetch_add(1, AcqRel) + 1;
    images::clear_shipped();
    crate::batch::ensure_cpu_pool();
    let gpu = choose_gpu();
    // SAFETY: a static callback; process globals of this worker.
    unsafe {
        pg_sys::before_shmem_exit(Some(worker_exit), pg_sys::Datum::from(0));
        sh.worker_latch.store(pg_sys::MyLatch as usize, Release);
        sh.worker_pid.store(pg_sys::MyProcPid, Release);
    }
    sh.device.store(if gpu.is_some() { DEVICE_GPU } else { DEVICE_CPU }, Release);
    log!(
        "gpuindex service started (incarnation {incarnation}) on the {}",
        gpu.as_ref().map_or("CPU".to_string(), |g| format!("GPU {}", g.info().name))
    );
    let mut store = Store::default();
    let mut searcher = Searcher::start(gpu.clone());
    // Epochs whose searches run or wait on the searcher, oldest first: at
    // most `QUEUED` (the next one's tiles queue behind the one running,
    // so the GPU never waits for the worker).
    let mut flight: VecDeque<Epoch> = VecDeque::new();
    let mut running = true;
    while running {
        let max = guc::EPOCH_MAX_QUERIES.get().max(1) as usize;
        let mut released = false;
        for (database, index) in sh.take_dropped() {
            released |= store.release(database, index);
        }
        if released {
            sh.publish_images(&store.rows());
        }
        let tile = if gpu.is_some() { GPU_TILE } else { 1 };
        let mut jobs = Vec::new();
        answer_done(sh, &mut store, &mut searcher, &mut flight);
        let mut full = take(sh, &mut jobs, max, tile) || whole_tiles(&jobs, tile);
        if jobs.is_empty() {
            // Nothing new: answer the oldest epoch in flight, else sleep.
            match flight.pop_front() {
                Some(e) => epoch::finish(sh, &mut store, &mut searcher, e),
                None => running = wait(1000),
            }
            continue;
        }
        // The epoch opened with its first request. It closes when full
        // (whole tiles: waiting could only add a tile that is mostly
        // empty, or grow what it left) while fewer than `QUEUED` are in
        // flight; when the searcher is idle and either its window is over
        // or an epoch was in flight (the GPU must not wait for company
        // that its own answers will bring); or at `max`.
        let window = Duration::from_micros(guc::EPOCH_US.get().max(0) as u64);
        let opened = Instant::now();
        let had_flight = !flight.is_empty();
        loop {
            // Answers go out as soon as they are found: their backends
            // post their next queries into this epoch.
            answer_done(sh, &mut store, &mut searcher, &mut flight);
            let idle = flight.is_empty();
            if !running || (full && flight.len() < QUEUED) || queries(&jobs) >= max || (idle && (had_flight || opened.elapsed() >= window))
            {
                break;
            }
            let left = window.saturating_sub(opened.elapsed());
            if left >= Duration::from_millis(2) && idle {
                // Backends set the latch when they post.
                running = wait(left.as_millis() as i64 - 1);
            } else {
                // (Polled: WaitLatch counts milliseconds.)
                let step = Duration::from_micros(20);
                std::thread::sleep(if left.is_zero() { step } else { left.min(step) });
            }
            full = take(sh, &mut jobs, max, tile) || whole_tiles(&jobs, tile);
        }
        let mut next = epoch::prepare(sh, &mut store, gpu.as_deref(), jobs);
        // (One with no search, loads only, is answered at once.)
        if searcher.send(&mut next) {
            flight.push_back(next);
        } else {
            epoch::finish(sh, &mut store, &mut searcher, next);
        }
    }
    // The epochs in hand are answered before the worker goes.
    while let Some(e) = flight.pop_front() {
        epoch::finish(sh, &mut store, &mut searcher, e);
    }
    // Exit code 1: the postmaster restarts the worker (an operator's
    // SIGTERM restarts the service; a shutdown does not).
    // SAFETY: ends this process.
    unsafe { pg_sys::proc_exit(1) };
}

/// The GPU under `gpuindex.device` auto or gpu, when one is usable.
fn choose_gpu() -> Option<Arc<Gpu>> {
    if guc::policy() == Policy::Cpu {
        return None;
    }
    match gpu::gpu() {
        Ok(g) => Some(g),
        Err(e) => {
            if guc::policy() == Policy::Gpu {
                warning!("gpuindex service: gpuindex.device = gpu, but no GPU is usable ({e}); serving on the CPU");
            }
            None
        }
    }
}

/// Sleeps on the latch up to `ms`; false once SIGTERM arrived.
fn wait(ms: i64) -> bool {
    // SAFETY: the worker's own latch; a PostgreSQL wait as any backend's.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms.max(0) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pg_sys::check_for_interrupts!();
    if BackgroundWorker::sighup_received() {
        // SAFETY: the worker's main thread, between epochs.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
    !BackgroundWorker::sigterm_received()
}

/// The queries an epoch takes when `requests` are at hand (taken or
/// posted; each holds one query or more): up to `max`, and past one
/// `tile` a whole number of tiles. The GPU's bounded brute force runs
/// queries in tiles of 32, and a tile costs the same however full: an
/// epoch of 40 took as long as one of 64 (1.0 ms at 1M x 128 on the
/// H100, 0.6 ms for 32), and under steady load epochs of 40 were the
/// rule. The requests left over are the newest; they open the next
/// epoch, which starts at once.
fn epoch_limit(requests: usize, tile: usize, max: usize) -> usize {
    if tile > 1 && requests > tile {
        (requests / tile * tile).min(max)
    } else {
        max
    }
}

/// Whether `jobs` fill whole tiles of more than one query.
fn whole_tiles(jobs: &[Job], tile: usize) -> bool {
    let n = queries(jobs);
    tile > 1 && n >= tile && n.is_multiple_of(tile)
}

/// Answers the epochs in flight whose searches are done, oldest first.
fn answer_done(sh: &Shared, store: &mut Store, searcher: &mut Searcher, flight: &mut VecDeque<Epoch>) {
    while !flight.is_empty() && searcher.ready() {
        let e = flight.pop_front().expect("an epoch in flight");
        epoch::finish(sh, store, searcher, e);
    }
}

/// Epochs in flight at most: one searching, one queued behind it.
const QUEUED: usize = 2;

/// The queries of a GPU epoch's tile (gts.cu's FQ).
const GPU_TILE: usize = 32;

fn queries(jobs: &[Job]) -> usize {
    jobs.iter().map(|j| j.head.queries as usize).sum()
}

/// Takes posted requests, oldest first, until they hold `max` queries
/// (the first one whatever its size) or, past one `tile`, a whole number
/// of tiles (`epoch_limit`); true when it left posted requests for the
/// next epoch.
fn take(sh: &Shared, jobs: &mut Vec<Job>, max: usize, tile: usize) -> bool {
    let mut posted: Vec<(u64, usize)> = sh
        .slots()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state.load(Acquire) == POSTED)
        .map(|(i, s)| (s.post_seq.load(Relaxed), i))
        .collect();
    posted.sort_unstable();
    let limit = epoch_limit(jobs.len() + posted.len(), tile, max);
    for (_, i) in posted {
        if !jobs.is_empty() && queries(jobs) >= limit {
            return true;
        }
        let slot = &sh.slots()[i];
        if slot.state.compare_exchange(POSTED, TAKEN, AcqRel, Acquire).is_err() {
            continue; // withdrawn meanwhile
        }
        // SAFETY: TAKEN: the worker owns the slot's contents until it
        // answers (a withdrawing backend only moves the state).
        let (head, data) = unsafe { (*slot.head.get(), &*slot.data.get()) };
        let bytes = (head.bytes as usize).min(SLOT_DATA);
        let mut job =
            Job { slot: i, generation: slot.generation.load(Acquire), head, queries: Vec::new(), path: String::new(), segment: None };
        let floats = |b: &[u8]| b.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect();
        match head.op {
            OP_KNN | OP_RANGE if head.segment != 0 => {
                // None: the requester is gone (and the answer with it).
                job.segment = Segment::attach(head.segment);
                if let Some(seg) = &mut job.segment {
                    let want = head.queries as usize * head.dim as usize * 4;
                    let b = seg.bytes();
                    job.queries = floats(&b[..want.min(b.len())]);
                }
            }
            OP_KNN | OP_RANGE => job.queries = floats(&data[..bytes]),
            _ => job.path = String::from_utf8_lossy(&data[..bytes]).into_owned(),
        }
        jobs.push(job);
    }
    false
}

/// At start: requests a previous incarnation took are answered as lost;
/// those withdrawn meanwhile are freed.
fn recover(sh: &Shared) {
    for slot in sh.slots() {
        if slot.state.load(Acquire) == TAKEN {
            // SAFETY: TAKEN (or ABANDONED) by a worker that is gone: this
            // one owns the contents.
            let head = unsafe { &mut *slot.head.get() };
            head.status = ST_RESTARTED;
            if slot.state.compare_exchange(TAKEN, DONE, AcqRel, Acquire).is_ok() {
                sh.stats.restarted.fetch_add(1, Relaxed);
                // SAFETY: the requester's latch, in shared memory.
                unsafe { pg_sys::SetLatch(head.owner_latch as *mut pg_sys::Latch) };
                continue;
            }
        }
        if slot.state.compare_exchange(ABANDONED, FREE, AcqRel, Acquire).is_ok() {
            sh.stats.abandoned.fetch_add(1, Relaxed);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn worker_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(sh) = shmem::shared() {
        sh.device.store(0, Release);
        sh.worker_pid.store(0, Release);
        sh.worker_latch.store(0, Release);
    }
}

/// Restarts the service (superuser): SIGTERM to the worker, which answers
/// the epoch it runs, exits with code 1 and is started again by the
/// postmaster a second later, with no images. Returns the pid signalled.
#[pg_extern(volatile, parallel_unsafe)]
fn gpuindex_service_restart() -> Option<i32> {
    // SAFETY: a catalog check of the current user.
    if !unsafe { pg_sys::superuser() } {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "only a superuser may restart the gpuindex GPU service",
            "Connect as a superuser.",
        );
    }
    let pid = shmem::shared()?.worker_pid.load(Acquire);
    // SAFETY: a signal to the worker, a process of the same cluster.
    (pid != 0 && unsafe { libc::kill(pid, libc::SIGTERM) } == 0).then_some(pid)
}
