//! gpuindex-engine: the index structures of gpuindex with their exact CPU
//! and GPU search, the CUDA runtime and the batch executor. It knows nothing
//! of PostgreSQL: the extension reads and writes pages and calls in here.

#[cfg(target_os = "linux")]
pub mod alloc;
pub mod art;
pub mod datasets;
pub mod executor;
pub mod external_sort;
pub mod gpics;
pub mod gpu;
pub mod gts;
pub mod hbtree;
pub mod heap_order;
pub mod keys;
pub mod pgm;
pub mod rng;
pub mod sorted_array;
pub mod timing;

/// `GPUINDEX_REQUIRE_GPU=1` turns "no GPU, skipping" into a failure in tests
/// and benchmarks.
pub fn gpu_required() -> bool {
    std::env::var("GPUINDEX_REQUIRE_GPU").is_ok_and(|v| v == "1")
}
