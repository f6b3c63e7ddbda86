//! Device buffers and pinned host buffers: typed, freed on drop, with
//! allocation failures reported as `GpuError::OutOfMemory`.

use super::error::{driver, GpuError};
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::marker::PhantomData;
use std::sync::Arc;

fn alloc_error(ctx: &CudaContext, bytes: usize, call: &'static str, e: result::DriverError) -> GpuError {
    if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        let (free, total) = ctx.mem_get_info().unwrap_or((0, 0));
        GpuError::OutOfMemory { requested: bytes, free, total }
    } else {
        driver(call)(e)
    }
}

/// `len` values of `T` in device memory.
pub struct DeviceBuffer<T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
    _t: PhantomData<T>,
}

// SAFETY: a device pointer is a plain address; the context is thread-safe.
unsafe impl<T> Send for DeviceBuffer<T> {}
unsafe impl<T> Sync for DeviceBuffer<T> {}

impl<T: Copy> DeviceBuffer<T> {
    /// Uninitialised buffer (zero-length buffers get one byte, so the
    /// pointer is always valid).
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: plain allocation, freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(|e| alloc_error(ctx, bytes, "cuMemAlloc", e))?;
        Ok(DeviceBuffer { ptr, len, ctx: ctx.clone(), _t: PhantomData })
    }

    /// A device copy of `data`, complete on return: the context is
    /// synchronised, because kernels run on non-blocking streams that do not
    /// wait for the legacy stream's copy.
    pub fn upload(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self, GpuError> {
        let buf = Self::alloc(ctx, data.len())?;
        if !data.is_empty() {
            // SAFETY: buf holds data.len() values.
            unsafe { result::memcpy_htod_sync(buf.ptr, data) }.map_err(driver("cuMemcpyHtoD"))?;
            ctx.synchronize().map_err(driver("cuCtxSynchronize"))?;
        }
        Ok(buf)
    }

    /// Copies the whole buffer back, after all work queued on any stream of
    /// the context (it synchronises the context first).
    pub fn download(&self) -> Result<Vec<T>, GpuError> {
        self.download_first(self.len)
    }

    /// Copies the first `n` values back, as `download`.
    pub fn download_first(&self, n: usize) -> Result<Vec<T>, GpuError> {
        assert!(n <= self.len, "device buffer too small");
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        self.ctx.synchronize().map_err(driver("cuCtxSynchronize"))?;
        // SAFETY: the spare capacity has room for n values; the copy writes all of them.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(out.as_mut_ptr(), n);
            result::memcpy_dtoh_sync(dst, self.ptr).map_err(driver("cuMemcpyDtoH"))?;
            out.set_len(n);
        }
        Ok(out)
    }

    /// Copies `data` to the start of the buffer, asynchronously on `stream`.
    /// `data` must be pinned (or stay alive and unchanged until the stream
    /// passes this point).
    pub fn write_async(&self, data: &[T], stream: &CudaStream) -> Result<(), GpuError> {
        assert!(data.len() <= self.len, "device buffer too small");
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: bounds checked above.
        unsafe { result::memcpy_htod_async(self.ptr, data, stream.cu_stream()) }.map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Copies `data` to the buffer at element `at`, asynchronously on
    /// `stream` (same rules for `data` as `write_async`).
    pub fn write_at_async(&self, at: usize, data: &[T], stream: &CudaStream) -> Result<(), GpuError> {
        assert!(at + data.len() <= self.len, "device buffer too small");
        if data.is_empty() {
            return Ok(());
        }
        let dst = self.ptr + (at * std::mem::size_of::<T>()) as u64;
        // SAFETY: bounds checked above.
        unsafe { result::memcpy_htod_async(dst, data, stream.cu_stream()) }.map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Copies the first `out.len()` values into `out`, asynchronously on
    /// `stream`; `out` must be pinned and untouched until the stream syncs.
    pub fn read_async(&self, out: &mut [T], stream: &CudaStream) -> Result<(), GpuError> {
        assert!(out.len() <= self.len, "device buffer too small");
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: bounds checked above.
        unsafe { result::memcpy_dtoh_async(out, self.ptr, stream.cu_stream()) }.map_err(driver("cuMemcpyDtoHAsync"))
    }

    /// Copies `out.len()` values starting at value `at` into `out`,
    /// asynchronously on `stream`; `out` must be pinned and untouched until
    /// the stream syncs.
    pub fn read_range_async(&self, at: usize, out: &mut [T], stream: &CudaStream) -> Result<(), GpuError> {
        assert!(at + out.len() <= self.len, "device buffer too small");
        if out.is_empty() {
            return Ok(());
        }
        let src = self.ptr + (at * std::mem::size_of::<T>()) as u64;
        // SAFETY: bounds checked above.
        unsafe { result::memcpy_dtoh_async(out, src, stream.cu_stream()) }.map_err(driver("cuMemcpyDtoHAsync"))
    }

    /// Sets every byte of the buffer to `byte`, asynchronously on `stream`.
    pub fn fill_bytes_async(&self, byte: u8, stream: &CudaStream) -> Result<(), GpuError> {
        // SAFETY: the whole allocation (at least one byte), owned by self.
        unsafe { result::memset_d8_async(self.ptr, byte, self.bytes().max(1), stream.cu_stream()) }.map_err(driver("cuMemsetD8Async"))
    }

    /// The device address, to pass to a kernel.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync in this context; freed once.
        let _ = self.ctx.bind_to_thread();
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// `len` values of `T` in page-locked host memory, so that copies overlap
/// with kernels and with CPU work.
pub struct PinnedBuffer<T> {
    ptr: *mut T,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: owned host memory, like a Box<[T]>.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}
unsafe impl<T: Sync> Sync for PinnedBuffer<T> {}

impl<T: Copy + Default> PinnedBuffer<T> {
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<Self, GpuError> {
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: plain allocation (not write-combined: the host reads results back).
        let ptr = unsafe { result::malloc_host(bytes, 0) }.map_err(|e| alloc_error(ctx, bytes, "cuMemHostAlloc", e))? as *mut T;
        // Initialise so that the slices below never expose uninitialised memory.
        // SAFETY: ptr holds len values.
        unsafe { std::slice::from_raw_parts_mut(ptr, len).fill(T::default()) };
        Ok(PinnedBuffer { ptr, len, ctx: ctx.clone() })
    }
}

impl<T> PinnedBuffer<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: initialised in alloc, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The buffer's address for kernels: page-locked memory is mapped into
    /// the device's address space (unified addressing), so a kernel may
    /// write its answers straight over the bus, overlapped with its own
    /// work, instead of into device memory copied back after it. The host
    /// reads them once the kernel's stream is synchronized.
    pub fn device_ptr(&self) -> Result<u64, GpuError> {
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let mut dptr: cudarc::driver::sys::CUdeviceptr = 0;
        // SAFETY: ptr was allocated by cuMemHostAlloc in this context.
        unsafe { cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut dptr, self.ptr.cast(), 0) }
            .result()
            .map_err(driver("cuMemHostGetDevicePointer"))?;
        Ok(dptr)
    }
}

impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host; freed once.
        let _ = unsafe { result::free_host(self.ptr as *mut _) };
    }
}
