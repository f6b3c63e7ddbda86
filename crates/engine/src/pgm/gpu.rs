//! G-Learned lookups on the GPU (kernels/pgm.cu): the model's segments on
//! the device, one thread per query, queries and answers crossing the bus
//! through the chunked pipeline. Two placements, as the paper measures:
//!
//! - `Keys::Host`: the GPU predicts each query's bottom-level position and
//!   the host does the last mile (±ε) over the keys in its memory, on all
//!   cores (the paper's heterogeneous split: the device holds only the
//!   model, a few KB to MB);
//! - `Keys::Device`: the keys are on the device too and the GPU returns
//!   whole lower bounds.
//!
//! And two descents (`Strategy`): every level (complete) or a binary
//! search of the bottom level (concise), each with or without the model
//! staged in shared memory first; `choose` times them on a sample, as the
//! paper's lookahead selection does.

use super::Pgm;
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// How a lookup finds its bottom segment: every level (complete) or a
/// binary search of the bottom level (concise); and whether each block
/// first stages the model in shared memory (the whole model when it fits
/// `STAGE_BYTES`, else the levels above the bottom).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Complete,
    Concise,
    CompleteStaged,
    ConciseStaged,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [Strategy::Complete, Strategy::Concise, Strategy::CompleteStaged, Strategy::ConciseStaged];

    fn concise(self) -> bool {
        matches!(self, Strategy::Concise | Strategy::ConciseStaged)
    }

    /// The first segment staged in shared memory (the segment count: none).
    pub fn staged_from(self, pgm: &Pgm) -> usize {
        let total = pgm.first.len();
        let fits = |segments: usize| segments > 0 && segments * 24 <= STAGE_BYTES;
        match self {
            Strategy::Complete | Strategy::Concise => total,
            _ if fits(total) => 0,
            _ if fits(total - pgm.levels[0].len) => pgm.levels[0].len,
            _ => total,
        }
    }
}

/// Shared memory a block may use for the staged model: the limit that
/// needs no opt-in, leaving room for several blocks per multiprocessor.
pub const STAGE_BYTES: usize = 48 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    Host,
    Device,
}

const BLOCK: u32 = 256;

/// The device copy of a model (and of its keys, for `Keys::Device`).
pub struct DevicePgm {
    first: DeviceBuffer<u64>,
    slope: DeviceBuffer<f64>,
    intercept: DeviceBuffer<f64>,
    levels: DeviceBuffer<u64>,
    keys: Option<DeviceBuffer<u64>>,
}

impl DevicePgm {
    /// Uploads `pgm`, and `keys` when given.
    pub fn upload(gpu: &Gpu, pgm: &Pgm, keys: Option<&[u64]>) -> Result<DevicePgm, GpuError> {
        let levels: Vec<u64> = pgm.levels.iter().flat_map(|l| [l.offset as u64, l.len as u64]).collect();
        Ok(DevicePgm {
            first: gpu.upload(&pgm.first)?,
            slope: gpu.upload(&pgm.slope)?,
            intercept: gpu.upload(&pgm.intercept)?,
            levels: gpu.upload(&levels)?,
            keys: keys.map(|k| gpu.upload(k)).transpose()?,
        })
    }

    /// Device bytes: the model, and the keys if held.
    pub fn bytes(&self) -> usize {
        self.first.bytes() + self.slope.bytes() + self.intercept.bytes() + self.levels.bytes() + self.keys.as_ref().map_or(0, |k| k.bytes())
    }

