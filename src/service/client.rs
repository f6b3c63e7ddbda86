//! The backend's side of the service: whether to ask it, posting a
//! request into a slot and sleeping on the backend's latch until the
//! answer, withdrawing it on cancel, timeout, ERROR (a `Drop` guard) or
//! exit (a `before_shmem_exit` callback: FATAL does not unwind), and
//! shipping an image the service lacks.

use super::segment::{self, Segment};
use super::served::Rows;
use super::shmem::{self, *};
use crate::guc::{self, ServiceSetting};
use gpuindex_engine::executor::Policy;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::path::Path;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

/// The request this backend has in a slot: (slot, generation).
static mut CURRENT: Option<(usize, u32)> = None;
static mut EXIT_CALLBACK: bool = false;

/// A kNN request posted before its answer is wanted (`knn_ahead`): the
/// service searches it while the backend does other work (a join fetches
/// the rows of the chunk before), and the next `answer_ahead` of the same
/// queries takes its answer. One at a time; withdrawn at exit and at the
/// end of the transaction that posted it if nothing took it.
struct Ahead {
    key: ImageKey,
    dim: usize,
    k: usize,
    queries: Vec<f32>,
    slot: usize,
    generation: u32,
    /// Its segment where it does not fit a slot: mapped outside any
    /// resource owner (the request outlives the call that posted it), so
    /// detached here when the request is answered or withdrawn.
    segment: Option<Segment>,
}

static mut AHEAD: Option<Ahead> = None;
/// The segment of the request posted ahead while its answer is waited for.
static mut WAITED_SEGMENT: Option<Segment> = None;
static mut XACT_CALLBACK: bool = false;

/// Whether this backend sends what the service serves to it, per
/// `gpuindex.service`. Under `on`, a service that is not running is an
/// ERROR.
pub fn wanted() -> bool {
    match guc::SERVICE.get() {
        ServiceSetting::Off => false,
        ServiceSetting::Auto => {
            guc::policy() != Policy::Cpu && shmem::shared().is_some_and(|sh| sh.running() && sh.device.load(Relaxed) == DEVICE_GPU)
        }
        ServiceSetting::On => match shmem::shared() {
            None => crate::error::raise(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "gpuindex.service = on, but the gpuindex GPU service is not loaded",
                "Add gpuindex to shared_preload_libraries and restart the server, or SET gpuindex.service = auto.",
            ),
            Some(sh) if !sh.running() => crate::error::raise(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "gpuindex.service = on, but the gpuindex GPU service is not running",
                "The postmaster restarts it within seconds after a failure (see the server log); or SET gpuindex.service = auto.",
            ),
            Some(_) => true,
        },
    }
}

/// `wanted` without its ERROR (for the planner): whether searches would
/// go to a running service.
pub fn may_answer() -> bool {
    match guc::SERVICE.get() {
        ServiceSetting::Off => false,
        ServiceSetting::On => shmem::shared().is_some_and(|sh| sh.running()),
        ServiceSetting::Auto => wanted(),
    }
}

fn strict() -> bool {
    guc::SERVICE.get() == ServiceSetting::On
}

/// Microseconds one short request row (a probe of a few words) and its
/// one answer row cost on their way through the service, besides the
/// search: the session's encoding, the shared segments both ways, the
/// service's decoding and answering, the session's decoding. On the H100
/// host 10^6 gpu_btree probes took 102 ms longer through the service than
/// in the session on its 16 cores, whose own search of them takes some
/// 3 ms (docs/bench/sql-join-equi-1e6x1e7-h100-e5cd206.md): searches of a few
/// nanoseconds a probe never pay for the trip; `auto` keeps them. Every
/// answer row pays it too (a kNN centre's k, a range query's rows).
const TRIP_US_PER_ROW: f64 = 0.1;

