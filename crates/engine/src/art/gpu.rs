//! CuART lookups on the GPU (kernels/art.cu): the flat arrays uploaded
//! once, queries sent as fixed-width records through the chunked pipeline
//! (H2D, kernel, D2H overlapped on several streams), one thread per query.
//! A query longer than the record width is answered on the host (the
//! paper's first long-key policy); the tree's own long keys are compared
//! on the device against the tail heap.

use super::{Art, ByteKeys, NOT_FOUND, RECORD_BYTES, TOMBSTONE, VALUE_MASK};
use crate::gpu::{self, kernels, DeviceBuffer, Gpu, GpuError, Schedule};
use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use std::sync::Arc;

/// Kernel answer: the query did not fit its record; the host answers it.
pub const ON_HOST: u64 = u64::MAX - 1;

/// The widest query record, in key bytes: longer queries go to the host.
pub const MAX_WIDTH: usize = 256;

const BLOCK: u32 = 256;

/// How queries travel: records of `width` key bytes (a multiple of 8),
/// zero-padded, after a length word; or, when every query of a batch has
/// the same length `width` (uuids, int8), the bytes alone (`fixed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub width: usize,
    pub fixed: bool,
}

impl Format {
    /// Words per record.
    pub fn stride(self) -> usize {
        self.width / 8 + !self.fixed as usize
    }

    /// The kernels' `fixed` argument: the common length, or 0.
    fn fixed_len(self) -> u32 {
        if self.fixed {
            self.width as u32
        } else {
            0
        }
    }

    /// The cheapest format for `queries`: fixed when they all have one
    /// length (a multiple of 8, at most `MAX_WIDTH`), else the record width
    /// that costs least: each byte of width is sent for every query, while
    /// a query left out is answered on the host, overlapped with the
    /// device, for about what `HOST_BYTES` bytes of bus cost (16 cores at
    /// ~5e7 lookups/s against ~25 GB/s). A few long words then do not widen
    /// every record of a batch of short ones, and long queries in bulk do.
    pub fn for_queries(queries: &ByteKeys) -> Format {
        const HOST_BYTES: usize = 256;
        if let Some(f) = Self::fixed_for(queries) {
            return f;
        }
        let words = MAX_WIDTH / 8;
        let hist = (0..queries.len())
            .into_par_iter()
            .fold(
                || vec![0usize; words + 2],
                |mut h, i| {
                    h[queries.get(i).len().div_ceil(8).min(words + 1)] += 1;
                    h
                },
            )
            .reduce(|| vec![0usize; words + 2], |a, b| a.iter().zip(&b).map(|(x, y)| x + y).collect());
        let mut longer = queries.len() - hist[0];
        let mut best = (usize::MAX, 8);
        for (w, count) in hist.iter().enumerate().take(words + 1).skip(1) {
            longer -= count;
            let cost = queries.len() * (8 + 8 * w) + longer * HOST_BYTES;
            if cost < best.0 {
                best = (cost, 8 * w);
            }
        }
        Format { width: best.1, fixed: false }
    }

    fn fixed_for(queries: &ByteKeys) -> Option<Format> {
        let len = queries.iter().next()?.len();
        let same = (0..queries.len()).into_par_iter().all(|i| queries.get(i).len() == len);
        (same && len > 0 && len.is_multiple_of(8) && len <= MAX_WIDTH).then_some(Format { width: len, fixed: true })
    }

    /// A format that holds every query (none answered on the host), or
    /// None if one is longer than `MAX_WIDTH`.
    pub fn exact(queries: &ByteKeys) -> Option<Format> {
        if let Some(f) = Self::fixed_for(queries) {
            return Some(f);
        }
        let longest = (0..queries.len()).into_par_iter().map(|i| queries.get(i).len()).max().unwrap_or(0);
        (longest <= MAX_WIDTH).then(|| Format { width: longest.div_ceil(8).max(1) * 8, fixed: false })
    }

    /// Writes queries `first..` as records into `words` (as many as it
    /// holds), on all cores.
    fn encode(self, queries: &ByteKeys, first: usize, words: &mut [u64]) {
        assert!(self.width.is_multiple_of(8) && self.width > 0);
        if self.fixed {
            // Keys of one length lie back to back in the batch: already
            // the wire form, a plain copy.
            // SAFETY: u64 words viewed as bytes (any bits valid, no padding).
            let dst = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, std::mem::size_of_val(words)) };
            let at = first * self.width;
            gpu::copy_parallel(dst, &queries.parts().0[at..at + dst.len()]);
            return;
        }
        words.par_chunks_mut(self.stride()).enumerate().with_min_len(1024).for_each(|(i, r)| {
            let q = queries.get(first + i);
            r.fill(0);
            let bytes = if self.fixed {
                &mut r[..]
            } else {
                r[0] = q.len() as u64;
                &mut r[1..]
            };
            if q.len() <= self.width {
                for (w, c) in bytes.iter_mut().zip(q.chunks(8)) {
                    let mut b = [0u8; 8];
                    b[..c.len()].copy_from_slice(c);
                    *w = u64::from_ne_bytes(b);
                }
            }
        });
    }
}

