//! A sorted u64 array searched by lower bound: the GPU floor. Every later
//! index structure is measured against binary search over a plain sorted
//! array on the same device.

use crate::executor::BatchJob;
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use parking_lot::Mutex;
use rayon::prelude::*;
use std::sync::Arc;

/// The keys are not in ascending order: `keys[position] > keys[position + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotSorted {
    pub position: usize,
}

/// Keys per window of the sampled search: the sample (one key in 64) stays
/// in L2 far longer than the array does. Measured on an H100 at n = 1e8:
/// stride 8: 3.4e9 q/s, 16: 3.9e9, 32: 4.4e9, 64: 4.6e9, 128: 4.7e9.
pub const DEFAULT_SAMPLE_STRIDE: usize = 64;
/// Queries per thread (`Q` in sorted_lookup.cu).
const QPT: usize = 4;
const BLOCK: u32 = 256;

/// The kernel variant (both exact; the benchmark compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSearch {
    /// Branchless binary search over the whole array.
    Plain,
    /// Binary search over a sample of every `stride`-th key, then one window.
    Sampled,
}

impl GpuSearch {
    pub const ALL: [GpuSearch; 2] = [GpuSearch::Plain, GpuSearch::Sampled];
}

/// The device copy: keys plus the sample.
pub struct DeviceSorted {
    keys: DeviceBuffer<u64>,
    sample: DeviceBuffer<u64>,
    stride: u64,
}

impl DeviceSorted {
    pub fn bytes(&self) -> usize {
        self.keys.bytes() + self.sample.bytes()
    }
}

pub struct SortedKeys {
    keys: Vec<u64>,
    sample_stride: usize,
    device: Mutex<Option<Arc<DeviceSorted>>>,
}

/// First index `i` with `keys[i] >= q` (`keys.len()` if none); branchless,
/// so a group of queries runs the same number of steps.
#[inline(always)]
pub fn lower_bound(keys: &[u64], q: u64) -> usize {
    let mut res = [0usize];
    lower_bound_group(keys, &[q], &mut res);
    res[0]
}

/// Lower bound of every query of `qs` (at most a few: they advance together,
/// so their memory loads overlap).
#[inline(always)]
fn lower_bound_group(keys: &[u64], qs: &[u64], out: &mut [usize]) {
    let n = keys.len();
    if n == 0 {
        out.fill(0);
        return;
    }
    let mut base = [0usize; 16];
    let g = qs.len();
    debug_assert!(g <= 16 && out.len() == g);
    let mut len = n;
    while len > 1 {
        let half = len / 2;
        for j in 0..g {
            // SAFETY: base[j] + half - 1 < base[j] + len <= n (invariant).
            let k = unsafe { *keys.get_unchecked(base[j] + half - 1) };
            base[j] = if k < qs[j] { base[j] + half } else { base[j] };
        }
        len -= half;
    }
    for j in 0..g {
        // SAFETY: base[j] < n once len == 1.
        out[j] = base[j] + (unsafe { *keys.get_unchecked(base[j]) } < qs[j]) as usize;
    }
}

impl SortedKeys {
    pub fn new(keys: Vec<u64>) -> Result<Self, NotSorted> {
        if let Some(position) = keys.windows(2).position(|w| w[0] > w[1]) {
            return Err(NotSorted { position });
        }
        Ok(SortedKeys { keys, sample_stride: DEFAULT_SAMPLE_STRIDE, device: Mutex::new(None) })
    }

    /// Sets the window of the sampled search (before the first upload).
    pub fn with_sample_stride(mut self, stride: usize) -> Self {
        self.sample_stride = stride.max(1);
        self
    }

    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Lower bounds on all cores: each rayon task walks groups of 8 queries.
    pub fn lower_bound_cpu(&self, queries: &[u64], out: &mut [u64]) {
        assert_eq!(queries.len(), out.len());
        const GROUP: usize = 8;
        queries.par_chunks(4096).zip(out.par_chunks_mut(4096)).for_each(|(qs, os)| {
            let mut tmp = [0usize; GROUP];
            for (qg, og) in qs.chunks(GROUP).zip(os.chunks_mut(GROUP)) {
                lower_bound_group(&self.keys, qg, &mut tmp[..qg.len()]);
                for (o, t) in og.iter_mut().zip(&tmp) {
                    *o = *t as u64;
                }
            }
        });
    }

