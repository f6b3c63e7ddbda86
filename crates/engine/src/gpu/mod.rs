//! The CUDA runtime: detection that never panics, one context per process
//! created at first use, kernels compiled once per process with NVRTC,
//! streams, device and pinned buffers, and the chunked copy/compute pipeline.
//!
//! Nothing here runs at load time: the first call to [`gpu()`] initialises
//! CUDA. Callers must never make that call in a process that will fork
//! afterwards (the PostgreSQL postmaster); a child that inherits an
//! initialised runtime is refused.

mod detect;
mod error;
pub mod kernels;
mod memory;
pub(crate) mod pipeline;
mod scan;
pub mod sort;

pub use detect::{DeviceInfo, MIN_COMPUTE_CAPABILITY, MIN_DRIVER_VERSION};
pub use error::GpuError;
pub use kernels::KernelSource;
pub use memory::{DeviceBuffer, PinnedBuffer};
pub use pipeline::{copy_parallel, Plain, Schedule};
pub use scan::scan;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use error::{catch, driver};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A kernel module compiled in this process, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledKernel {
    pub kernel: &'static str,
    pub millis: f64,
}

/// The process's GPU: one device, its context, streams and compiled kernels.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    pid: u32,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(&'static str, &'static str), CudaFunction>>,
    compiled: Mutex<Vec<CompiledKernel>>,
    staging: Mutex<Vec<pipeline::Slot>>,
}

static RUNTIME: OnceLock<Result<Arc<Gpu>, GpuError>> = OnceLock::new();

/// The GPU runtime of this process, initialised at the first call. A
/// failure is remembered: the reason is returned on every later call.
pub fn gpu() -> Result<Arc<Gpu>, GpuError> {
    match RUNTIME.get_or_init(|| Gpu::init(0).map(Arc::new)) {
        Ok(g) if g.pid != std::process::id() => {
            Err(GpuError::Unavailable("CUDA was initialised before this process was forked; a forked child cannot use it".into()))
        }
        Ok(g) => Ok(g.clone()),
        Err(e) => Err(e.clone()),
    }
}

/// Whether [`gpu()`] has already run in this process (without running it).
pub fn initialised() -> bool {
    RUNTIME.get().is_some()
}

impl Gpu {
    fn init(ordinal: usize) -> Result<Gpu, GpuError> {
        let (ctx, info) = detect::detect(ordinal)?;
        Ok(Gpu {
            ctx,
            info,
            pid: std::process::id(),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            compiled: Mutex::new(Vec::new()),
            staging: Mutex::new(Vec::new()),
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        catch(|| self.ctx.mem_get_info().map_err(driver("cuMemGetInfo")))
    }

    /// A new stream of this context.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        catch(|| self.ctx.new_stream().map_err(driver("cuStreamCreate")))
    }

    /// The kernels compiled so far in this process, with their compile times.
    pub fn compiled(&self) -> Vec<CompiledKernel> {
        self.compiled.lock().clone()
    }

    /// Compiles every kernel source (already compiled ones are skipped).
    pub fn compile_all(&self) -> Result<(), GpuError> {
        kernels::ALL.iter().try_for_each(|k| self.module(k).map(|_| ()))
    }

    fn module(&self, k: &KernelSource) -> Result<Arc<CudaModule>, GpuError> {
        let mut modules = self.modules.lock();
        if let Some(m) = modules.get(k.name) {
            return Ok(m.clone());
        }
        let started = Instant::now();
        let module = catch(|| {
            let opts = cudarc::nvrtc::CompileOptions {
                // 128-bit integers: the PGM fit's exact coordinates.
                options: vec![format!("--gpu-architecture={}", self.info.nvrtc_arch()), "--device-int128".into()],
                name: Some(format!("{}.cu", k.name)),
                ..Default::default()
            };
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(k.source, opts).map_err(|e| GpuError::Compile {
                kernel: k.name,
                log: match e {
                    cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                    other => format!("{other:?}"),
                },
            })?;
            self.ctx.load_module(ptx).map_err(driver("cuModuleLoadData"))
        })?;
        self.compiled.lock().push(CompiledKernel { kernel: k.name, millis: started.elapsed().as_secs_f64() * 1e3 });
        modules.insert(k.name, module.clone());
        Ok(module)
    }

    /// Function `name` of kernel source `k`, compiling the source at first use.
    pub fn function(&self, k: &KernelSource, name: &'static str) -> Result<CudaFunction, GpuError> {
        if let Some(f) = self.functions.lock().get(&(k.name, name)) {
            return Ok(f.clone());
        }
        let module = self.module(k)?;
        let f = catch(|| module.load_function(name).map_err(driver("cuModuleGetFunction")))?;
        self.functions.lock().insert((k.name, name), f.clone());
        Ok(f)
    }

    /// How many blocks of `block` threads of kernel `name` the whole device
    /// holds at once (its multiprocessors times the kernel's occupancy).
    pub fn resident_blocks(&self, k: &KernelSource, name: &'static str, block: u32) -> Result<usize, GpuError> {
        let f = self.function(k, name)?;
        let per_sm = catch(|| {
            f.occupancy_max_active_blocks_per_multiprocessor(block, 0, None).map_err(driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))
        })?;
        Ok(per_sm.max(1) as usize * self.info.multiprocessors.max(1) as usize)
    }

    /// Uploads `data` to a new device buffer.
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DeviceBuffer<T>, GpuError> {
        catch(|| DeviceBuffer::upload(&self.ctx, data))
    }

    /// A device buffer of `len` values, contents undefined.
    pub fn alloc<T: Copy>(&self, len: usize) -> Result<DeviceBuffer<T>, GpuError> {
        catch(|| DeviceBuffer::alloc(&self.ctx, len))
    }

    /// Waits for all work on every stream of the context.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        catch(|| self.ctx.synchronize().map_err(driver("cuCtxSynchronize")))
    }

    /// Runs `f` with CUDA panics caught (for callers that use cudarc directly,
    /// e.g. to build and launch a kernel).
    pub fn guarded<T>(&self, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
        catch(f)
    }
}

/// Launches `function` of kernel source `$src` on `$stream` with a 1-D
/// grid and the arguments in order (each passed by reference, so they must
/// be places, not temporaries); evaluates to `Result<(), GpuError>`.
#[macro_export]
macro_rules! launch {
    ($gpu:expr, $stream:expr, $src:expr, $name:expr, ($grid:expr, $block:expr, $smem:expr), [$($arg:expr),* $(,)?]) => {{
        let gpu: &$crate::gpu::Gpu = $gpu;
        gpu.guarded(|| {
            let f = gpu.function(&$src, $name)?;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (($grid) as u32, 1, 1),
                block_dim: (($block) as u32, 1, 1),
                shared_mem_bytes: ($smem) as u32,
            };
            let mut b = $stream.launch_builder(&f);
            $( cudarc::driver::PushKernelArg::arg(&mut b, &$arg); )*
            // SAFETY: callers pass the kernel's argument list, with device
            // buffers sized for the launch.
            unsafe { b.launch(cfg) }.map(|_| ()).map_err($crate::gpu::driver_error("cuLaunchKernel"))
        })
    }};
}

/// Maps a cudarc driver error to `GpuError`, naming the call.
pub fn driver_error(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
    driver(call)
}

/// The human-readable CUDA version of a driver API number (13000 -> "13.0").
pub fn format_cuda_version(v: i32) -> String {
    detect::format_version(v)
}
