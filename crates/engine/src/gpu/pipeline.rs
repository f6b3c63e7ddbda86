//! The chunked, double-buffered batch pipeline (HB+-tree's bucket schedule):
//! a batch is cut into chunks; each chunk is copied into pinned memory,
//! sent to the device, processed by a kernel and copied back on its own
//! stream, and while the device works on chunk i+1 the host consumes the
//! results of chunk i. `in_flight` = 1 is the sequential schedule, 2 the
//! double-buffered one, 3 keeps a kernel queued behind the running one.

use super::error::{catch, GpuError};
use super::memory::{DeviceBuffer, PinnedBuffer};
use super::Gpu;
use cudarc::driver::CudaStream;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// Plain data that may cross to the device as raw bytes.
///
/// # Safety
/// Implementors must be `repr(C)` (or primitive), have no padding bytes and
/// no pointers, and be valid for any bit pattern.
pub unsafe trait Plain: Copy + Default + Send + Sync + 'static {}
unsafe impl Plain for u8 {}
unsafe impl Plain for u32 {}
unsafe impl Plain for u64 {}
unsafe impl Plain for i32 {}
unsafe impl Plain for i64 {}
unsafe impl Plain for f32 {}
unsafe impl Plain for f64 {}

/// How a batch is cut and overlapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Queries per chunk (HB+-tree's bucket).
    pub chunk: usize,
    /// Chunks in flight at once (1 = sequential, 2 = double buffering).
    pub in_flight: usize,
}

/// Measured on an H100 (n = 1e8, batch = 1e7, sorted-array lookup): chunks
/// of 2^20 with 3 in flight moved 2.3e9 q/s; 2^14 chunks only 3.7e8.
impl Default for Schedule {
    fn default() -> Self {
        Schedule { chunk: 1 << 20, in_flight: 3 }
    }
}

/// Staging for one chunk in flight: its stream, pinned and device buffers.
/// Kept in a pool on `Gpu`, since pinned allocation costs milliseconds.
pub(crate) struct Slot {
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) host_in: PinnedBuffer<u8>,
    pub(crate) host_out: PinnedBuffer<u8>,
    pub(crate) dev_in: DeviceBuffer<u8>,
    pub(crate) dev_out: DeviceBuffer<u8>,
}

impl Slot {
    fn fits(&self, in_bytes: usize, out_bytes: usize) -> bool {
        self.host_in.len() >= in_bytes && self.host_out.len() >= out_bytes
    }
}

pub(crate) fn cast<T: Plain>(bytes: &[u8], len: usize) -> &[T] {
    assert!(bytes.len() >= len * std::mem::size_of::<T>());
    assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    // SAFETY: size and alignment checked; T: Plain is valid for any bits.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, len) }
}