/// A batch of queries encoded once (for updates and kernel timings).
pub struct Records {
    pub words: Vec<u64>,
    pub format: Format,
}

impl Records {
    pub fn new(queries: &ByteKeys, format: Format) -> Records {
        let mut words = vec![0u64; format.stride() * queries.len()];
        format.encode(queries, 0, &mut words);
        Records { words, format }
    }

    pub fn len(&self) -> usize {
        self.words.len() / self.format.stride()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}

/// The device copy of a tree: its ten arrays (`Art::array_bytes`), each
/// with room to grow by inserts before it must be reallocated.
pub struct DeviceArt {
    lut_depth: u32,
    arrays: Vec<DeviceBuffer<u8>>,
    /// The arrays' device addresses, the kernels' tree arguments after
    /// `lut_depth`.
    args: [u64; 10],
    /// The root table's occupied slots (lower bounds' next slot) and the
    /// key count (the lower bound past every key).
    slots: DeviceBuffer<u32>,
    n: u64,
}

/// A value update that deletes: sets the tombstone, keeps the value.
pub const DELETE: u64 = TOMBSTONE;

impl DeviceArt {
    pub fn upload(gpu: &Gpu, art: &Art) -> Result<DeviceArt, GpuError> {
        let (slots, n) = (gpu.upload(&art.slots)?, art.n as u64);
        let mut dev = DeviceArt { lut_depth: art.lut_depth as u32, arrays: Vec::with_capacity(10), args: [0; 10], slots, n };
        let stream = gpu.new_stream()?;
        for a in 0..10 {
            dev.arrays.push(Self::upload_array(gpu, art.array_bytes(a), &stream)?);
            dev.args[a] = dev.arrays[a].ptr();
        }
        gpu.guarded(|| stream.synchronize().map_err(gpu::driver_error("cuStreamSynchronize")))?;
        Ok(dev)
    }

    /// A device buffer for `bytes` with an eighth more room, their copy
    /// enqueued on `stream` (`bytes` must stay as they are until it syncs).
    fn upload_array(gpu: &Gpu, bytes: &[u8], stream: &CudaStream) -> Result<DeviceBuffer<u8>, GpuError> {
        let buf = gpu.alloc::<u8>(bytes.len() + bytes.len() / 8 + 4096)?;
        buf.write_async(bytes, stream)?;
        Ok(buf)
    }

    /// Device bytes (the arrays with their room to grow).
    pub fn bytes(&self) -> usize {
        self.arrays.iter().map(|b| b.bytes()).sum()
    }

