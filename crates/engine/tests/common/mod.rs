//! Shared by the engine's test files.
#![allow(dead_code)]

use gpuindex_engine::gpu::{self, Gpu};
use std::sync::Arc;

/// The GPU, or None (after saying why) when there is none and none is
/// required; with GPUINDEX_REQUIRE_GPU=1 a missing GPU fails the test.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    match gpu::gpu() {
        Ok(g) => Some(g),
        Err(e) if gpuindex_engine::gpu_required() => panic!("{test}: GPUINDEX_REQUIRE_GPU=1 but {e}"),
        Err(e) => {
            eprintln!("{test}: no GPU, skipping the GPU half ({e})");
            None
        }
    }
}
