//! An epoch's work, in three steps so that the searches of one epoch run
//! while the worker answers the one before and takes the one after:
//!
//! - `prepare` (worker thread): loads shipped images, groups the requests
//!   by image and kind (kNN, range), answers what needs no search (a
//!   missing image, a refused one), decides GPU or CPU for each search;
//! - `Searcher` (its own thread): each group's search, on the GPU where it
//!   pays, else on the CPU pool; no PostgreSQL call;
//! - `finish` (worker thread): answers every request, wakes its backend,
//!   counts.
//!
//! Measured before the split (H100 host, 1M x 128, 64 clients): an epoch
//! of 32 queries ran 1,041 us, 713 us of it searching, and the worker
//! spent the rest (answers, wake-ups, the next epoch's requests) with the
//! GPU idle.

use super::images::Store;
use super::served::{Found, Served};
use super::shmem::*;
use super::worker::Job;
use crate::guc;
use gpuindex_engine::gpu::Gpu;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// An answer to write back.
pub(super) enum Answer {
    Status(u32),
    Failed(String),
    /// Per query its rows; with their distances (kNN) or not (ranges).
    Rows {
        rows: super::served::Rows,
        distances: bool,
    },
    /// A range answer of this many rows, more than the request has room for.
    TooSmall(usize),
}

/// One image's search in an epoch: the queries of its requests of one
/// kind, and for kNN the largest k they ask.
struct Search {
    image: Arc<Served>,
    queries: Vec<f32>,
    /// Words a query.
    dim: usize,
    k: usize,
    /// Every match (`OP_RANGE`) rather than the k nearest.
    range: bool,
    /// Whether it runs on the GPU (`Served::gpu_pays`).
    on_gpu: bool,
}

/// An epoch, closed and prepared: its requests, the answers decided
/// already, and for each search the requests it answers.
pub(super) struct Epoch {
    number: u64,
    jobs: Vec<Job>,
    answers: Vec<Option<Answer>>,
    members: Vec<Vec<usize>>,
    searches: Vec<Search>,
    /// Whether its searches went to the searcher.
    sent: bool,
    /// Whether answers kept from an epoch before came from the GPU.
    kept_on_gpu: bool,
    started: Instant,
}

