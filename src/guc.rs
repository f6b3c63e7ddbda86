//! The GUCs: `gpuindex.device`, `gpuindex.gpu_min_batch`, `gpuindex.scan_memory`,
//! the batched join's `gpuindex.enable_join` and `gpuindex.join_chunk`, the GPU
//! service's settings, and the superuser-only test switches.

use crate::batch;
use gpuindex_engine::executor::Policy;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use pgrx::PostgresGucEnum;
use std::ffi::CString;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PostgresGucEnum)]
pub enum DeviceSetting {
    #[name = c"auto"]
    Auto,
    #[name = c"cpu"]
    Cpu,
    #[name = c"gpu"]
    Gpu,
}

pub static DEVICE: GucSetting<DeviceSetting> = GucSetting::<DeviceSetting>::new(DeviceSetting::Auto);
pub static GPU_MIN_BATCH: GucSetting<i32> = GucSetting::<i32>::new(4096);
/// MB of a gpu_metric index's rows an index scan may copy into backend
/// memory to search them all at once on all cores (0: walk the pages).
pub static SCAN_MEMORY: GucSetting<i32> = GucSetting::<i32>::new(1024);
/// kB of freed large batch buffers a backend keeps for its next batches
/// (`gpuindex_engine::alloc`).
pub static RETAINED_MEMORY: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);
/// The planner may offer the batched index join (`join`).
pub static ENABLE_JOIN: GucSetting<bool> = GucSetting::<bool>::new(true);
/// Outer rows the batched index join sends to the index as one batch.
pub static JOIN_CHUNK: GucSetting<i32> = GucSetting::<i32>::new(1_048_576);
/// Memory (kB) a batch's matches may take before the batch is searched in
/// pieces of fewer queries (`am::common::search::Pieces`).
pub static BATCH_WORK_MEM: GucSetting<i32> = GucSetting::<i32>::new(1_048_576);
/// Tests only: gpu_btree leaf splits stop after their first record, as a
/// crash there would (the downlink is left for the next writer to add).
pub static DEBUG_INTERRUPT_SPLITS: GucSetting<bool> = GucSetting::<bool>::new(false);
/// Tests only: gpu_btree page deletion stops after marking a leaf
/// half-dead, as a crash there would (the next VACUUM unlinks it).
pub static DEBUG_INTERRUPT_PAGE_DELETION: GucSetting<bool> = GucSetting::<bool>::new(false);
/// Tests only: gpu_spatial merges raise an ERROR after writing their
/// leaves and nodes, before the metapage record, as a crash there would
/// leave them (the next merge starts again from the frozen delta).
pub static DEBUG_INTERRUPT_MERGES: GucSetting<bool> = GucSetting::<bool>::new(false);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PostgresGucEnum)]
pub enum ServiceSetting {
    #[name = c"auto"]
    Auto,
    #[name = c"on"]
    On,
    #[name = c"off"]
    Off,
}

/// Whether this backend sends its searches to the GPU service.
pub static SERVICE: GucSetting<ServiceSetting> = GucSetting::<ServiceSetting>::new(ServiceSetting::Auto);
/// How long a backend waits for the service's answer.
pub static SERVICE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(60_000);
/// An epoch closes when it holds this many queries...
pub static EPOCH_MAX_QUERIES: GucSetting<i32> = GucSetting::<i32>::new(1024);
/// ...or this many microseconds after its first request.
pub static EPOCH_US: GucSetting<i32> = GucSetting::<i32>::new(200);
/// MB of index images (host and device copies) the service keeps.
pub static SERVICE_MEMORY: GucSetting<i32> = GucSetting::<i32>::new(16_384);

/// Tests only: the GPU service sleeps this long before running each epoch.
pub static DEBUG_SERVICE_DELAY: GucSetting<i32> = GucSetting::<i32>::new(0);

pub fn policy() -> Policy {
    match DEVICE.get() {
        DeviceSetting::Auto => Policy::Auto,
        DeviceSetting::Cpu => Policy::Cpu,
        DeviceSetting::Gpu => Policy::Gpu,
    }
}