/// The key of index `rel`'s image (at the metapage's `generation` and
/// `vacuums`) where a search of it goes to the service: when the service
/// is `wanted`, and then under `on` always, under `auto` where it `pays`
/// (`service_us`: its search; `rows`: the request and answer rows whose
/// trip is added to it).
pub fn worth_asking(rel: pg_sys::Relation, generation: u64, vacuums: u64, session_us: f64, service_us: f64, rows: f64) -> Option<ImageKey> {
    (wanted() && pays(session_us, service_us + rows * TRIP_US_PER_ROW, true)).then(|| key_of(rel, generation, vacuums))
}

/// As `worth_asking`, without its ERROR and without counting a decline:
/// for a request posted ahead (`knn_ahead`), which `worth_asking` decides
/// again where its answer is not taken.
pub fn would_ask(rel: pg_sys::Relation, generation: u64, vacuums: u64, session_us: f64, service_us: f64, rows: f64) -> Option<ImageKey> {
    (may_answer() && pays(session_us, service_us + rows * TRIP_US_PER_ROW, false)).then(|| key_of(rel, generation, vacuums))
}

/// Whether a search goes to the service (called after `wanted`): under
/// `on` always; under `auto` when this backend would take longer
/// (`session_us`: its own search, and reading its copy of the index where
/// it holds none) than the service's expected round trip plus its search
/// (`service_us`); else the backend keeps it, counted as declined where
/// `count`. A cheap query gains nothing from a trip it must wait for.
fn pays(session_us: f64, service_us: f64, count: bool) -> bool {
    let Some(sh) = shmem::shared() else { return false };
    if strict() || session_us > sh.stats.expected_wait_us() + service_us {
        return true;
    }
    if count {
        sh.stats.declined.fetch_add(1, Relaxed);
    }
    false
}

/// The key of the image of index `rel` at the metapage's counters.
pub fn key_of(rel: pg_sys::Relation, generation: u64, vacuums: u64) -> ImageKey {
    ImageKey {
        // SAFETY: a process global; a field of an open relation.
        database: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        index: unsafe { (*rel).rd_id }.to_u32(),
        file: crate::compat::relfilenode(rel).to_u32(),
        generation,
        vacuums,
    }
}

/// What a request asks, and so how its answer is laid out.
#[derive(Clone, Copy, Debug)]
pub enum Ask {
    /// The k nearest rows of each query, with their distances.
    Knn(usize),
    /// Every matching row of each query (ids only), with room for this
    /// many rows in all.
    Range(usize),
}

impl Ask {
    fn op(self) -> u32 {
        match self {
            Ask::Knn(_) => OP_KNN,
            Ask::Range(_) => OP_RANGE,
        }
    }

    /// Bytes of an answer to `queries` queries (at most).
    fn answer_bytes(self, queries: usize) -> usize {
        (queries * 4).next_multiple_of(8)
            + match self {
                Ask::Knn(k) => queries * k * 16,
                Ask::Range(room) => room * 8,
            }
    }
}

/// Writes answers into a slot's data or a segment: one u32 count per
/// query (padded to 8 bytes), then each row's id and, with `distances`,
/// its distance. The requester sized the space (`Ask::answer_bytes`).
pub fn encode_answers(rows: &Rows, distances: bool, data: &mut [u8]) {
    let n = rows.queries();
    for (q, out) in data[..n * 4].chunks_exact_mut(4).enumerate() {
        out.copy_from_slice(&((rows.start[q + 1] - rows.start[q]) as u32).to_ne_bytes());
    }
    let at = (n * 4).next_multiple_of(8);
    if distances {
        let out = data[at..at + rows.ids.len() * 16].chunks_exact_mut(16);
        for ((out, id), d) in out.zip(&rows.ids).zip(&rows.dists) {
            out[..8].copy_from_slice(&id.to_ne_bytes());
            out[8..].copy_from_slice(&d.to_ne_bytes());
        }
    } else {
        for (out, id) in data[at..at + rows.ids.len() * 8].chunks_exact_mut(8).zip(&rows.ids) {
            out.copy_from_slice(&id.to_ne_bytes());
        }
    }
}