/// Loads, groups and the answers that need no search.
pub(super) fn prepare(sh: &Shared, store: &mut Store, gpu: Option<&Gpu>, jobs: Vec<Job>) -> Epoch {
    let delay = guc::DEBUG_SERVICE_DELAY.get();
    if delay > 0 {
        std::thread::sleep(Duration::from_millis(delay as u64));
    }
    let started = Instant::now();
    let number = sh.stats.epochs.fetch_add(1, Relaxed) + 1;
    let budget = (guc::SERVICE_MEMORY.get().max(1) as usize) << 20;
    let mut answers: Vec<Option<Answer>> = jobs.iter().map(|_| None).collect();
    for (j, job) in jobs.iter().enumerate().filter(|(_, j)| j.head.op == OP_LOAD) {
        sh.stats.loads.fetch_add(1, Relaxed);
        answers[j] = Some(match store.load(&job.head.key, job.path.as_ref(), gpu, budget) {
            Ok(()) => Answer::Status(ST_OK),
            Err(e) => Answer::Failed(e),
        });
    }
    // One search per image and kind of question.
    let mut kept_on_gpu = false;
    let mut groups: HashMap<(ImageKey, u32, u32), Vec<usize>> = HashMap::new();
    for (j, job) in jobs.iter().enumerate().filter(|(_, j)| matches!(j.head.op, OP_KNN | OP_RANGE)) {
        if job.queries.len() != job.head.queries as usize * job.head.dim as usize {
            // Its segment is gone (the requester withdrew) or short.
            answers[j] = Some(Answer::Failed("the request's queries did not arrive".into()));
            continue;
        }
        if job.head.op == OP_RANGE {
            // Asked again with room for the answer found before.
            if let Some((rows, on_gpu)) = store.held_answer(job.head.owner_pid, job.head.key, &job.queries, job.head.k as usize) {
                sh.stats.answers_kept.fetch_add(1, Relaxed);
                kept_on_gpu |= on_gpu;
                answers[j] = Some(Answer::Rows { rows, distances: false });
                continue;
            }
        }
        // (Requests of one image and kind whose queries differ in width,
        // gpu_art's probes, are searched apart.)
        groups.entry((job.head.key, job.head.op, job.head.dim)).or_default().push(j);
    }
    let (mut members, mut searches) = (Vec::new(), Vec::new());
    for ((key, op, dim), group) in groups {
        let n: usize = group.iter().map(|&j| jobs[j].head.queries as usize).sum();
        let Some(image) = store.get(&key, n) else {
            if let Some(why) = store.refused(&key).map(str::to_string) {
                for &j in &group {
                    answers[j] = Some(Answer::Failed(why.clone()));
                }
                continue;
            }
            for &j in &group {
                let ship = store.ask_to_ship(&key, jobs[j].head.owner_pid);
                answers[j] = Some(Answer::Status(if ship { ST_NO_IMAGE } else { ST_LOADING }));
            }
            continue;
        };
        let range = op == OP_RANGE;
        if (range && !image.answers_ranges()) || (!range && !image.answers_knn()) {
            let what = if range { "range" } else { "nearest-neighbour" };
            for &j in &group {
                answers[j] = Some(Answer::Failed(format!("this index's image does not answer {what} requests")));
            }
            continue;
        }
        let k = if range { 0 } else { group.iter().map(|&j| jobs[j].head.k as usize).max().unwrap_or(1) };
        let queries: Vec<f32> = group.iter().flat_map(|&j| jobs[j].queries.iter().copied()).collect();
        // (Decided here: the searcher's thread must not read GUCs.)
        let on_gpu = gpu.is_some() && image.gpu_pays(k, n, guc::GPU_MIN_BATCH.get().max(1) as usize);
        searches.push(Search { image, queries, dim: dim as usize, k, range, on_gpu });
        members.push(group);
    }
    Epoch { number, jobs, answers, members, searches, sent: false, kept_on_gpu, started }
}

/// The thread that runs epochs' searches, one epoch at a time.
pub(super) struct Searcher {
    to: mpsc::Sender<Vec<Search>>,
    /// Each epoch's answers, with the microseconds its searches took.
    from: mpsc::Receiver<(Vec<Found>, u64)>,
    done: Option<(Vec<Found>, u64)>,
}

impl Searcher {
    pub(super) fn start(gpu: Option<Arc<Gpu>>) -> Searcher {
        let (to, rx) = mpsc::channel::<Vec<Search>>();
        let (tx, from) = mpsc::channel();
        std::thread::Builder::new()
            .name("gpuindex-searcher".into())
            .spawn(move || {
                crate::batch::block_signals();
                for searches in rx {
                    let t = Instant::now();
                    let found = searches.iter().map(|s| search(gpu.as_deref(), s)).collect();
                    if tx.send((found, t.elapsed().as_micros() as u64)).is_err() {
                        return;
                    }
                }
            })
            .expect("the gpuindex search thread starts");
        Searcher { to, from, done: None }
    }

    /// Queues the searches of `epoch`, if it has any, behind those sent
    /// before (they run in order, one epoch at a time); whether it had.
    pub(super) fn send(&mut self, epoch: &mut Epoch) -> bool {
        if !epoch.searches.is_empty() {
            self.to.send(std::mem::take(&mut epoch.searches)).expect("the gpuindex search thread runs");
            epoch.sent = true;
        }
        epoch.sent
    }

    /// Whether the searches of the oldest epoch not yet answered are done.
    pub(super) fn ready(&mut self) -> bool {
        if self.done.is_none() {
            self.done = self.from.try_recv().ok();
        }
        self.done.is_some()
    }

