//! The service's shared memory: the worker's address, its device, the
//! counters, the images it holds, and one request slot per backend.
//!
//! A slot moves between states only by compare-and-swap, so exactly one
//! party frees it:
//!
//! ```text
//! FREE -backend claims-> FILLING -posts-> POSTED -worker takes-> TAKEN -answers-> DONE -backend reads-> FREE
//! POSTED -backend withdraws-> FREE                 (the worker never saw it)
//! TAKEN  -backend withdraws-> ABANDONED -worker->  FREE (the worker cleans up)
//! ```
//!
//! `generation` goes up at every claim, so a party holding an old
//! (slot, generation) ticket never touches a slot someone else owns now.
//! Only Rust atomics and plain data live here (process-private locks do
//! not work across processes); who may touch `head` and `data` is decided
//! by `state`, with release stores and acquire loads.

use super::stats::Stats;
use pgrx::pg_sys;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

pub const FREE: u32 = 0;
pub const FILLING: u32 = 1;
pub const POSTED: u32 = 2;
pub const TAKEN: u32 = 3;
pub const DONE: u32 = 4;
pub const ABANDONED: u32 = 5;

/// Bytes of a slot's request and answer (they share the space: the worker
/// copies a request out before it writes the answer).
pub const SLOT_DATA: usize = 64 * 1024;
/// Images listed for `gpuindex_service_images()`.
pub const LISTED_IMAGES: usize = 64;

/// What a request asks.
pub const OP_KNN: u32 = 1;
pub const OP_LOAD: u32 = 2;
/// Every row matching each query (gpu_spatial: boxes, circles, points).
pub const OP_RANGE: u32 = 3;

/// How the worker answered.
pub const ST_OK: u32 = 1;
/// The service does not hold the image: the requester ships it.
pub const ST_NO_IMAGE: u32 = 2;
/// Another backend is shipping the image.
pub const ST_LOADING: u32 = 3;
/// The request failed; `data` holds the message.
pub const ST_FAILED: u32 = 4;
/// The service restarted while it held the request.
pub const ST_RESTARTED: u32 = 5;
/// The answer of an `OP_RANGE` request holds more rows than its space
/// (`k`, in rows); `k` now says how many.
pub const ST_TOO_SMALL: u32 = 6;

/// Which index image a request reads: the database, the index, its file
/// (a rewrite gives a new one) and the metapage's counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImageKey {
    pub database: u32,
    pub index: u32,
    pub file: u32,
    pub generation: u64,
    pub vacuums: u64,
}

/// A request's fixed part; its queries (or the image file's path) and
/// the answer are in the slot's `data`, or for a batch larger than that in
/// the dynamic shared memory segment `segment` (0: none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Head {
    pub owner_pid: i32,
    /// The requester's latch (a PGPROC's, in shared memory).
    pub owner_latch: usize,
    pub op: u32,
    pub key: ImageKey,
    pub dim: u32,
    pub queries: u32,
    /// `OP_KNN`: the rows a query asks; `OP_RANGE`: the rows the answer
    /// has room for, all queries together.
    pub k: u32,
    /// Bytes of `data` the request uses.
    pub bytes: u32,
    /// A `dsm_handle` holding the queries, then the answers (0: `data`).
    pub segment: u32,
    /// Answer: status, the device that ran it (1 CPU, 2 GPU), its epoch
    /// and the queries of that epoch.
    pub status: u32,
    pub device: u32,
    pub epoch: u64,
    pub epoch_queries: u32,
}

#[repr(C)]
pub struct Slot {
    pub state: AtomicU32,
    pub generation: AtomicU32,
    /// Posting order: the worker takes the oldest first.
    pub post_seq: AtomicU64,
    pub head: UnsafeCell<Head>,
    pub data: UnsafeCell<[u8; SLOT_DATA]>,
}

/// An image the worker holds, as listed; `version` is odd while the
/// worker rewrites the list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageRow {
    pub key: ImageKey,
    pub host_bytes: u64,
    pub device_bytes: u64,
    pub queries: u64,
}

#[repr(C)]
pub struct Shared {
    pub worker_pid: AtomicI32,
    pub worker_latch: AtomicUsize,
    /// Starts of the worker since the cluster started.
    pub incarnation: AtomicU32,
    /// The worker's device: 0 not ready, 1 CPU, 2 GPU.
    pub device: AtomicU32,
    pub post_seq: AtomicU64,
    pub stats: Stats,
    pub list_version: AtomicU64,
    pub listed: AtomicU32,
    pub images: UnsafeCell<[ImageRow; LISTED_IMAGES]>,
    /// Indexes dropped since the worker last looked, as `dropped_entry`
    /// (0: free): their images are released. A full ring loses hints only
    /// (such images leave by LRU); a drop that rolls back costs a re-ship.
    pub dropped: [AtomicU64; DROPPED_RING],
    /// Bulk deletes finished, per index (`am::common::bulk_deletes`).
    pub bulk_deletes: [AtomicU64; BULK_DELETE_SLOTS],
    pub nslots: u32,
}

