//! CuART lookups on the GPU (kernels/art.cu): the flat arrays uploaded
//! once, queries sent as fixed-width records through the chunked pipeline
//! (H2D, kernel, D2H overlapped on several streams), one thread per query.
//! A query longer than the record width is answered on the host (the
//! paper's first long-key policy); the tree's own long keys are compared
//! on the device against the tail heap.

use super::{Art, ByteKeys, NOT_FOUND};
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use std::sync::Arc;

/// Kernel answer: the query did not fit its record; the host answers it.
pub const ON_HOST: u64 = u64::MAX - 1;

/// The widest query record, in key bytes: longer queries go to the host.
pub const MAX_WIDTH: usize = 256;

const BLOCK: u32 = 256;

/// Queries as fixed-width records: a length word, then the bytes
/// zero-padded to `width` (a multiple of 8).
pub struct Records {
    pub words: Vec<u64>,
    /// Words per record.
    pub stride: usize,
}

impl Records {
    /// The narrowest width that holds every query (at most `MAX_WIDTH`).
    pub fn width_for(queries: &ByteKeys) -> usize {
        let longest = (0..queries.len()).into_par_iter().map(|i| queries.get(i).len()).max().unwrap_or(0);
        longest.div_ceil(8).clamp(1, MAX_WIDTH / 8) * 8
    }

    pub fn new(queries: &ByteKeys, width: usize) -> Records {
        assert!(width % 8 == 0 && width > 0);
        let stride = 1 + width / 8;
        let mut words = vec![0u64; stride * queries.len()];
        words.par_chunks_mut(stride).enumerate().with_min_len(1024).for_each(|(i, r)| {
            let q = queries.get(i);
            r[0] = q.len() as u64;
            if q.len() <= width {
                for (w, c) in r[1..].iter_mut().zip(q.chunks(8)) {
                    let mut b = [0u8; 8];
                    b[..c.len()].copy_from_slice(c);
                    *w = u64::from_ne_bytes(b);
                }
            }
        });
        Records { words, stride }
    }