    /// The device copy, uploaded at first use and kept until `self` drops.
    pub fn device_image(&self, gpu: &Gpu) -> Result<Arc<DeviceSorted>, GpuError> {
        let mut slot = self.device.lock();
        if let Some(img) = slot.as_ref() {
            return Ok(img.clone());
        }
        let n = self.keys.len();
        let stride = self.sample_stride;
        let sample: Vec<u64> = (0..n.div_ceil(stride)).map(|s| self.keys[((s + 1) * stride).min(n) - 1]).collect();
        let img = Arc::new(DeviceSorted { keys: gpu.upload(&self.keys)?, sample: gpu.upload(&sample)?, stride: stride as u64 });
        *slot = Some(img.clone());
        Ok(img)
    }

    /// Enqueues the lower bounds of `m` queries at device address `queries`
    /// into `out` (device address) on `stream`.
    pub fn launch(
        &self,
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        variant: GpuSearch,
        queries: u64,
        out: u64,
        m: usize,
    ) -> Result<(), GpuError> {
        if m == 0 {
            return Ok(());
        }
        let img = self.device_image(gpu)?;
        let n = self.keys.len() as u64;
        let m64 = m as u64;
        // Sampling needs a key; with none, the plain kernel answers 0.
        let variant = if n == 0 { GpuSearch::Plain } else { variant };
        let name = match variant {
            GpuSearch::Plain => "sorted_lower_bound",
            GpuSearch::Sampled => "sorted_lower_bound_sampled",
        };
        let per_block = BLOCK as usize * QPT;
        let grid = m.div_ceil(per_block).min(gpu.info().multiprocessors as usize * 16).max(1) as u32;
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        let keys = img.keys.ptr();
        let (sample, ns) = (img.sample.ptr(), img.sample.len() as u64);
        gpu.guarded(|| {
            let f = gpu.function(&kernels::SORTED_LOOKUP, name)?;
            let mut call = stream.launch_builder(&f);
            call.arg(&keys).arg(&n);
            if variant == GpuSearch::Sampled {
                call.arg(&sample).arg(&ns).arg(&img.stride);
            }
            call.arg(&queries).arg(&m64).arg(&out);
            // SAFETY: the arguments match the kernel's signature; the buffers hold
            // n keys, ns samples, m queries and m outputs.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// Lower bounds on the GPU into `out`, queries and results crossing the
    /// bus through the chunked pipeline.
    pub fn lower_bound_gpu(
        &self,
        gpu: &Gpu,
        queries: &[u64],
        out: &mut [u64],
        variant: GpuSearch,
        schedule: Schedule,
    ) -> Result<(), GpuError> {
        assert_eq!(queries.len(), out.len());
        gpu.pipeline(
            queries,
            schedule,
            |stream, q, o, m| self.launch(gpu, stream, variant, q, o, m),
            |off, res: &[u64]| gpu::copy_parallel(&mut out[off..off + res.len()], res),
        )
    }
}

/// `submit`-able lower-bound batch over a sorted array.
pub struct LowerBound<'a> {
    pub keys: &'a SortedKeys,
    pub variant: GpuSearch,
    pub schedule: Schedule,
}

impl<'a> LowerBound<'a> {
    pub fn new(keys: &'a SortedKeys) -> Self {
        LowerBound { keys, variant: GpuSearch::Sampled, schedule: Schedule::default() }
    }
}

impl BatchJob for LowerBound<'_> {
    type Query = u64;
    type Output = u64;

    fn run_cpu(&self, queries: &[u64]) -> Vec<u64> {
        let mut out = vec![0; queries.len()];
        self.keys.lower_bound_cpu(queries, &mut out);
        out
    }

    fn run_gpu(&self, gpu: &Gpu, queries: &[u64]) -> Result<Vec<u64>, GpuError> {
        let mut out = vec![0; queries.len()];
        self.keys.lower_bound_gpu(gpu, queries, &mut out, self.variant, self.schedule)?;
        Ok(out)
    }
}