fn decode_answers(queries: usize, distances: bool, data: &[u8]) -> Rows {
    let mut rows = Rows::new();
    let mut total = 0;
    rows.start.extend(data[..queries * 4].chunks_exact(4).map(|c| {
        total += u32::from_ne_bytes(c.try_into().unwrap()) as usize;
        total
    }));
    let at = (queries * 4).next_multiple_of(8);
    let word = |c: &[u8]| u64::from_ne_bytes(c[..8].try_into().unwrap());
    if distances {
        let rows_data = data[at..at + total * 16].chunks_exact(16);
        rows.ids = rows_data.clone().map(word).collect();
        rows.dists = rows_data.map(|c| f64::from_bits(word(&c[8..]))).collect();
    } else {
        rows.ids = data[at..at + total * 8].chunks_exact(8).map(word).collect();
    }
    rows
}

/// The bytes a request of `queries` queries of `dim` words, and then its
/// answer, take in a slot or segment.
fn bytes(queries: usize, dim: usize, ask: Ask) -> usize {
    (queries * dim * 4).max(ask.answer_bytes(queries))
}

/// Requests of up to this many queries measure the round trip `pays`
/// expects (a tile of the GPU's bounded brute force).
const SMALL_REQUEST: usize = 32;

/// Why a GPU service ran a batch on its CPU (`Served::gpu_pays`).
pub const CPU_BY_CHOICE: &str = "the GPU service searched on its CPU: k is above the GPU's bounded brute force (16) on a tree that \
     prunes little, or a gpu_spatial batch holds fewer queries than gpuindex.gpu_min_batch (kNN: a sixteenth of it)";

/// What came back.
enum Reply {
    Done { head: Head, data: Vec<u8> },
    TimedOut,
    NoSlot,
}

/// Withdraws the request of ticket (slot, generation), as the module
/// documents: whoever moves the slot out of a shared state frees it.
fn withdraw(slot: usize, generation: u32) {
    let Some(sh) = shmem::shared() else { return };
    let s = &sh.slots()[slot];
    if s.generation.load(Acquire) != generation {
        return;
    }
    if s.state.compare_exchange(POSTED, FREE, AcqRel, Acquire).is_ok()
        || s.state.compare_exchange(TAKEN, ABANDONED, AcqRel, Acquire).is_ok()
    {
        return;
    }
    let now = s.state.load(Acquire);
    if now == DONE || now == FILLING {
        s.state.store(FREE, Release);
    }
}

