//! Stable radix sort of (u64 key, u32 value) pairs on the device
//! (kernels/sort.cu): what a GPU build sorts by, since cudarc has no CUB.

use super::kernels::SORT;
use super::{scan, DeviceBuffer, Gpu, GpuError};
use crate::launch;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// sort.cu's THREADS and TILE.
const THREADS: usize = 256;
const TILE: usize = THREADS * 16;

/// Sorts the first `n` pairs of (`keys`, `vals`) by bits `[0, bits)` of
/// their keys, stably (pairs with equal such bits keep their order), eight
/// bits a pass; returns the sorted buffers (the inputs are reused).
pub fn sort_pairs(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    mut keys: DeviceBuffer<u64>,
    mut vals: DeviceBuffer<u32>,
    n: usize,
    bits: u32,
) -> Result<(DeviceBuffer<u64>, DeviceBuffer<u32>), GpuError> {
    if n < 2 || bits == 0 {
        return Ok((keys, vals));
    }
    let blocks = n.div_ceil(TILE);
    let hist = gpu.alloc::<u32>(THREADS * blocks)?;
    let (mut keys2, mut vals2) = (gpu.alloc::<u64>(n)?, gpu.alloc::<u32>(n)?);
    let n64 = n as u64;
    let bits = bits.min(64);
    for shift in (0..bits).step_by(8) {
        let (kp, vp, hp, k2, v2) = (keys.ptr(), vals.ptr(), hist.ptr(), keys2.ptr(), vals2.ptr());
        let digit = (1u32 << (bits - shift).min(8)) - 1;
        launch!(gpu, stream, SORT, "radix_histogram", (blocks, THREADS, 0), [kp, n64, shift, digit, hp])?;
        let (offsets, _) = scan(gpu, stream, &hist, THREADS * blocks)?;
        let op = offsets.ptr();
        launch!(gpu, stream, SORT, "radix_scatter", (blocks, THREADS, 0), [kp, vp, n64, shift, digit, op, k2, v2])?;
        // The scan of the next pass (or the caller) waits for this one.
        std::mem::swap(&mut keys, &mut keys2);
        std::mem::swap(&mut vals, &mut vals2);
        gpu.guarded(|| stream.synchronize().map_err(super::driver_error("cuStreamSynchronize")))?;
    }
    Ok((keys, vals))
}

/// The bits that order f64 values as `f64::total_cmp` does, as a u64.
pub fn f64_order_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}
