//! The service's background worker: it owns the only CUDA context and one
//! copy of each index image, takes the backends' requests in posting
//! order, closes an epoch when its requests hold
//! `gpuindex.epoch_max_queries` queries or `gpuindex.epoch_us` after the
//! first (on the GPU also at once when it holds whole tiles of 32
//! queries, taking no more than whole tiles once it has more than one:
//! `epoch_limit`), and runs one batch per image for the whole epoch.
//!
//! Only the worker's own thread calls PostgreSQL (latches, logging,
//! configuration); the batches run on the rayon pool or the GPU over
//! plain memory. An ERROR or panic ends the worker with exit code 1 and
//! the postmaster starts it again a second later; the new incarnation
//! answers what the old one held as lost (`ST_RESTARTED`).

use super::images::{self, Store};
use super::segment::Segment;
use super::shmem::{self, *};
use crate::am::gpu_metric::image::Image;
use crate::guc;
use gpuindex_engine::executor::Policy;
use gpuindex_engine::gpu::{self, Gpu};
use gpuindex_engine::gts::gpu::{FILTER_MAX_K, MAX_GPU_K};
use gpuindex_engine::gts::Metric;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
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
struct Job {
    slot: usize,
    generation: u32,
    head: Head,
    queries: Vec<f32>,
    path: String,
    /// The requester's segment (a batch larger than a slot), mapped until
    /// the answer is written.
    segment: Option<Segment>,
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
        let mut full = take(sh, &mut jobs, max, tile) || whole_tiles(&jobs, tile);
        if jobs.is_empty() {
            running = wait(1000);
            continue;
        }
        // The epoch opened with its first request.
        let window = Duration::from_micros(guc::EPOCH_US.get().max(0) as u64);
        let opened = Instant::now();
        // (An epoch of whole tiles runs at once: waiting could only add a
        // tile that is mostly empty, or grow what it left.)
        while running && !full && queries(&jobs) < max && opened.elapsed() < window {
            let left = window.saturating_sub(opened.elapsed());
            if left >= Duration::from_millis(2) {
                // Backends set the latch when they post.
                running = wait(left.as_millis() as i64 - 1);
            } else {
                std::thread::sleep(left.min(Duration::from_micros(20)));
            }
            full = take(sh, &mut jobs, max, tile) || whole_tiles(&jobs, tile);
        }
        run_epoch(sh, &mut store, gpu.as_deref(), jobs);
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
            OP_KNN if head.segment != 0 => {
                // None: the requester is gone (and the answer with it).
                job.segment = Segment::attach(head.segment);
                if let Some(seg) = &mut job.segment {
                    let want = head.queries as usize * head.dim as usize * 4;
                    let b = seg.bytes();
                    job.queries = floats(&b[..want.min(b.len())]);
                }
            }
            OP_KNN => job.queries = floats(&data[..bytes]),
            _ => job.path = String::from_utf8_lossy(&data[..bytes]).into_owned(),
        }
        jobs.push(job);
    }
    false
}

/// An answer to write back.
enum Answer {
    Status(u32),
    Failed(String),
    Knn(Vec<Vec<(u64, f64)>>),
}