/// The ticket of a posted request; dropping it (an ERROR unwinding
/// through the wait) withdraws the request.
struct Ticket {
    slot: usize,
    generation: u32,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        withdraw(self.slot, self.generation);
        // SAFETY: this backend's own global.
        unsafe { CURRENT = None };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn backend_exit(_code: i32, _arg: pg_sys::Datum) {
    // SAFETY: this backend's own global, read at exit.
    if let Some((slot, generation)) = unsafe { CURRENT } {
        withdraw(slot, generation);
    }
    drop_ahead();
}

/// Withdraws the request posted ahead, if any, and unmaps its segment.
fn drop_ahead() {
    // SAFETY: this backend's own globals.
    unsafe {
        if let Some(a) = std::ptr::replace(&raw mut AHEAD, None) {
            withdraw(a.slot, a.generation);
        }
        WAITED_SEGMENT = None;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn xact_end(_event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    // (Every event ends the transaction or prepares it: an answer posted
    // ahead in it is not wanted after it.)
    drop_ahead();
}

/// Posts the kNN request `knn` would send for `queries` (of the image
/// `key`), whose answer the next `answer_ahead` of the same takes; nothing
/// where it would be sent in parts (`knn`) or no slot is free. A request
/// posted ahead before is withdrawn.
pub fn knn_ahead(key: ImageKey, dim: usize, queries: &[f32], k: usize) {
    drop_ahead();
    let (dim, ask) = (dim.max(1), Ask::Knn(k));
    let n = queries.len() / dim;
    let Some(sh) = shmem::shared() else { return };
    if n == 0 || !knn_in_one_request(dim, n, k) {
        return;
    }
    // SAFETY: this backend's own global; a static callback.
    unsafe {
        if !XACT_CALLBACK {
            pg_sys::RegisterXactCallback(Some(xact_end), std::ptr::null_mut());
            XACT_CALLBACK = true;
        }
    }
    let request = request_bytes(queries);
    let mut head = Head { op: OP_KNN, key, dim: dim as u32, queries: n as u32, k: k as u32, ..Head::default() };
    let segment = carrier(&mut head, &request, bytes(n, dim, ask), Segment::create_unowned);
    if let Some((slot, generation)) = post(sh, head, if segment.is_none() { &request } else { &[] }) {
        let a = Ahead { key, dim, k, queries: queries.to_vec(), slot, generation, segment };
        // SAFETY: this backend's own global.
        unsafe { AHEAD = Some(a) };
    }
}

/// Whether `knn` sends `n` queries of `dim` words in one request (a
/// request posted ahead must be that one).
pub fn knn_in_one_request(dim: usize, n: usize, k: usize) -> bool {
    bytes(n, dim.max(1), Ask::Knn(k)) <= segment::MAX_BYTES
}

/// The answer of the request posted ahead, where it asked for exactly
/// these queries of image `key`; None where there is none or it did not
/// come back answered (the caller asks as usual). A request posted ahead
/// for other queries stays posted: a join's chunk may ask again for some
/// of its rows (a second round) before the next chunk takes it.
pub fn answer_ahead(key: ImageKey, dim: usize, queries: &[f32], k: usize, what: &'static str) -> Option<Rows> {
    // SAFETY: this backend's own global.
    let a = unsafe { (&raw const AHEAD).as_ref() }.and_then(Option::as_ref)?;
    // (By bits: a query's words may carry halves of float8s, NaN as f32.)
    let same = a.queries.len() == queries.len() && a.queries.iter().zip(queries).all(|(x, y)| x.to_bits() == y.to_bits());
    if (a.key, a.dim, a.k) != (key, dim.max(1), k) || !same {
        return None;
    }
    // SAFETY: this backend's own global.
    let a = unsafe { std::ptr::replace(&raw mut AHEAD, None) }?;
    let sh = shmem::shared()?;
    let n = queries.len() / a.dim;
    let started = Instant::now();
    // The wait withdraws the request if an ERROR interrupts it; its
    // segment is then unmapped at the transaction's end (`drop_ahead`),
    // not while the ERROR unwinds.
    // SAFETY: this backend's own global.
    unsafe { WAITED_SEGMENT = a.segment };
    let reply = wait(sh, a.slot, a.generation, started);
    // SAFETY: this backend's own global.
    let mut segment = unsafe { std::ptr::replace(&raw mut WAITED_SEGMENT, None) };
    match reply {
        Reply::Done { head, data } if head.status == ST_OK => {
            answered(sh, &head, n, what, started, started);
            super::explain::note_ahead();
            Some(match &mut segment {
                Some(seg) => decode_answers(n, true, seg.bytes()),
                None => decode_answers(n, true, &data),
            })
        }
        _ => None,
    }
}

/// Posts a request and waits for its answer (up to
/// `gpuindex.service_timeout`).
fn ask_service(sh: &Shared, head: Head, request: &[u8]) -> Reply {
    match post(sh, head, request) {
        Some((slot, generation)) => wait(sh, slot, generation, Instant::now()),
        None => Reply::NoSlot,
    }
}

/// Posts a request into a free slot: (slot, generation), None when none is
/// free.
fn post(sh: &Shared, mut head: Head, request: &[u8]) -> Option<(usize, u32)> {
    // SAFETY: this backend's own globals; a static callback.
    unsafe {
        if !EXIT_CALLBACK {
            pg_sys::before_shmem_exit(Some(backend_exit), pg_sys::Datum::from(0));
            EXIT_CALLBACK = true;
        }
    }
    let slots = sh.slots();
    // SAFETY: a process global.
    let start = unsafe { pg_sys::MyProcPid } as usize % slots.len();
    let i = (0..slots.len())
        .map(|j| (start + j) % slots.len())
        .find(|&i| slots[i].state.compare_exchange(FREE, FILLING, AcqRel, Acquire).is_ok())?;
    let slot = &slots[i];
    let generation = slot.generation.fetch_add(1, AcqRel).wrapping_add(1);
    // SAFETY: FILLING: this backend owns the contents until it posts.
    unsafe {
        head.owner_pid = pg_sys::MyProcPid;
        head.owner_latch = pg_sys::MyLatch as usize;
        head.bytes = request.len() as u32;
        head.status = 0;
        *slot.head.get() = head;
        (&mut *slot.data.get())[..request.len()].copy_from_slice(request);
    }
    slot.post_seq.store(sh.post_seq.fetch_add(1, Relaxed), Relaxed);
    slot.state.store(POSTED, Release);
    sh.wake_worker();
    Some((i, generation))
}

/// Waits for the answer of the request in `slot` (from `since`, for the
/// timeout and the statistics), then frees the slot.
fn wait(sh: &Shared, i: usize, generation: u32, since: Instant) -> Reply {
    let slot = &sh.slots()[i];
    let ticket = Ticket { slot: i, generation };
    // SAFETY: this backend's own global.
    unsafe { CURRENT = Some((i, generation)) };
    let timeout = Duration::from_millis(guc::SERVICE_TIMEOUT.get().max(1) as u64);
    loop {
        if slot.state.load(Acquire) == DONE {
            break;
        }
        if since.elapsed() >= timeout {
            return Reply::TimedOut; // the ticket withdraws the request
        }
        // SAFETY: the backend's latch; a wait as PostgreSQL's own.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                10,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        // Cancel or statement_timeout: the ERROR unwinds through `ticket`.
        pg_sys::check_for_interrupts!();
    }
    sh.stats.wait_us.add(since.elapsed().as_secs_f64() * 1e6);
    // SAFETY: DONE: the answer is this backend's to read.
    let (head, data) = unsafe { (*slot.head.get(), &*slot.data.get()) };
    let used = match head.status {
        ST_OK => SLOT_DATA,
        ST_FAILED => (head.bytes as usize).min(SLOT_DATA),
        _ => 0,
    };
    let reply = Reply::Done { head, data: data[..used].to_vec() };
    drop(ticket); // DONE -> FREE
    reply
}

/// Why the service did not answer: an ERROR under `on`, a search in the
/// backend under `auto` (counted as a fallback).
fn not_answered<T>(sh: &Shared, why: String) -> Option<T> {
    if strict() {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
            format!("gpuindex service: {why}"),
            "Retry; SET gpuindex.service = auto searches in the session when the service cannot answer.",
        );
    }
    sh.stats.fallbacks.fetch_add(1, Relaxed);
    super::explain::note_fallback();
    None
}

/// The `k` nearest rows of each query (`dim` words each) in the image
/// `key`, from the service, or None when this backend should search
/// itself (`auto` only: declined, failed, another backend shipping the
/// image). `ship` writes the image to the path it is given, when the
/// service asks for it. `what` names the batch in `gpuindex_last_batch()`.
/// A batch that does not fit a slot goes in a segment, in parts of at
/// most `segment::MAX_BYTES`.
pub fn knn(
    key: ImageKey,
    dim: usize,
    queries: &[f32],
    k: usize,
    ship: &dyn Fn(&Path) -> std::io::Result<()>,
    what: &'static str,
) -> Option<Rows> {
    let dim = dim.max(1);
    let per_part = (segment::MAX_BYTES / bytes(1, dim, Ask::Knn(k))).max(1);
    let mut out = Rows::new();
    for part in queries.chunks(per_part * dim) {
        match request(key, dim, part, Ask::Knn(k), ship, what)? {
            Ok(rows) => out.append(rows),
            Err(_) => unreachable!("kNN answers have a known size"),
        }
    }
    Some(out)
}

/// Every row of the image `key` matching each query (`dim` words each),
/// as (id, 0); None as for `knn`. The answer's room starts at what a slot
/// holds (16 rows a query at least); an answer that
/// needs more is asked again with room for it, one that needs more than
/// a segment's part is not answered (the session searches itself under
/// `auto`).
pub fn range(key: ImageKey, dim: usize, queries: &[f32], ship: &dyn Fn(&Path) -> std::io::Result<()>, what: &'static str) -> Option<Rows> {
    range_within(key, dim, queries, ship, what, u64::MAX).map(|r| r.expect("no bound"))
}

/// As `range`, or `Err(rows so far)` as soon as the answer holds more than
/// `limit` rows (the rest of the queries not asked).
pub fn range_within(
    key: ImageKey,
    dim: usize,
    queries: &[f32],
    ship: &dyn Fn(&Path) -> std::io::Result<()>,
    what: &'static str,
    limit: u64,
) -> Option<Result<Rows, u64>> {
    let dim = dim.max(1);
    let per_part = (segment::MAX_BYTES / 2 / (dim * 4 + 4)).max(1);
    let mut out = Rows::new();
    for part in queries.chunks(per_part * dim) {
        let n = part.len() / dim;
        // At first what a slot holds besides the counts (no segment to
        // make), or 16 rows a query.
        let mut room = (n * 16).max(SLOT_DATA.saturating_sub((n * 4).next_multiple_of(8)) / 8);
        loop {
            match request(key, dim, part, Ask::Range(room), ship, what)? {
                Ok(rows) => {
                    out.append(rows);
                    if out.ids.len() as u64 > limit {
                        return Some(Err(out.ids.len() as u64));
                    }
                    break;
                }
                Err(need) if Ask::Range(need).answer_bytes(n) <= segment::MAX_BYTES && need > room => room = need,
                Err(need) => {
                    let sh = shmem::shared()?;
                    return not_answered(sh, format!("the answer holds {need} rows, more than a request can carry"));
                }
            }
        }
    }
    Some(Ok(out))
}

/// One request (its queries within a part); `Err(rows)` when a range
/// answer needs room for `rows` rows.
fn request(
    key: ImageKey,
    dim: usize,
    queries: &[f32],
    ask: Ask,
    ship: &dyn Fn(&Path) -> std::io::Result<()>,
    what: &'static str,
) -> Option<Result<Rows, usize>> {
    let sh = shmem::shared()?;
    let n = queries.len() / dim;
    let started = Instant::now();
    let request = request_bytes(queries);
    let room = match ask {
        Ask::Knn(k) | Ask::Range(k) => k,
    };
    let mut head = Head { op: ask.op(), key, dim: dim as u32, queries: n as u32, k: room as u32, ..Head::default() };
    let distances = matches!(ask, Ask::Knn(_));
    loop {
        let mut segment = carrier(&mut head, &request, bytes(n, dim, ask), Segment::create);
        let asked = Instant::now();
        let (head, data) = match ask_service(sh, head, if segment.is_none() { &request } else { &[] }) {
            Reply::Done { head, data } => (head, data),
            Reply::TimedOut => return not_answered(sh, "no answer within gpuindex.service_timeout".into()),
            Reply::NoSlot => return not_answered(sh, "no free request slot".into()),
        };
        match head.status {
            ST_OK => {
                answered(sh, &head, n, what, started, asked);
                return Some(Ok(match &mut segment {
                    Some(seg) => decode_answers(n, distances, seg.bytes()),
                    None => decode_answers(n, distances, &data),
                }));
            }
            ST_TOO_SMALL => return Some(Err(head.k as usize)),
            ST_NO_IMAGE => {
                if let Some(answer) = load(sh, key, ship) {
                    return answer.map(Ok);
                }
            }
            ST_LOADING if !strict() => return not_answered(sh, String::new()),
            ST_LOADING => {
                // Another backend ships the image: ask again shortly.
                std::thread::sleep(Duration::from_millis(5));
                pg_sys::check_for_interrupts!();
                if started.elapsed() >= Duration::from_millis(guc::SERVICE_TIMEOUT.get().max(1) as u64) {
                    return not_answered(sh, "the index image did not arrive within gpuindex.service_timeout".into());
                }
            }
            ST_RESTARTED => return not_answered(sh, "the service restarted while serving this request".into()),
            _ => return not_answered(sh, String::from_utf8_lossy(&data).into_owned()),
        }
    }
}

/// The segment that carries `request` (`size` bytes with its answer, made
/// by `create`, its handle set in `head`), or None where a slot's data
/// holds it.
fn carrier(head: &mut Head, request: &[u8], size: usize, create: fn(usize) -> Segment) -> Option<Segment> {
    (size > SLOT_DATA).then(|| {
        let mut seg = create(size);
        seg.bytes()[..request.len()].copy_from_slice(request);
        head.segment = seg.handle();
        seg
    })
}

/// A request's queries as the slot carries them.
fn request_bytes(queries: &[f32]) -> Vec<u8> {
    queries.iter().flat_map(|f| f.to_ne_bytes()).collect()
}

/// Records an answered request of `n` queries (`started` when the caller
/// began, `asked` when it last asked).
fn answered(sh: &Shared, head: &Head, n: usize, what: &'static str, started: Instant, asked: Instant) {
    let cpu_reason = match (head.device, sh.device.load(Relaxed)) {
        (DEVICE_GPU, _) => None,
        (_, DEVICE_GPU) => Some(CPU_BY_CHOICE),
        _ => Some("the GPU service has no GPU"),
    };
    crate::batch::record_service(what, n, cpu_reason, head.epoch, head.epoch_queries, started);
    if n <= SMALL_REQUEST {
        sh.stats.note_wait(asked.elapsed().as_secs_f64() * 1e6);
    }
}

/// Ships the image of `key`; None when it arrived (ask again), else what
/// `knn` returns.
fn load<T>(sh: &Shared, key: ImageKey, ship: &dyn Fn(&Path) -> std::io::Result<()>) -> Option<Option<T>> {
    let path = super::images::ship_path(&key);
    if let Err(e) = ship(&path) {
        let _ = std::fs::remove_file(&path);
        return Some(not_answered(sh, format!("could not write the index image {}: {e}", path.display())));
    }
    let request = path.to_string_lossy().into_owned().into_bytes();
    let reply = ask_service(sh, Head { op: OP_LOAD, key, ..Head::default() }, &request);
    // The worker has read it, or will find it gone (the request was
    // withdrawn); either way the file is done with.
    let _ = std::fs::remove_file(&path);
    match reply {
        Reply::Done { head, .. } if head.status == ST_OK => None,
        Reply::Done { head, data } if head.status == ST_FAILED => Some(not_answered(sh, String::from_utf8_lossy(&data).into_owned())),
        Reply::Done { .. } => Some(not_answered(sh, "the service restarted while loading the index image".into())),
        Reply::TimedOut => Some(not_answered(sh, "the index image was not loaded within gpuindex.service_timeout".into())),
        Reply::NoSlot => Some(not_answered(sh, "no free request slot".into())),
    }
}