    /// Brings the device copy up to date with the inserts (and host
    /// updates) made on `art` since it was uploaded or last refreshed:
    /// per array, the records they wrote are packed into one buffer, sent
    /// in one copy and scattered into place by a kernel (an array mostly
    /// rewritten is sent whole; the tail heap only grows, its new end is
    /// sent); an array that outgrew its room is reallocated. Returns the
    /// bytes sent.
    pub fn refresh(&mut self, gpu: &Gpu, art: &mut Art) -> Result<usize, GpuError> {
        let dirty = std::mem::take(&mut art.dirty);
        let mut sent = 0;
        if !dirty.records[0].is_empty() {
            self.slots = gpu.upload(&art.slots)?;
            sent += self.slots.bytes();
        }
        self.n = art.n as u64;
        let stream = gpu.new_stream()?;
        let mut staging = Vec::new(); // kept alive until the stream is done
        for (a, &size) in RECORD_BYTES.iter().enumerate() {
            let host = art.array_bytes(a);
            if host.len() > self.arrays[a].len() {
                self.arrays[a] = Self::upload_array(gpu, host, &stream)?;
                self.args[a] = self.arrays[a].ptr();
                sent += host.len();
                continue;
            }
            if a == 9 {
                if let Some(from) = dirty.tails_from {
                    self.arrays[a].write_at_async(from * size, &host[from * size..], &stream)?;
                    sent += host.len() - from * size;
                }
                continue;
            }
            let mut records = dirty.records[a].clone();
            records.sort_unstable();
            records.dedup();
            if records.is_empty() {
                continue;
            }
            if 2 * records.len() * size > host.len() {
                self.arrays[a].write_async(host, &stream)?;
                sent += host.len();
                continue;
            }
            let mut packed = Vec::with_capacity(records.len() * size / 8);
            for &r in &records {
                let rec = &host[r * size..(r + 1) * size];
                packed.extend(rec.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes"))));
            }
            let at: Vec<u64> = records.iter().map(|&r| r as u64).collect();
            let (src, idx) = (gpu.upload(&packed)?, gpu.upload(&at)?);
            let (dst, n, words) = (self.arrays[a].ptr(), at.len() as u64, (size / 8) as u32);
            let (srcp, idxp) = (src.ptr(), idx.ptr());
            crate::launch!(
                gpu,
                stream,
                kernels::ART,
                "art_scatter",
                ((packed.len()).div_ceil(256).min(65_535), 256, 0),
                [dst, srcp, idxp, n, words]
            )?;
            sent += packed.len() * 8 + at.len() * 8;
            staging.push((src, idx));
        }
        gpu.guarded(|| stream.synchronize().map_err(gpu::driver_error("cuStreamSynchronize")))?;
        drop(staging);
        Ok(sent)
    }

    /// Launches kernel `name` on `stream` over `m` items with the tree's
    /// arguments first, then `rest` (device addresses and scalars, as u64
    /// or u32 places that outlive the launch).
    fn launch_tree(&self, gpu: &Gpu, stream: &Arc<CudaStream>, name: &'static str, m: usize, rest: &[&dyn Arg]) -> Result<(), GpuError> {
        let cfg = launch_config(gpu, m);
        gpu.guarded(|| {
            let f = gpu.function(&kernels::ART, name)?;
            let mut call = stream.launch_builder(&f);
            call.arg(&self.lut_depth);
            self.args.iter().for_each(|a| {
                call.arg(a);
            });
            rest.iter().for_each(|a| a.push(&mut call));
            // SAFETY: the tree's arguments match TREE_PARAMS; callers pass
            // the rest of the kernel's signature, with buffers sized for m.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// Enqueues `m` lookups (or lower bounds) of the records (in
    /// `format`) at device address `queries` into `out` on `stream`.
    pub fn launch(
        &self,
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        op: Op,
        queries: u64,
        format: Format,
        out: u64,
        m: usize,
    ) -> Result<(), GpuError> {
        let (stride, fixed, m64) = (format.stride() as u32, format.fixed_len(), m as u64);
        match op {
            Op::Lookup => self.launch_tree(gpu, stream, "art_lookup", m, &[&queries, &stride, &fixed, &m64, &out]),
            Op::LowerBound => {
                let (slots, nslots) = (self.slots.ptr(), self.slots.len() as u64);
                self.launch_tree(gpu, stream, "art_lower_bound", m, &[&slots, &nslots, &self.n, &queries, &stride, &fixed, &m64, &out])
            }
        }
    }

    /// CuART's batched value update on the device copy: key `i` of `recs`
    /// gets `values[i]` (or `DELETE`), the last of a key's updates in the
    /// batch winning; absent keys are skipped. Every key must fit its
    /// record (`Format::exact`). Returns the leaves written.
    /// Takes `&mut self`: batches on one copy run one after another, or
    /// the last writer of one could land before another's (pitfall 7).
    pub fn update(&mut self, gpu: &Gpu, recs: &Records, values: &[u64]) -> Result<u64, GpuError> {
        let m = recs.len();
        assert_eq!(values.len(), m);
        assert!(m < u32::MAX as usize, "positions are 32-bit");
        assert!(values.iter().all(|&v| v <= VALUE_MASK || v == DELETE));
        if m == 0 {
            return Ok(0);
        }
        let slots = (2 * m).next_power_of_two();
        let stream = gpu.new_stream()?;
        let queries = gpu.upload(&recs.words)?;
        let vals = gpu.upload(values)?;
        let locs = gpu.alloc::<u64>(m)?;
        let keys = gpu.alloc::<u64>(slots)?;
        let pos = gpu.alloc::<u32>(slots)?;
        let written = gpu.upload(&[0u64])?;
        keys.fill_bytes_async(0xFF, &stream)?;
        pos.fill_bytes_async(0, &stream)?;
        let (q, v, l, k, p, w) = (queries.ptr(), vals.ptr(), locs.ptr(), keys.ptr(), pos.ptr(), written.ptr());
        let (stride, fixed, m64, mask) = (recs.format.stride() as u32, recs.format.fixed_len(), m as u64, slots as u64 - 1);
        self.launch_tree(gpu, &stream, "art_update_locate", m, &[&q, &stride, &fixed, &m64, &l, &k, &p, &mask])?;
        self.launch_tree(gpu, &stream, "art_update_write", m, &[&l, &v, &m64, &k, &p, &mask, &w])?;
        gpu.guarded(|| stream.synchronize().map_err(gpu::driver_error("cuStreamSynchronize")))?;
        Ok(written.download()?[0])
    }
}

/// A kernel argument that pushes itself onto a launch.
trait Arg {
    fn push<'a>(&'a self, call: &mut cudarc::driver::LaunchArgs<'a>);
}

impl<T: cudarc::driver::DeviceRepr> Arg for T {
    fn push<'a>(&'a self, call: &mut cudarc::driver::LaunchArgs<'a>) {
        call.arg(self);
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

/// What a batch asks of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `Art::get`: the value, or `NOT_FOUND`.
    Lookup,
    /// `Art::lower_bound`.
    LowerBound,
}

/// `op` for each query on the GPU, into `out`: what `Art::lookup_cpu` or
/// `Art::lower_bound` answers. The queries are encoded in `format`
/// (`Format::for_queries`) straight into the pipeline's pinned buffers,
/// chunk by chunk, while the device works on the chunks before.
#[allow(clippy::too_many_arguments)]
pub fn search_gpu(
    gpu: &Gpu,
    art: &Art,
    dev: &DeviceArt,
    op: Op,
    queries: &ByteKeys,
    format: Format,
    out: &mut [u64],
    schedule: Schedule,
) -> Result<(), GpuError> {
    assert_eq!(queries.len(), out.len());
    let on_host = |q: &[u8]| match op {
        Op::Lookup => art.get(q).unwrap_or(NOT_FOUND),
        Op::LowerBound => art.lower_bound(q),
    };
    gpu.pipeline_filled(
        queries.len(),
        format.stride(),
        schedule,
        |first, words: &mut [u64]| format.encode(queries, first, words),
        |stream, q, o, m| dev.launch(gpu, stream, op, q, format, o, m),
        |off, res: &[u64]| finish(&mut out[off..off + res.len()], res, |i| on_host(queries.get(off + i))),
    )
}

/// `search_gpu` of lookups.
pub fn lookup_gpu(
    gpu: &Gpu,
    art: &Art,
    dev: &DeviceArt,
    queries: &ByteKeys,
    format: Format,
    out: &mut [u64],
    schedule: Schedule,
) -> Result<(), GpuError> {
    search_gpu(gpu, art, dev, Op::Lookup, queries, format, out, schedule)
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

    pub fn launch(&self, gpu: &Gpu, stream: &Arc<CudaStream>, queries: u64, format: Format, out: u64, m: usize) -> Result<(), GpuError> {
        let cfg = launch_config(gpu, m);
        let (data, ends, m) = (self.data.ptr(), self.ends.ptr(), m as u64);
        let (stride, fixed) = (format.stride() as u32, format.fixed_len());
        gpu.guarded(|| {
            let f = gpu.function(&kernels::ART, "sorted_strings_lookup")?;
            let mut call = stream.launch_builder(&f);
            call.arg(&data).arg(&ends).arg(&self.n).arg(&queries).arg(&stride).arg(&fixed).arg(&m).arg(&out);
            // SAFETY: as for `DeviceArt::launch`.
            unsafe { call.launch(cfg) }.map(|_| ()).map_err(gpu::driver_error("cuLaunchKernel"))
        })
    }

    /// Each query's rank among the sorted `keys`, or `NOT_FOUND`.
    pub fn lookup_gpu(
        &self,
        gpu: &Gpu,
        keys: &ByteKeys,
        queries: &ByteKeys,
        format: Format,
        out: &mut [u64],
        schedule: Schedule,
    ) -> Result<(), GpuError> {
        let exact = |q: &[u8]| keys.position(q).map_or(NOT_FOUND, |i| i as u64);
        gpu.pipeline_filled(
            queries.len(),
            format.stride(),
            schedule,
            |first, words: &mut [u64]| format.encode(queries, first, words),
            |stream, q, o, m| self.launch(gpu, stream, q, format, o, m),
            |off, res: &[u64]| finish(&mut out[off..off + res.len()], res, |i| exact(queries.get(off + i))),
        )
    }
}