pub const BULK_DELETE_SLOTS: usize = 1024;

pub const DROPPED_RING: usize = 64;

fn dropped_entry(database: u32, index: u32) -> u64 {
    (u64::from(database) << 32) | u64::from(index)
}

// SAFETY: shared between processes by design; access is governed by the
// atomics as the module documents.
unsafe impl Sync for Shared {}
unsafe impl Sync for Slot {}

pub const DEVICE_CPU: u32 = 1;
pub const DEVICE_GPU: u32 = 2;

static mut SHARED: *mut Shared = std::ptr::null_mut();
static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// One slot per process that may ask (every backend and worker).
fn nslots() -> usize {
    // SAFETY: MaxBackends is set before shared memory is requested.
    (unsafe { pg_sys::MaxBackends }).max(1) as usize
}

fn slots_offset() -> usize {
    std::mem::size_of::<Shared>().next_multiple_of(64)
}

fn size() -> usize {
    slots_offset() + nslots() * std::mem::size_of::<Slot>()
}

/// Installs the shared-memory hooks (from _PG_init under
/// shared_preload_libraries only: PostgreSQL 15 refuses requests outside
/// the request hook).
pub fn request() {
    // SAFETY: hooks chained once, in the postmaster, while loading.
    unsafe {
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: PostgreSQL calls the hook once, in the postmaster.
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(size());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: as PostgreSQL's own addins: under AddinShmemInitLock (the
    // 21st main LWLock; a C macro pg_sys lacks), zeroed at first creation
    // (every slot FREE, every counter 0).
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let p = pg_sys::ShmemInitStruct(c"gpuindex service".as_ptr(), size(), &mut found) as *mut Shared;
        if !found {
            std::ptr::write_bytes(p as *mut u8, 0, size());
            (*p).nslots = nslots() as u32;
        }
        SHARED = p;
        pg_sys::LWLockRelease(lock);
    }
}

/// The shared state, when gpuindex was preloaded.
pub fn shared() -> Option<&'static Shared> {
    // SAFETY: set once at startup (inherited by every forked process) and
    // never freed.
    unsafe { SHARED.as_ref() }
}

impl Shared {
    pub fn slots(&self) -> &[Slot] {
        // SAFETY: `nslots` slots follow the header, as `size` laid out.
        unsafe {
            let base = (self as *const Shared as *const u8).add(slots_offset()) as *const Slot;
            std::slice::from_raw_parts(base, self.nslots as usize)
        }
    }

    /// The worker's pid when it runs and is ready to answer.
    pub fn running(&self) -> bool {
        self.worker_pid.load(Ordering::Acquire) != 0 && self.device.load(Ordering::Acquire) != 0
    }

    /// Tells the worker that `index` of `database` is being dropped.
    pub fn note_dropped(&self, database: u32, index: u32) {
        let entry = dropped_entry(database, index);
        if self.dropped.iter().any(|d| d.compare_exchange(0, entry, Ordering::AcqRel, Ordering::Relaxed).is_ok()) {
            self.wake_worker();
        }
    }

    /// The (database, index) pairs noted dropped, each taken once.
    pub fn take_dropped(&self) -> Vec<(u32, u32)> {
        self.dropped.iter().map(|d| d.swap(0, Ordering::AcqRel)).filter(|&e| e != 0).map(|e| ((e >> 32) as u32, e as u32)).collect()
    }

    pub fn wake_worker(&self) {
        let latch = self.worker_latch.load(Ordering::Acquire);
        if latch != 0 {
            // SAFETY: a PGPROC latch in shared memory; setting a latch of a
            // process that left is harmless.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }

    /// A consistent copy of the image list.
    pub fn image_list(&self) -> Vec<ImageRow> {
        loop {
            let v = self.list_version.load(Ordering::Acquire);
            if v % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let n = (self.listed.load(Ordering::Acquire) as usize).min(LISTED_IMAGES);
            // SAFETY: plain data; a torn read is detected by the version.
            let rows: Vec<ImageRow> = unsafe { (&*self.images.get())[..n].to_vec() };
            std::sync::atomic::fence(Ordering::Acquire);
            if self.list_version.load(Ordering::Acquire) == v {
                return rows;
            }
        }
    }

    /// Replaces the image list (the worker only).
    pub fn publish_images(&self, rows: &[ImageRow]) {
        self.list_version.fetch_add(1, Ordering::AcqRel);
        let n = rows.len().min(LISTED_IMAGES);
        // SAFETY: only the worker writes the list, inside the odd version.
        unsafe { (&mut *self.images.get())[..n].copy_from_slice(&rows[..n]) };
        self.listed.store(n as u32, Ordering::Release);
        self.list_version.fetch_add(1, Ordering::AcqRel);
    }
}