    fn wait(&mut self) -> (Vec<Found>, u64) {
        self.done.take().unwrap_or_else(|| self.from.recv().expect("the gpuindex search thread runs"))
    }
}

/// One search: on the GPU where it pays, else (or when it fails) on the
/// CPU pool.
fn search(gpu: Option<&Gpu>, s: &Search) -> Found {
    let gpu = gpu.filter(|_| s.on_gpu);
    if s.range {
        s.image.range(gpu, &s.queries, s.dim)
    } else {
        s.image.knn(gpu, &s.queries, s.k)
    }
}

/// Answers every request of `epoch` (its searches, sent to `searcher`,
/// first waited for) and counts it.
pub(super) fn finish(sh: &Shared, store: &mut Store, searcher: &mut Searcher, mut epoch: Epoch) {
    let mut on_gpu = epoch.kept_on_gpu;
    if epoch.sent {
        let (found, us) = searcher.wait();
        sh.stats.search_us_total.fetch_add(us, Relaxed);
        for (group, found) in epoch.members.iter().zip(found) {
            if let Some(e) = &found.gpu_failure {
                warning!("gpuindex service: GPU search failed, searching on the CPU: {e}");
            }
            on_gpu |= found.on_gpu;
            if let Some(n) = found.too_many {
                for &j in group {
                    let why = format!(
                        "the epoch's range search counted {n} rows, more than the service gathers ({})",
                        super::served::ANSWER_ROWS
                    );
                    epoch.answers[j] = Some(Answer::Failed(why));
                }
                continue;
            }
            let mut at = 0;
            for &j in group {
                let (head, queries) = (&epoch.jobs[j].head, &epoch.jobs[j].queries);
                let qs = at..at + head.queries as usize;
                at = qs.end;
                epoch.answers[j] = Some(if head.op == OP_RANGE {
                    let mine = found.rows.part(qs, None);
                    let total = mine.ids.len();
                    if total > head.k as usize {
                        // Kept for the ask again, which then needs no search.
                        store.hold_answer(head.owner_pid, head.key, queries, (mine, found.on_gpu));
                        Answer::TooSmall(total)
                    } else {
                        Answer::Rows { rows: mine, distances: false }
                    }
                } else {
                    Answer::Rows { rows: found.rows.part(qs, Some(head.k as usize)), distances: true }
                });
            }
        }
    }
    let total: usize = epoch.jobs.iter().map(|j| j.head.queries as usize).sum();
    let device = if on_gpu { DEVICE_GPU } else { DEVICE_CPU };
    for (job, answer) in epoch.jobs.iter_mut().zip(epoch.answers) {
        answer_job(sh, job, answer.unwrap_or(Answer::Failed("unknown request".into())), device, epoch.number, total);
    }
    let s = &sh.stats;
    if on_gpu {
        s.gpu_epochs.fetch_add(1, Relaxed);
    }
    s.requests.fetch_add(epoch.jobs.len() as u64, Relaxed);
    s.queries.fetch_add(total as u64, Relaxed);
    s.epoch_queries.add(total as f64);
    s.run_us.add(epoch.started.elapsed().as_secs_f64() * 1e6);
    s.run_us_total.fetch_add(epoch.started.elapsed().as_micros() as u64, Relaxed);
    sh.publish_images(&store.rows());
}

/// Writes `answer` into the job's slot and wakes its backend, or frees
/// the slot when the backend withdrew meanwhile.
pub(super) fn answer_job(sh: &Shared, job: &mut Job, answer: Answer, device: u32, epoch: u64, epoch_queries: usize) {
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
        Answer::Rows { rows, distances } => {
            // The client sized its space for these answers.
            super::client::encode_answers(&rows, distances, job.segment.as_mut().map_or(&mut data[..], |seg| seg.bytes()));
            ST_OK
        }
        Answer::TooSmall(rows) => {
            head.k = rows.min(u32::MAX as usize) as u32;
            ST_TOO_SMALL
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
