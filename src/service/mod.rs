//! The GPU service (docs/design.md, stage 2): one background worker,
//! started by `shared_preload_libraries`, owns the only CUDA context and
//! one copy of each index image; backends post their searches into
//! shared memory and the worker answers the requests of all of them in
//! epochs, one batch per index for each epoch.
//!
//! - `shmem`: the shared state and the request slots' protocol;
//! - `client`: the backend's side (post, wait, withdraw, ship an image);
//! - `worker`: the worker's loop: requests taken, epochs closed;
//! - `epoch`: an epoch prepared, searched (on a thread of its own, while
//!   the worker answers the epoch before) and answered;
//! - `images`: shipped images and the worker's store of them;
//! - `served`: the kinds of image served and their searches;
//! - `stats`: counters and `gpuindex_service_stats()`;
//! - `explain`: EXPLAIN ANALYZE's line on the service.
//!
//! Served now: kNN on gpu_metric (index scans' `ORDER BY v <op> q LIMIT
//! k`, `gpu_metric_knn`, the batched join's chunks); kNN scans and kNN and
//! range batches on gpu_spatial (`ORDER BY p <-> q`, `gpu_spatial_knn`, `gpuindex_nearest`,
//! `gpu_spatial_range`, `gpu_spatial_within`, the join's chunks); gpu_btree
//! and gpu_art batches' leaf hints and gpu_learned's run predictions (`=
//! ANY`, the probe functions, the join's chunks: `am::gpu_btree::service`,
//! `am::gpu_art::service`, `am::gpu_learned::service`); each where it pays
//! (`client::worth_asking`).

pub mod client;
pub mod epoch;
pub mod explain;
pub mod images;
pub mod segment;
pub mod served;
pub mod shmem;
pub mod stats;
pub mod worker;

use pgrx::pg_sys;
use pgrx::prelude::*;

/// From _PG_init: shared memory and the worker, only while the library is
/// preloaded (elsewhere the service is absent and backends search
/// themselves).
pub fn register() {
    // SAFETY: a process global set by PostgreSQL while loading.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        shmem::request();
        worker::register();
        explain::install();
        // SAFETY: _PG_init, once, in the postmaster (backends inherit it).
        unsafe {
            PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
            pg_sys::object_access_hook = Some(object_access);
        }
    }
}

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// DROP of an index (or of its table, which drops it): the service
/// releases the index's images (it has no relcache to see the drop).
#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class: pg_sys::Oid,
    object: pg_sys::Oid,
    sub: i32,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: the hook chain's contract; a catalog lookup of a relation
    // that exists until the drop completes.
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS {
            prev(access, class, object, sub, arg);
        }
        if access == pg_sys::ObjectAccessType::OAT_DROP
            && class == pg_sys::RelationRelationId
            && sub == 0
            && pg_sys::get_rel_relkind(object) == pg_sys::RELKIND_INDEX as std::ffi::c_char
        {
            if let Some(sh) = shmem::shared() {
                sh.note_dropped(pg_sys::MyDatabaseId.to_u32(), object.to_u32());
            }
        }
    }
}