    /// Enqueues `m` queries at device address `queries` on `stream`: their
    /// bottom-level predictions (no keys held) or lower bounds into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        gpu: &Gpu,
        pgm: &Pgm,
        stream: &Arc<CudaStream>,
        strategy: Strategy,
        queries: u64,
        out: u64,
        m: usize,
    ) -> Result<(), GpuError> {
        let grid = m.div_ceil(BLOCK as usize).min(gpu.info().multiprocessors as usize * 32).max(1) as u32;
        let staged = strategy.staged_from(pgm);
        let smem = (pgm.first.len() - staged) * 24;
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: smem as u32 };
        let (first, slope, icpt, levels) = (self.first.ptr(), self.slope.ptr(), self.intercept.ptr(), self.levels.ptr());
        let (nlevels, eps_inner, concise, staged) =
            (pgm.levels.len() as u32, pgm.eps_inner as u64, strategy.concise() as i32, staged as u64);
        let (n, m64, eps) = (pgm.n as u64, m as u64, pgm.eps as u64);
        gpu.guarded(|| {
            let name = if self.keys.is_some() { "pgm_lower_bound" } else { "pgm_predict" };
            let f = gpu.function(&kernels::PGM, name)?;
            let mut call = stream.launch_builder(&f);
            call.arg(&first).arg(&slope).arg(&icpt).arg(&levels).arg(&nlevels).arg(&eps_inner).arg(&concise).arg(&staged);
            let keys = self.keys.as_ref().map(|k| k.ptr());
            if let Some(keys) = &keys {
                call.arg(&eps).arg(keys).arg(&n);
            } else {
                call.arg(&n);
            }
            call.arg(&queries).arg(&m64).arg(&out);
            // SAFETY: the arguments match the kernel's signature; the buffers
            // hold the model's segments and levels, n keys, m queries and m
            // outputs.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }
}

/// The lower bounds of `queries` in `keys` (the keys `pgm` was built on)
/// into `out`, through the device copy `dev`: with the keys on the device
/// the GPU answers; else it predicts and the host finishes.
pub fn lower_bound_gpu(
    gpu: &Gpu,
    pgm: &Pgm,
    dev: &DevicePgm,
    keys: &[u64],
    queries: &[u64],
    out: &mut [u64],
    strategy: Strategy,
    schedule: Schedule,
) -> Result<(), GpuError> {
    assert_eq!(queries.len(), out.len());
    if pgm.n == 0 {
        out.fill(0);
        return Ok(());
    }
    let on_device = dev.keys.is_some();
    gpu.pipeline(
        queries,
        schedule,
        |stream, q, o, m| dev.launch(gpu, pgm, stream, strategy, q, o, m),
        |off, res: &[u64]| {
            let dst = &mut out[off..off + res.len()];
            if on_device {
                gpu::copy_parallel(dst, res);
            } else {
                pgm.last_mile(keys, &queries[off..off + res.len()], res, dst);
            }
        },
    )
}

/// The faster strategy on `sample` (the paper's lookahead selection):
/// each timed three times after a warm-up, its best time counted (a
/// single timing once picked a staged variant at half the speed); staged
/// ones only where something is staged.
pub fn choose(gpu: &Gpu, pgm: &Pgm, dev: &DevicePgm, keys: &[u64], sample: &[u64]) -> Result<Strategy, GpuError> {
    let mut out = vec![0; sample.len()];
    let mut best = (f64::INFINITY, Strategy::Complete);
    let stages = |s: &Strategy| s.staged_from(pgm) < pgm.first.len() || matches!(s, Strategy::Complete | Strategy::Concise);
    for s in Strategy::ALL.into_iter().filter(stages) {
        lower_bound_gpu(gpu, pgm, dev, keys, sample, &mut out, s, Schedule::default())?;
        let mut secs = f64::INFINITY;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            lower_bound_gpu(gpu, pgm, dev, keys, sample, &mut out, s, Schedule::default())?;
            secs = secs.min(t.elapsed().as_secs_f64());
        }
        if secs < best.0 {
            best = (secs, s);
        }
    }
    Ok(best.1)
}

/// The bottom-level predictions of `queries` (what
/// `Pgm::predict_position` returns) into `out`, through `dev`, a device
/// copy without the keys: the host's last mile is the caller's (e.g. over
/// pages).
pub fn predict_gpu(gpu: &Gpu, pgm: &Pgm, dev: &DevicePgm, queries: &[u64], out: &mut [u64], schedule: Schedule) -> Result<(), GpuError> {
    assert!(queries.len() == out.len() && dev.keys.is_none());
    if pgm.n == 0 {
        out.fill(0);
        return Ok(());
    }
    gpu.pipeline(
        queries,
        schedule,
        |stream, q, o, m| dev.launch(gpu, pgm, stream, Strategy::Complete, q, o, m),
        |off, res: &[u64]| gpu::copy_parallel(&mut out[off..off + res.len()], res),
    )
}

/// Keys per chunk of the GPU build: one thread per chunk, so a thousand
/// threads or more for 10^8 keys, while each chunk costs at most one
/// segment over the sequential fit (about 1% more at ε = 16; the paper's
/// caution: chunks far longer than a segment).
pub const GPU_CHUNK: usize = 1 << 16;
/// Hull points a thread keeps per hull (a chunk whose hulls grow past
/// this is fitted on the host instead).
const HULL_CAP: u32 = 1024;

