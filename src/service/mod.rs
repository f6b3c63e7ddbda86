//! The GPU service (docs/design.md, stage 2): one background worker,
//! started by `shared_preload_libraries`, owns the only CUDA context and
//! one copy of each index image; backends post their searches into
//! shared memory and the worker answers the requests of all of them in
//! epochs, one batch per index for each epoch.
//!
//! - `shmem`: the shared state and the request slots' protocol;
//! - `client`: the backend's side (post, wait, withdraw, ship an image);
//! - `worker`: the worker's loop and its epochs;
//! - `images`: shipped images and the worker's store of them;
//! - `stats`: counters and `gpuindex_service_stats()`.
//!
//! Served now: gpu_metric kNN (index scans' `ORDER BY v <op> q LIMIT k`).

pub mod client;
pub mod images;
pub mod segment;
pub mod shmem;
pub mod stats;
pub mod worker;

/// From _PG_init: shared memory and the worker, only while the library is
/// preloaded (elsewhere the service is absent and backends search
/// themselves).
pub fn register() {
    // SAFETY: a process global set by PostgreSQL while loading.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        shmem::request();
        worker::register();
    }
}
