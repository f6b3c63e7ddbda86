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

/// Splitters staged in shared memory by the `Splitters` kernel (16 KiB).
const SPLITTERS: usize = 2048;
const BLOCK: u32 = 256;
/// Queries per thread in the kernels (`QPT` in sorted_lookup.cu).
const QPT: usize = 4;

/// The kernel variant (both exact; the benchmark compares them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSearch {
    /// Branchless binary search over the whole array.
    Plain,
    /// The first levels from a splitter table in shared memory.
    Splitters,
}

/// The device copy: keys plus the splitter table.
pub struct DeviceSorted {
    keys: DeviceBuffer<u64>,
    splitters: DeviceBuffer<u64>,
    nsplit: u32,
    step: u64,
}

impl DeviceSorted {
    pub fn bytes(&self) -> usize {
        self.keys.bytes() + self.splitters.bytes()
    }
}

pub struct SortedKeys {
    keys: Vec<u64>,
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
        Ok(SortedKeys { keys, device: Mutex::new(None) })
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
        let step = n.div_ceil(SPLITTERS).max(1);
        let splitters: Vec<u64> = (0..n.div_ceil(step)).map(|s| self.keys[((s + 1) * step).min(n) - 1]).collect();
        let img = Arc::new(DeviceSorted {
            keys: gpu.upload(&self.keys)?,
            nsplit: splitters.len() as u32,
            splitters: gpu.upload(&splitters)?,
            step: step as u64,
        });
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
        let per_block = BLOCK as usize * QPT;
        let grid = m.div_ceil(per_block).min(gpu.info().multiprocessors as usize * 16).max(1) as u32;
        let keys = img.keys.ptr();
        let variant = if n == 0 { GpuSearch::Plain } else { variant };
        gpu.guarded(|| {
            let launched = match variant {
                GpuSearch::Plain => {
                    let f = gpu.function(&kernels::SORTED_LOOKUP, "sorted_lower_bound")?;
                    let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
                    // SAFETY: argument list matches the kernel signature; buffers hold n keys, m queries, m outputs.
                    unsafe { stream.launch_builder(&f).arg(&keys).arg(&n).arg(&queries).arg(&m64).arg(&out).launch(cfg) }
                }
                GpuSearch::Splitters => {
                    let f = gpu.function(&kernels::SORTED_LOOKUP, "sorted_lower_bound_splitters")?;
                    let cfg = LaunchConfig {
                        grid_dim: (grid, 1, 1),
                        block_dim: (BLOCK, 1, 1),
                        shared_mem_bytes: img.nsplit * 8,
                    };
                    let sp = img.splitters.ptr();
                    // SAFETY: as above; the splitter table holds nsplit values.
                    unsafe {
                        stream
                            .launch_builder(&f)
                            .arg(&keys)
                            .arg(&n)
                            .arg(&sp)
                            .arg(&img.nsplit)
                            .arg(&img.step)
                            .arg(&queries)
                            .arg(&m64)
                            .arg(&out)
                            .launch(cfg)
                    }
                }
            };
            launched.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// Lower bounds on the GPU, queries and results crossing the bus
    /// through the chunked pipeline.
    pub fn lower_bound_gpu(
        &self,
        gpu: &Gpu,
        queries: &[u64],
        variant: GpuSearch,
        schedule: Schedule,
    ) -> Result<Vec<u64>, GpuError> {
        let mut out = vec![0u64; queries.len()];
        gpu.pipeline(
            queries,
            schedule,
            |stream, q, o, m| self.launch(gpu, stream, variant, q, o, m),
            |off, res: &[u64]| out[off..off + res.len()].copy_from_slice(res),
        )?;
        Ok(out)
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
        LowerBound { keys, variant: GpuSearch::Splitters, schedule: Schedule::default() }
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
        self.keys.lower_bound_gpu(gpu, queries, self.variant, self.schedule)
    }
}
