//! `gpuindex_device_info()` and `gpuindex_last_batch()`: what the GPU
//! runtime found, and which device ran the session's last batch.

use crate::{batch, guc};
use gpuindex_engine::gpu;
use pgrx::prelude::*;

/// Probes the GPU (creating this backend's CUDA context) and compiles the
/// kernels, reporting what was found or why nothing was.
#[pg_extern(volatile, parallel_unsafe)]
fn gpuindex_device_info() -> TableIterator<
    'static,
    (
        name!(setting, String),
        name!(gpu_found, bool),
        name!(reason, Option<String>),
        name!(name, Option<String>),
        name!(memory_mib, Option<i64>),
        name!(compute_capability, Option<String>),
        name!(multiprocessors, Option<i32>),
        name!(driver_cuda, Option<String>),
        name!(nvrtc, Option<String>),
        name!(kernels_compiled, Option<bool>),
        name!(compile_ms, Option<f64>),
    ),
> {
    let setting = guc::device_name().to_string();
    let found =
        if batch::cuda_allowed_here() { gpu::gpu() } else { Err(gpu::GpuError::Unavailable("not probed in the postmaster".into())) };
    let row = match found {
        Err(e) => (setting, false, Some(e.to_string()), None, None, None, None, None, None, None, None),
        Ok(g) => {
            let compiled = g.compile_all();
            let i = g.info();
            let reason = compiled.as_ref().err().map(|e| e.to_string());
            (
                setting,
                true,
                reason,
                Some(i.name.clone()),
                Some((i.total_memory >> 20) as i64),
                Some(format!("{}.{}", i.compute_capability.0, i.compute_capability.1)),
                Some(i.multiprocessors),
                Some(gpu::format_cuda_version(i.driver_version)),
                Some(format!("{}.{}", i.nvrtc_version.0, i.nvrtc_version.1)),
                Some(compiled.is_ok()),
                Some(g.compiled().iter().map(|c| c.millis).sum()),
            )
        }
    };
    TableIterator::once(row)
}

/// The last batch this session ran: which function, how many queries, on
/// which device, why not on the GPU when it was not, and the GPU service's
/// epoch when the service ran it.
#[pg_extern(volatile, parallel_unsafe)]
fn gpuindex_last_batch() -> TableIterator<
    'static,
    (
        name!(function, String),
        name!(queries, i64),
        name!(device, String),
        name!(cpu_reason, Option<String>),
        name!(millis, f64),
        name!(service, Option<String>),
    ),
> {
    TableIterator::new(
        batch::last_batch()
            .map(|b| (b.what.to_string(), b.queries as i64, b.device.as_str().to_string(), b.cpu_reason, b.millis, b.service)),
    )
}