pub(crate) fn cast_mut<T: Plain>(bytes: &mut [u8], len: usize) -> &mut [T] {
    assert!(bytes.len() >= len * std::mem::size_of::<T>());
    assert_eq!(bytes.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    // SAFETY: as in `cast`, and the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr() as *mut T, len) }
}

pub fn copy_parallel<T: Plain>(dst: &mut [T], src: &[T]) {
    const PIECE: usize = 1 << 16;
    if src.len() <= PIECE {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(PIECE).zip(src.par_chunks(PIECE)).for_each(|(d, s)| d.copy_from_slice(s));
    }
}

impl Gpu {
    pub(crate) fn take_slots(&self, n: usize, in_bytes: usize, out_bytes: usize) -> Result<Vec<Slot>, GpuError> {
        let mut taken = Vec::with_capacity(n);
        {
            let mut pool = self.staging.lock();
            while taken.len() < n {
                match pool.iter().position(|s| s.fits(in_bytes, out_bytes)) {
                    Some(i) => taken.push(pool.swap_remove(i)),
                    None => break,
                }
            }
        }
        while taken.len() < n {
            taken.push(Slot {
                stream: self.new_stream()?,
                host_in: PinnedBuffer::alloc(&self.ctx, in_bytes)?,
                host_out: PinnedBuffer::alloc(&self.ctx, out_bytes)?,
                dev_in: DeviceBuffer::alloc(&self.ctx, in_bytes)?,
                dev_out: DeviceBuffer::alloc(&self.ctx, out_bytes)?,
            });
        }
        Ok(taken)
    }

    /// Returns slots to the pool once their streams are idle; a slot whose
    /// stream failed is dropped rather than reused.
    pub(crate) fn return_slots(&self, slots: Vec<Slot>) {
        let idle: Vec<Slot> = slots.into_iter().filter(|s| s.stream.synchronize().is_ok()).collect();
        self.staging.lock().extend(idle);
    }

    /// Drops the pooled staging buffers (pinned and device memory).
    pub fn release_staging(&self) {
        self.staging.lock().clear();
    }

    /// Copies a device buffer back through two pooled pinned slots, one
    /// chunk on the bus while the one before is spread over all cores into
    /// the result. (A plain pageable copy of hundreds of MB into a fresh
    /// vector ran at ~1 GB/s on the H100 host: the driver's own staging and
    /// page faults on one thread.)
    pub fn download_staged<T: Plain>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>, GpuError> {
        self.download_staged_first(buf, buf.len())
    }

    /// The first `n` values of a device buffer, as `download_staged`.
    pub fn download_staged_first<T: Plain>(&self, buf: &DeviceBuffer<T>, n: usize) -> Result<Vec<T>, GpuError> {
        const CHUNK_BYTES: usize = 32 << 20;
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        // Below a megabyte the plain copy costs less than the pool's
        // synchronisation; above, pageable copies crawl (see above).
        if n * std::mem::size_of::<T>() <= 1 << 20 {
            return buf.download_first(n);
        }
        let mut out = vec![T::default(); n];
        let mut slots = catch(|| self.take_slots(2, 0, CHUNK_BYTES))?;
        let result = catch(|| {
            // Kernels wrote `buf` on other streams.
            self.synchronize()?;
            let parts = n.div_ceil(chunk);
            let range = |k: usize| (k * chunk, chunk.min(n - k * chunk));
            let issue = |slots: &mut Vec<Slot>, k: usize| {
                let (at, len) = range(k);
                let s = &mut slots[k % 2];
                buf.read_range_async(at, cast_mut::<T>(s.host_out.as_mut_slice(), len), &s.stream)
            };
            issue(&mut slots, 0)?;
            for k in 0..parts {
                if k + 1 < parts {
                    issue(&mut slots, k + 1)?;
                }
                let s = &slots[k % 2];
                s.stream.synchronize().map_err(super::driver_error("cuStreamSynchronize"))?;
                let (at, len) = range(k);
                copy_parallel(&mut out[at..at + len], cast::<T>(s.host_out.as_slice(), len));
            }
            Ok(())
        });
        self.return_slots(slots);
        result.map(|_| out)
    }

    /// Copies `data` into a new device buffer through two pooled pinned
    /// slots, each chunk spread over all cores into its slot while the one
    /// before is on the bus (a plain pageable copy goes through the
    /// driver's staging on one thread, at a fraction of the bus's speed).
    pub fn upload_staged<T: Plain>(&self, data: &[T]) -> Result<DeviceBuffer<T>, GpuError> {
        const CHUNK_BYTES: usize = 32 << 20;
        let n = data.len();
        let chunk = CHUNK_BYTES / std::mem::size_of::<T>();
        if n <= chunk {
            return self.upload(data);
        }
        let buf = self.alloc::<T>(n)?;
        let mut slots = catch(|| self.take_slots(2, CHUNK_BYTES, 0))?;
        let result = catch(|| {
            let sync = |s: &Slot| s.stream.synchronize().map_err(super::driver_error("cuStreamSynchronize"));
            for k in 0..n.div_ceil(chunk) {
                let (at, len) = (k * chunk, chunk.min(n - k * chunk));
                let s = &mut slots[k % 2];
                // The slot's chunk before must be on the device first.
                sync(s)?;
                copy_parallel(cast_mut::<T>(s.host_in.as_mut_slice(), len), &data[at..at + len]);
                buf.write_at_async(at, cast::<T>(s.host_in.as_slice(), len), &s.stream)?;
            }
            slots.iter().try_for_each(sync)
        });
        self.return_slots(slots);
        result.map(|_| buf)
    }

    /// Runs a batch through the pipeline: `launch(stream, queries, outputs,
    /// n)` enqueues the kernel for one chunk of `n` queries (device
    /// addresses), and `consume(offset, outputs)` receives each chunk's
    /// results in order, on the calling thread, while later chunks run on
    /// the device.
    pub fn pipeline<Q: Plain, O: Plain>(
        &self,
        queries: &[Q],
        schedule: Schedule,
        launch: impl Fn(&Arc<CudaStream>, u64, u64, usize) -> Result<(), GpuError>,
        consume: impl FnMut(usize, &[O]),
    ) -> Result<(), GpuError> {
        let fill = |at: usize, dst: &mut [Q]| copy_parallel(dst, &queries[at..at + dst.len()]);
        self.pipeline_filled(queries.len(), 1, schedule, fill, launch, consume)
    }

    /// The pipeline for `n` queries of `group` values each (fixed-width
    /// records of several words, one output per query; offsets and counts
    /// passed on are in queries) that `fill(first, records)` writes straight into each chunk's pinned
    /// buffer (e.g. encoding them), overlapped with the device's work on
    /// the chunks before: no staging copy of the whole batch.
    pub fn pipeline_filled<Q: Plain, O: Plain>(
        &self,
        n: usize,
        group: usize,
        schedule: Schedule,
        fill: impl Fn(usize, &mut [Q]),
        launch: impl Fn(&Arc<CudaStream>, u64, u64, usize) -> Result<(), GpuError>,
        consume: impl FnMut(usize, &[O]),
    ) -> Result<(), GpuError> {
        self.pipeline_records(n, group, 1, schedule, fill, launch, consume)
    }

    /// `pipeline_filled` with `out_group` outputs per query (a chunk of m
    /// queries gets m * out_group of them, laid out as its kernel likes).
    pub fn pipeline_records<Q: Plain, O: Plain>(
        &self,
        n: usize,
        group: usize,
        out_group: usize,
        schedule: Schedule,
        fill: impl Fn(usize, &mut [Q]),
        launch: impl Fn(&Arc<CudaStream>, u64, u64, usize) -> Result<(), GpuError>,
        mut consume: impl FnMut(usize, &[O]),
    ) -> Result<(), GpuError> {
        if n == 0 {
            return Ok(());
        }
        let chunk = schedule.chunk.max(1).min(n);
        let in_flight = schedule.in_flight.clamp(1, n.div_ceil(chunk));
        let in_bytes = chunk * group * std::mem::size_of::<Q>();
        let out_bytes = chunk * out_group * std::mem::size_of::<O>();
        let mut slots = catch(|| self.take_slots(in_flight, in_bytes, out_bytes))?;
        let result = catch(|| {
            let mut pending: VecDeque<(usize, usize, usize)> = VecDeque::new(); // (slot, offset, len)
            let mut finish = |slots: &mut Vec<Slot>, (si, off, len): (usize, usize, usize)| -> Result<(), GpuError> {
                let s = &slots[si];
                s.stream.synchronize().map_err(super::driver_error("cuStreamSynchronize"))?;
                consume(off, cast::<O>(s.host_out.as_slice(), len));
                Ok(())
            };
            for ci in 0..n.div_ceil(chunk) {
                let (at, m) = (ci * chunk, chunk.min(n - ci * chunk));
                let si = ci % in_flight;
                if pending.len() == in_flight {
                    let done = pending.pop_front().expect("pending chunk");
                    debug_assert_eq!(done.0, si);
                    finish(&mut slots, done)?;
                }
                let s = &mut slots[si];
                fill(at, cast_mut::<Q>(s.host_in.as_mut_slice(), m * group));
                let in_len = m * group * std::mem::size_of::<Q>();
                s.dev_in.write_async(&s.host_in.as_slice()[..in_len], &s.stream)?;
                launch(&s.stream, s.dev_in.ptr(), s.dev_out.ptr(), m)?;
                let out_len = m * out_group * std::mem::size_of::<O>();
                s.dev_out.read_async(&mut s.host_out.as_mut_slice()[..out_len], &s.stream)?;
                pending.push_back((si, at, m * out_group));
            }
            while let Some(done) = pending.pop_front() {
                finish(&mut slots, done)?;
            }
            Ok(())
        });
        self.return_slots(slots);
        result
    }
}
