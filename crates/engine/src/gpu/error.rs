//! Errors of the GPU path. Every CUDA failure becomes one of these; nothing
//! in the GPU path panics across this boundary (panics inside cudarc, e.g. a
//! missing symbol, are caught and reported as `GpuError::Panic`).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// No usable GPU in this process; the text says why (no driver library,
    /// no device, driver too old, no NVRTC, ...).
    Unavailable(String),
    /// A device allocation failed.
    OutOfMemory { requested: usize, free: usize, total: usize },
    /// NVRTC rejected a kernel source (the log is included).
    Compile { kernel: &'static str, log: String },
    /// Any other CUDA driver error.
    Driver { call: &'static str, detail: String },
    /// A panic inside the CUDA bindings, caught.
    Panic(String),
}

impl GpuError {
    /// A one-line hint for users, suitable for a PostgreSQL `errhint`.
    pub fn hint(&self) -> &'static str {
        match self {
            GpuError::Unavailable(_) => "Set gpuindex.device = auto or cpu to run on the CPU; gpuindex_device_info() shows what was found.",
            GpuError::OutOfMemory { .. } => "Use smaller batches, free GPU memory used by other processes, or set gpuindex.device = cpu.",
            GpuError::Compile { .. } => {
                "The kernel did not compile for this GPU with this NVRTC; please report it. gpuindex.device = cpu avoids the GPU."
            }
            GpuError::Driver { .. } | GpuError::Panic(_) => "The CUDA driver reported an error; gpuindex.device = cpu avoids the GPU.",
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::Unavailable(why) => write!(f, "no usable GPU: {why}"),
            GpuError::OutOfMemory { requested, free, total } => {
                write!(f, "GPU out of memory: asked for {} MiB, {} MiB free of {} MiB", requested >> 20, free >> 20, total >> 20)
            }
            GpuError::Compile { kernel, log } => write!(f, "kernel {kernel} failed to compile: {log}"),
            GpuError::Driver { call, detail } => write!(f, "CUDA error in {call}: {detail}"),
            GpuError::Panic(msg) => write!(f, "CUDA bindings panicked: {msg}"),
        }
    }
}

impl std::error::Error for GpuError {}

/// Maps a driver error to `GpuError`, naming the call that failed.
pub(crate) fn driver(call: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Driver { call, detail: format!("{e:?}") }
}

/// Runs `f`, turning a panic (cudarc panics on a missing library or symbol)
/// into `GpuError::Panic`.
pub(crate) fn catch<T>(f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(GpuError::Panic(msg))
        }
    }
}