fn run_epoch(sh: &Shared, store: &mut Store, gpu: Option<&Gpu>, mut jobs: Vec<Job>) {
    let delay = guc::DEBUG_SERVICE_DELAY.get();
    if delay > 0 {
        std::thread::sleep(Duration::from_millis(delay as u64));
    }
    let started = Instant::now();
    let epoch = sh.stats.epochs.fetch_add(1, Relaxed) + 1;
    let total = queries(&jobs);
    let budget = (guc::SERVICE_MEMORY.get().max(1) as usize) << 20;
    let mut answers: Vec<Option<Answer>> = jobs.iter().map(|_| None).collect();
    for (j, job) in jobs.iter().enumerate().filter(|(_, j)| j.head.op == OP_LOAD) {
        sh.stats.loads.fetch_add(1, Relaxed);
        answers[j] = Some(match store.load(&job.head.key, job.path.as_ref(), gpu, budget) {
            Ok(()) => Answer::Status(ST_OK),
            Err(e) => Answer::Failed(e),
        });
    }
    let mut groups: HashMap<ImageKey, Vec<usize>> = HashMap::new();
    for (j, job) in jobs.iter().enumerate().filter(|(_, j)| j.head.op == OP_KNN) {
        if job.queries.len() != job.head.queries as usize * job.head.dim as usize {
            // Its segment is gone (the requester withdrew) or short.
            answers[j] = Some(Answer::Failed("the request's queries did not arrive".into()));
            continue;
        }
        groups.entry(job.head.key).or_default().push(j);
    }
    let mut on_gpu = false;
    for (key, members) in groups {
        let n: usize = members.iter().map(|&j| jobs[j].head.queries as usize).sum();
        let Some(img) = store.get(&key, n) else {
            if let Some(why) = store.refused(&key).map(str::to_string) {
                for &j in &members {
                    answers[j] = Some(Answer::Failed(why.clone()));
                }
                continue;
            }
            for &j in &members {
                let ship = store.ask_to_ship(&key, jobs[j].head.owner_pid);
                answers[j] = Some(Answer::Status(if ship { ST_NO_IMAGE } else { ST_LOADING }));
            }
            continue;
        };
        let k = members.iter().map(|&j| jobs[j].head.k as usize).max().unwrap_or(1);
        let qs: Vec<f32> = members.iter().flat_map(|&j| jobs[j].queries.iter().copied()).collect();
        let searched = Instant::now();
        let found = gpu
            .filter(|_| gpu_pays(&img, k, n))
            .and_then(|g| match img.knn_gpu(g, &qs, k) {
                Ok(a) => Some(a),
                Err(e) => {
                    warning!("gpuindex service: GPU search failed, searching on the CPU: {e}");
                    None
                }
            })
            .inspect(|_| on_gpu = true)
            .unwrap_or_else(|| img.knn_cpu(&qs, k));
        sh.stats.search_us_total.fetch_add(searched.elapsed().as_micros() as u64, Relaxed);
        let mut found = found.into_iter();
        for &j in &members {
            let mut mine: Vec<Vec<(u64, f64)>> = found.by_ref().take(jobs[j].head.queries as usize).collect();
            for q in &mut mine {
                q.truncate(jobs[j].head.k as usize);
            }
            answers[j] = Some(Answer::Knn(mine));
        }
    }
    let device = if on_gpu { DEVICE_GPU } else { DEVICE_CPU };
    for (job, answer) in jobs.iter_mut().zip(answers) {
        answer_job(sh, job, answer.unwrap_or(Answer::Failed("unknown request".into())), device, epoch, total);
    }
    let s = &sh.stats;
    if on_gpu {
        s.gpu_epochs.fetch_add(1, Relaxed);
    }
    s.requests.fetch_add(jobs.len() as u64, Relaxed);
    s.queries.fetch_add(total as u64, Relaxed);
    s.epoch_queries.add(total as f64);
    s.run_us.add(started.elapsed().as_secs_f64() * 1e6);
    s.run_us_total.fetch_add(started.elapsed().as_micros() as u64, Relaxed);
    sh.publish_images(&store.rows());
}

/// Whether a kNN batch of `n` queries for `k` runs on the GPU: within its
/// limit; for L2 on trees that prune little (high dimensions) only where
/// the GPU's bounded brute force answers it (k up to `FILTER_MAX_K`): its
/// tree search opens most leaves there and is slower than the CPU's
/// bounded brute force on all cores; for edit distance from
/// `EDIT_GPU_MIN` queries: the GPU's leaf search is a block per query, 6 ms
/// for 1 to 32 queries over 104K words on the H100, where the worker's 16
/// cores on one query take 2.4 ms (docs/bench/gts-words-h100.md).
fn gpu_pays(img: &Image, k: usize, n: usize) -> bool {
    let m = img.shape.metric;
    k <= MAX_GPU_K && (k <= FILTER_MAX_K || m != Metric::L2 || !img.prunes_little()) && (m != Metric::Levenshtein || n >= EDIT_GPU_MIN)
}

/// The smallest epoch of edit-distance queries the GPU takes.
const EDIT_GPU_MIN: usize = 4;

/// Writes `answer` into the job's slot and wakes its backend, or frees
/// the slot when the backend withdrew meanwhile.
fn answer_job(sh: &Shared, job: &mut Job, answer: Answer, device: u32, epoch: u64, epoch_queries: usize) {
    let slot = &sh.slots()[job.slot];
    if slot.generation.load(Acquire) != job.generation {
        return;
    }
    // SAFETY: TAKEN (or ABANDONED): the worker owns the contents.
    let (head, data) = unsafe { (&mut *slot.head.get(), &mut *slot.data.get()) };
    head.device = device;
    head.epoch = epoch;
    head.epoch_queries = epoch_queries as u32;
    head.status = match answer {
        Answer::Status(s) => s,
        Answer::Failed(msg) => {
            sh.stats.failed.fetch_add(1, Relaxed);
            let b = msg.as_bytes();
            let n = b.len().min(SLOT_DATA);
            data[..n].copy_from_slice(&b[..n]);
            head.bytes = n as u32;
            ST_FAILED
        }
        Answer::Knn(rows) => {
            // The client sized its segment for these answers.
            super::client::encode_answers(&rows, job.segment.as_mut().map_or(&mut data[..], |seg| seg.bytes()));
            ST_OK
        }
    };
    match slot.state.compare_exchange(TAKEN, DONE, AcqRel, Acquire) {
        // SAFETY: the requester's latch, in shared memory.
        Ok(_) => unsafe { pg_sys::SetLatch(head.owner_latch as *mut pg_sys::Latch) },
        Err(ABANDONED) => {
            sh.stats.abandoned.fetch_add(1, Relaxed);
            slot.state.store(FREE, Release);
        }
        Err(s) => warning!("gpuindex service: slot {} in state {s} at answer", job.slot),
    }
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
