//! gpuindex: GPU-backed index access methods for PostgreSQL.
//!
//! This crate is the PostgreSQL adapter: GUCs, SQL functions and the
//! access methods (docs/design.md). The structures and the CUDA runtime
//! live in `gpuindex-engine`, which knows nothing of PostgreSQL.
//!
//! CUDA is never touched while loading: `_PG_init` (which runs in the
//! postmaster under shared_preload_libraries) defines GUCs and reloptions
//! and registers the relcache callback and the WAL resource manager; a
//! backend creates its CUDA context at its first GPU batch.

use pgrx::prelude::*;

::pgrx::pg_module_magic!(name, version);

mod am;
mod arrays;
mod batch;
mod compat;
mod error;
mod functions;
mod guc;
mod join;
mod list;
mod retained;
mod service;
mod slot;
mod srf;
mod storage;
mod unguarded;
mod visibility;

/// Large batch buffers kept for reuse (`gpuindex.retained_memory`).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: gpuindex_engine::alloc::Allocator = gpuindex_engine::alloc::Allocator;

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    retained::register();
    guc::init();
    am::common::cache::init();
    am::gpu_btree::options::OPTIONS.register();
    storage::rmgr::register();
    am::gpu_spatial::options::OPTIONS.register();
    am::gpu_metric::options::OPTIONS.register();
    join::register();
    am::gpu_art::like_prefix::install();
    service::register();
}

/// Required by `cargo pgrx test`; gpuindex tests run through pg_regress and
/// the `tests/` crate instead.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