pub fn device_name() -> &'static str {
    match DEVICE.get() {
        DeviceSetting::Auto => "auto",
        DeviceSetting::Cpu => "cpu",
        DeviceSetting::Gpu => "gpu",
    }
}

fn set_check_message(slot: *mut *mut std::ffi::c_char, text: &str) {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    // SAFETY: GUC_check_* strings are palloc'd by convention; pstrdup copies
    // into the current memory context, as GUC_check_errdetail() does.
    unsafe { *slot = pg_sys::pstrdup(c.as_ptr()) };
}

/// `SET gpuindex.device = gpu` fails at once, with the reason, where no GPU
/// is usable. Not checked in the postmaster (which must never touch CUDA)
/// nor while reading the configuration file outside a backend.
#[pg_guard]
unsafe extern "C-unwind" fn check_device(newval: *mut i32, _extra: *mut *mut std::ffi::c_void, _source: pg_sys::GucSource::Type) -> bool {
    // SAFETY: called by PostgreSQL with the arguments its API promises.
    unsafe {
        if *newval != DeviceSetting::Gpu as i32 || !batch::cuda_allowed_here() {
            return true;
        }
        match gpuindex_engine::gpu::gpu() {
            Ok(_) => true,
            Err(e) => {
                set_check_message(std::ptr::addr_of_mut!(pg_sys::GUC_check_errdetail_string), &e.to_string());
                set_check_message(
                    std::ptr::addr_of_mut!(pg_sys::GUC_check_errhint_string),
                    "Use gpuindex.device = auto (the GPU when there is one, else the CPU) or cpu.",
                );
                false
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_retained_memory(newval: i32, _extra: *mut std::ffi::c_void) {
    #[cfg(target_os = "linux")]
    gpuindex_engine::alloc::set_retained(newval.max(0) as usize * 1024);
    #[cfg(not(target_os = "linux"))]
    let _ = newval;
}

pub fn init() {
    // SAFETY: the hooks are pg_guard'ed and never panic across the boundary.
    unsafe {
        GucRegistry::define_enum_guc_with_hooks(
            c"gpuindex.device",
            c"Where gpuindex runs batches: auto, cpu or gpu.",
            c"auto uses the GPU when one is usable and a batch holds at least gpuindex.gpu_min_batch queries, \
              else the CPU; cpu never touches CUDA; gpu always uses the GPU and fails when there is none. \
              Results are identical on either device.",
            &DEVICE,
            GucContext::Userset,
            GucFlags::default(),
            Some(check_device),
            None,
            None,
        );
        GucRegistry::define_int_guc_with_hooks(
            c"gpuindex.retained_memory",
            c"Memory of freed large batch buffers a backend keeps for its next batches.",
            c"Batches (GpuIndexJoin chunks, = ANY lists, batch functions) allocate their keys, orders and matches in \
              blocks of 1 MB and more. Freed, up to this much of them stays mapped in the backend and serves its next \
              batches without new page faults; beyond it they go back to the operating system. A kept block unused for a second \
              is the kernel's to take back when memory runs short. 0 keeps none.",
            &RETAINED_MEMORY,
            0,
            i32::MAX,
            GucContext::Userset,
            GucFlags::UNIT_KB,
            None,
            Some(assign_retained_memory),
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"gpuindex.gpu_min_batch",
        c"Smallest batch that gpuindex.device = auto sends to the GPU.",
        c"Smaller batches run on the CPU, where a kernel launch and two transfers would cost more than the work.",
        &GPU_MIN_BATCH,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.scan_memory",
        c"Largest copy of a gpu_metric index's rows that an index scan keeps in backend memory.",
        c"An L2 index scan of a tree of at least 10,000 rows searches a copy of them in memory, on all cores (or the GPU \
          under gpuindex.device = gpu), when the copy fits this many MB or the backend holds it already; otherwise it \
          walks the index pages one leaf at a time. 0 always walks the pages. The batch functions always use the copy.",
        &SCAN_MEMORY,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_bool_guc(
        c"gpuindex.enable_join",
        c"Lets the planner use the batched index join (GpuIndexJoin).",
        c"Where the inner side of a join has a gpuindex index that a join clause can probe, the planner may read the \
          outer side in chunks and probe the index once per chunk, on the GPU or on all cores, if that costs less than \
          the built-in joins.",
        &ENABLE_JOIN,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.join_chunk",
        c"Outer rows the batched index join probes the index with at once.",
        c"Larger chunks make larger GPU batches and read each inner heap page fewer times (once per chunk that \
          matches rows on it), and hold more outer rows and matches in memory (about 100 bytes a row).",
        &JOIN_CHUNK,
        1,
        16_777_216,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.batch_work_mem",
        c"Memory a batch search's matches may take in a backend.",
        c"A batch (a batch function's array, an = ANY array, a chunk of the batched join) whose matches would take more \
          (about 48 bytes a match) is searched in pieces of fewer queries, each within it; one query that alone would \
          take more raises an ERROR.",
        &BATCH_WORK_MEM,
        64,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_enum_guc(
        c"gpuindex.service",
        c"Whether this session sends its searches to the GPU service: auto, on or off.",
        c"The GPU service (a background worker started by shared_preload_libraries) owns the one CUDA context and one \
          copy of each index image, and answers the searches of all sessions in epochs, one batch each. auto sends \
          what it serves when the service runs on a GPU and gpuindex.device is not cpu, and searches in the session \
          otherwise or when the service fails; on always sends them (on the service's device, the CPU when it has no \
          GPU) and raises an ERROR when the service cannot answer; off never does.",
        &SERVICE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.service_timeout",
        c"How long a session waits for the GPU service's answer.",
        c"Past it the request is withdrawn: an ERROR under gpuindex.service = on, a search in the session under auto.",
        &SERVICE_TIMEOUT,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"gpuindex.epoch_max_queries",
        c"The GPU service closes an epoch when its requests hold this many queries.",
        c"Each epoch is one batch per index and kind of search.",
        &EPOCH_MAX_QUERIES,
        1,
        1 << 20,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.epoch_us",
        c"Microseconds after its first request that the GPU service closes an epoch.",
        c"Requests that arrive while an epoch runs wait for the next one, so under load epochs fill without waiting; \
          this bounds what a lone request waits for company.",
        &EPOCH_US,
        0,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"gpuindex.service_memory",
        c"Memory the GPU service may hold in index images (host and device copies each).",
        c"Past it the least recently used images are released; an image larger than this is not loaded (its \
          searches run in the sessions).",
        &SERVICE_MEMORY,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_bool_guc(
        c"gpuindex.debug_interrupt_splits",
        c"Tests only: gpu_btree leaf splits stop before adding their downlink, as after a crash.",
        c"The next insert that reaches such a split adds the downlink. Superuser only.",
        &DEBUG_INTERRUPT_SPLITS,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_bool_guc(
        c"gpuindex.debug_interrupt_page_deletion",
        c"Tests only: gpu_btree page deletion stops after marking a leaf half-dead, as after a crash.",
        c"The next VACUUM unlinks the half-dead leaf and the pages above it that go with it. Superuser only.",
        &DEBUG_INTERRUPT_PAGE_DELETION,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_bool_guc(
        c"gpuindex.debug_interrupt_merges",
        c"Tests only: gpu_spatial merges fail before their metapage record, as after a crash.",
        c"The next merge starts again from the frozen delta. Superuser only.",
        &DEBUG_INTERRUPT_MERGES,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_int_guc(
        c"gpuindex.debug_service_delay",
        c"Tests only: the GPU service sleeps this long before running each epoch.",
        c"Lets tests cancel, time out or terminate requests while the service holds them.",
        &DEBUG_SERVICE_DELAY,
        0,
        60_000,
        GucContext::Sighup,
        GucFlags::NO_SHOW_ALL | GucFlags::UNIT_MS,
    );
    // SAFETY: plain C call with a static string.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"gpuindex".as_ptr()) };
}