    pub fn len(&self) -> usize {
        self.words.len() / self.stride
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// The device copy of a tree.
pub struct DeviceArt {
    lut_depth: u32,
    lut: DeviceBuffer<u64>,
    nodes: [DeviceBuffer<u8>; 4],
    leaves: [DeviceBuffer<u64>; 4],
    tails: DeviceBuffer<u64>,
}

fn as_words<T: Copy>(v: &[T]) -> &[u64] {
    assert!(std::mem::size_of::<T>() % 8 == 0 && std::mem::align_of::<T>() >= 8);
    // SAFETY: T is a whole number of words, aligned for u64; the leaf
    // records have no uninitialised padding (their pads are fields).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u64, std::mem::size_of_val(v) / 8) }
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: node records are repr(C) with explicit pads and no implicit
    // padding (sizes checked in tests), so every byte is initialised.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl DeviceArt {
    pub fn upload(gpu: &Gpu, art: &Art) -> Result<DeviceArt, GpuError> {
        Ok(DeviceArt {
            lut_depth: art.lut_depth as u32,
            lut: gpu.upload(&art.lut)?,
            nodes: [gpu.upload(as_bytes(&art.n4))?, gpu.upload(as_bytes(&art.n16))?, gpu.upload(as_bytes(&art.n48))?, gpu.upload(as_bytes(&art.n256))?],
            leaves: [
                gpu.upload(as_words(&art.leaf8))?,
                gpu.upload(as_words(&art.leaf16))?,
                gpu.upload(as_words(&art.leaf32))?,
                gpu.upload(as_words(&art.leaf_long))?,
            ],
            tails: gpu.upload(&art.tails)?,
        })
    }

    /// Device bytes.
    pub fn bytes(&self) -> usize {
        self.lut.bytes() + self.nodes.iter().map(|b| b.bytes()).sum::<usize>() + self.leaves.iter().map(|b| b.bytes()).sum::<usize>() + self.tails.bytes()
    }

    /// Enqueues `m` lookups of the records (`stride` words each) at device
    /// address `queries` into `out` on `stream`.
    pub fn launch(&self, gpu: &Gpu, stream: &Arc<CudaStream>, queries: u64, stride: usize, out: u64, m: usize) -> Result<(), GpuError> {
        let cfg = launch_config(gpu, m);
        let [n4, n16, n48, n256] = self.nodes.each_ref().map(|b| b.ptr());
        let [l8, l16, l32, llong] = self.leaves.each_ref().map(|b| b.ptr());
        let (lut, tails, stride, m) = (self.lut.ptr(), self.tails.ptr(), stride as u32, m as u64);
        gpu.guarded(|| {
            let f = gpu.function(&kernels::ART, "art_lookup")?;
            let mut call = stream.launch_builder(&f);
            call.arg(&lut).arg(&self.lut_depth).arg(&n4).arg(&n16).arg(&n48).arg(&n256);
            call.arg(&l8).arg(&l16).arg(&l32).arg(&llong).arg(&tails);
            call.arg(&queries).arg(&stride).arg(&m).arg(&out);
            // SAFETY: the arguments match the kernel's signature; the
            // buffers hold the tree's arrays, m records and m outputs.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }
}

fn launch_config(gpu: &Gpu, m: usize) -> LaunchConfig {
    let grid = m.div_ceil(BLOCK as usize).min(gpu.info().multiprocessors as usize * 64).max(1) as u32;
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// Finishes a chunk of kernel answers: copies them out, answering on the
/// host the queries that did not fit their records.
fn finish(out: &mut [u64], res: &[u64], on_host: impl Fn(usize) -> u64 + Sync) {
    gpu::copy_parallel(out, res);
    out.par_iter_mut().enumerate().with_min_len(4096).filter(|(_, o)| **o == ON_HOST).for_each(|(i, o)| *o = on_host(i));
}

/// `Art::lookup_cpu` on the GPU: the value of each query (`recs`, built
/// from `queries`) or `NOT_FOUND`, into `out`.
pub fn lookup_gpu(
    gpu: &Gpu,
    art: &Art,
    dev: &DeviceArt,
    queries: &ByteKeys,
    recs: &Records,
    out: &mut [u64],
    schedule: Schedule,
) -> Result<(), GpuError> {
    assert!(recs.len() == out.len() && queries.len() == out.len());
    gpu.pipeline_grouped(
        &recs.words,
        recs.stride,
        schedule,
        |stream, q, o, m| dev.launch(gpu, stream, q, recs.stride, o, m),
        |off, res: &[u64]| finish(&mut out[off..off + res.len()], res, |i| art.get(queries.get(off + i)).unwrap_or(NOT_FOUND)),
    )
}

/// The GPU floor: the sorted keys uploaded as they are (bytes and ends).
pub struct DeviceSortedStrings {
    data: DeviceBuffer<u8>,
    ends: DeviceBuffer<u64>,
    n: u64,
}

impl DeviceSortedStrings {
    pub fn upload(gpu: &Gpu, keys: &ByteKeys) -> Result<DeviceSortedStrings, GpuError> {
        let (data, ends) = keys.parts();
        Ok(DeviceSortedStrings { data: gpu.upload(data)?, ends: gpu.upload(ends)?, n: keys.len() as u64 })
    }

    pub fn bytes(&self) -> usize {
        self.data.bytes() + self.ends.bytes()
    }

    pub fn launch(&self, gpu: &Gpu, stream: &Arc<CudaStream>, queries: u64, stride: usize, out: u64, m: usize) -> Result<(), GpuError> {
        let cfg = launch_config(gpu, m);
        let (data, ends, stride, m) = (self.data.ptr(), self.ends.ptr(), stride as u32, m as u64);
        gpu.guarded(|| {
            let f = gpu.function(&kernels::ART, "sorted_strings_lookup")?;
            let mut call = stream.launch_builder(&f);
            call.arg(&data).arg(&ends).arg(&self.n).arg(&queries).arg(&stride).arg(&m).arg(&out);
            // SAFETY: as for `DeviceArt::launch`.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// Each query's rank among the sorted `keys`, or `NOT_FOUND`.
    pub fn lookup_gpu(&self, gpu: &Gpu, keys: &ByteKeys, queries: &ByteKeys, recs: &Records, out: &mut [u64], schedule: Schedule) -> Result<(), GpuError> {
        let exact = |q: &[u8]| {
            let i = keys.lower_bound(q);
            if i < keys.len() && keys.get(i) == q {
                i as u64
            } else {
                NOT_FOUND
            }
        };
        gpu.pipeline_grouped(
            &recs.words,
            recs.stride,
            schedule,
            |stream, q, o, m| self.launch(gpu, stream, q, recs.stride, o, m),
            |off, res: &[u64]| finish(&mut out[off..off + res.len()], res, |i| exact(queries.get(off + i))),
        )
    }
}
