//! Exclusive prefix sums on the device (kernels/scan.cu): how every
//! structure sizes an output by a count pass before writing it.

use super::kernels::SCAN;
use super::{DeviceBuffer, Gpu, GpuError};
use crate::launch;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// Exclusive scan of the first `n` counts of `input` into `n + 1` offsets
/// (the total last), on `stream`; returns the offsets and the total.
pub fn scan(gpu: &Gpu, stream: &Arc<CudaStream>, input: &DeviceBuffer<u32>, n: usize) -> Result<(DeviceBuffer<u64>, u64), GpuError> {
    let out = gpu.alloc::<u64>(n + 1)?;
    let blocks = n.div_ceil(1024).max(1);
    let sums = gpu.alloc::<u64>(blocks)?;
    let (inp, outp, sump, n64) = (input.ptr(), out.ptr(), sums.ptr(), n as u64);
    launch!(gpu, stream, SCAN, "scan_blocks", (blocks, 256, 0), [inp, n64, outp, sump])?;
    let host = sums.download()?;
    let mut off = Vec::with_capacity(blocks);
    let mut total = 0u64;
    for s in host {
        off.push(total);
        total += s;
    }
    let off = gpu.upload(&off)?;
    let offp = off.ptr();
    let grid = n.max(1).div_ceil(256).clamp(1, gpu.info().multiprocessors as usize * 32);
    launch!(gpu, stream, SCAN, "scan_add", (grid, 256, 0), [outp, n64, offp, total])?;
    gpu.guarded(|| stream.synchronize().map_err(super::driver_error("cuStreamSynchronize")))?;
    Ok((out, total))
}