/// The model of sorted `keys` with the bottom level fitted on the GPU in
/// chunks of about `chunk` keys, one thread each (`kernels/pgm.cu`
/// `pgm_fit_chunks`), the levels above (a few thousandths of it) on the
/// host. `dev_keys`: the keys already on the device (else they are
/// uploaded). Segment for segment what `Pgm::build_chunked` returns with
/// the same `chunk`.
pub fn build_gpu(
    gpu: &Gpu,
    keys: &[u64],
    dev_keys: Option<&DeviceBuffer<u64>>,
    eps: usize,
    eps_inner: usize,
    chunk: usize,
) -> Result<Pgm, GpuError> {
    assert!(eps >= 1 && eps_inner >= 1);
    let starts = super::chunk_starts(keys, chunk);
    let nchunks = starts.len() - 1;
    if nchunks == 0 {
        return Ok(Pgm::from_bottom(0, eps, eps_inner, &[]));
    }
    // Each chunk's room: any two points fit a line, so at most half its
    // points (plus one) close a segment.
    let mut base = Vec::with_capacity(nchunks + 1);
    let mut slots = 0u64;
    for w in starts.windows(2) {
        base.push(slots);
        slots += ((w[1] - w[0]) as u64).div_ceil(2) + 1;
    }
    base.push(slots);
    let uploaded;
    let dkeys = match dev_keys {
        Some(k) => k,
        None => {
            uploaded = gpu.upload(keys)?;
            &uploaded
        }
    };
    let starts64: Vec<u64> = starts.iter().map(|&s| s as u64).collect();
    let (dstarts, dbase) = (gpu.upload(&starts64)?, gpu.upload(&base)?);
    // Two hulls of HULL_CAP (x: u64, y: i64) points per chunk.
    let scratch = gpu.alloc::<u64>(nchunks * 2 * HULL_CAP as usize * 2)?;
    let (sf, ss, si) = (gpu.alloc::<u64>(slots as usize)?, gpu.alloc::<f64>(slots as usize)?, gpu.alloc::<f64>(slots as usize)?);
    let (count, overflow) = (gpu.alloc::<u32>(nchunks)?, gpu.alloc::<i32>(nchunks)?);
    let stream = gpu.new_stream()?;
    let (kp, n64, stp, nch, eps64, scp, cap, bp) =
        (dkeys.ptr(), keys.len() as u64, dstarts.ptr(), nchunks as u32, eps as u64, scratch.ptr(), HULL_CAP, dbase.ptr());
    let (sfp, ssp, sip, cp, op) = (sf.ptr(), ss.ptr(), si.ptr(), count.ptr(), overflow.ptr());
    crate::launch!(
        gpu,
        stream,
        kernels::PGM,
        "pgm_fit_chunks",
        (nchunks.div_ceil(128), 128, 0),
        [kp, n64, stp, nch, eps64, scp, cap, bp, sfp, ssp, sip, cp, op]
    )?;
    let (counts, overflowed) = (count.download()?, overflow.download()?);
    // Pack the segments of the chunks that fitted (the others count none).
    let mut at = Vec::with_capacity(nchunks);
    let mut m = 0u64;
    for c in 0..nchunks {
        at.push(m);
        m += if overflowed[c] != 0 { 0 } else { counts[c] as u64 };
    }
    let (df, ds, di) = (gpu.alloc::<u64>(m as usize)?, gpu.alloc::<f64>(m as usize)?, gpu.alloc::<f64>(m as usize)?);
    let dat = gpu.upload(&at)?;
    let (atp, dfp, dsp, dip) = (dat.ptr(), df.ptr(), ds.ptr(), di.ptr());
    crate::launch!(gpu, stream, kernels::PGM, "pgm_pack_segments", (nchunks, 128, 0), [bp, cp, atp, sfp, ssp, sip, dfp, dsp, dip])?;
    let (first, slope, intercept) = (df.download()?, ds.download()?, di.download()?);
    let mut bottom = Vec::with_capacity(m as usize);
    for c in 0..nchunks {
        if overflowed[c] != 0 {
            bottom.extend(super::fit_range(keys, starts[c], starts[c + 1], eps));
        } else {
            let r = at[c] as usize..at[c] as usize + counts[c] as usize;
            bottom.extend(r.map(|i| super::pla::Line { first: first[i], slope: slope[i], intercept: intercept[i] }));
        }
    }
    Ok(Pgm::from_bottom(keys.len(), eps, eps_inner, &bottom))
}
