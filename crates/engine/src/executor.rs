//! The batch executor: one interface, `submit(job, queries)`, with a CPU
//! implementation (rayon) and a GPU one behind it. Callers never choose a
//! device directly; the policy does, and the answer is identical either way.

use crate::gpu::{self, Gpu, GpuError};

/// Which device may run a batch (`gpuindex.device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The GPU when one is usable and the batch is large enough to pay for
    /// a launch; otherwise, or if the GPU fails, the CPU.
    Auto,
    /// Never touch CUDA.
    Cpu,
    /// The GPU, or an error saying why not.
    Gpu,
}

impl Policy {
    pub fn parse(s: &str) -> Option<Policy> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(Policy::Auto),
            "cpu" => Some(Policy::Cpu),
            "gpu" => Some(Policy::Gpu),
            _ => None,
        }
    }
}

/// The device that ran a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    pub policy: Policy,
    /// Under `Auto`, batches smaller than this stay on the CPU.
    pub min_gpu_batch: usize,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { policy: Policy::Auto, min_gpu_batch: 4096 }
    }
}

/// A batch's results and how they were obtained.
#[derive(Debug)]
pub struct Ran<T> {
    pub output: T,
    pub device: Device,
    /// Why the GPU was not used under `Auto`, when it was not.
    pub cpu_reason: Option<String>,
}

/// A batched computation with an exact CPU and GPU implementation.
pub trait BatchJob: Sync {
    type Query: Sync;
    type Output: Send;
    /// All-core CPU implementation (must not call into PostgreSQL).
    fn run_cpu(&self, queries: &[Self::Query]) -> Vec<Self::Output>;
    /// GPU implementation; must return exactly what `run_cpu` returns.
    fn run_gpu(&self, gpu: &Gpu, queries: &[Self::Query]) -> Result<Vec<Self::Output>, GpuError>;
}

/// Runs `job` over `queries` on the device the policy picks.
pub fn submit<J: BatchJob>(opts: &ExecOptions, job: &J, queries: &[J::Query]) -> Result<Ran<Vec<J::Output>>, GpuError> {
    run(opts, queries.len(), || job.run_cpu(queries), |g| job.run_gpu(g, queries))
}

/// Runs a computation over a batch of `size` items on the device the
/// policy picks: `on_gpu` when it may (falling back to `on_cpu` under
/// `Auto` if it fails), else `on_cpu`. Both must return the same answer.
pub fn run<T>(
    opts: &ExecOptions,
    size: usize,
    on_cpu: impl FnOnce() -> T,
    on_gpu: impl FnOnce(&Gpu) -> Result<T, GpuError>,
) -> Result<Ran<T>, GpuError> {
    let cpu = |reason: String| Ran { output: on_cpu(), device: Device::Cpu, cpu_reason: Some(reason) };
    match opts.policy {
        Policy::Cpu => Ok(cpu("gpuindex.device = cpu".into())),
        Policy::Gpu => {
            let g = gpu::gpu()?;
            let output = on_gpu(&g)?;
            Ok(Ran { output, device: Device::Gpu, cpu_reason: None })
        }
        Policy::Auto => {
            if size < opts.min_gpu_batch {
                return Ok(cpu(format!("batch of {size} is below gpuindex.gpu_min_batch = {}", opts.min_gpu_batch)));
            }
            match gpu::gpu().and_then(|g| on_gpu(&g)) {
                Ok(output) => Ok(Ran { output, device: Device::Gpu, cpu_reason: None }),
                Err(e) => Ok(cpu(e.to_string())),
            }
        }
    }
}
