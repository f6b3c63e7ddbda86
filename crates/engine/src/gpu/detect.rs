//! Finding a GPU without ever panicking: each way of not having one (no
//! driver library, driver too old, no device, no NVRTC) becomes a reason.

use super::error::{catch, driver, GpuError};
use cudarc::driver::{sys, CudaContext};
use std::sync::Arc;

/// The oldest driver API we accept (CUDA 12.0): the bindings are CUDA 13.0's,
/// and every entry point we call exists since 12.0.
pub const MIN_DRIVER_VERSION: i32 = 12000;
/// Oldest compute capability the kernels are written for (Volta).
pub const MIN_COMPUTE_CAPABILITY: (i32, i32) = (7, 0);

/// What was found on the device the runtime uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_memory: usize,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    /// Driver API version, e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    /// NVRTC (major, minor).
    pub nvrtc_version: (i32, i32),
}

impl DeviceInfo {
    /// `compute_90` for an sm_90 device: NVRTC's target.
    pub fn nvrtc_arch(&self) -> String {
        format!("compute_{}{}", self.compute_capability.0, self.compute_capability.1)
    }
}

pub(crate) fn format_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Detects device `ordinal` and creates its (primary) context.
pub(crate) fn detect(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), GpuError> {
    catch(|| {
        // SAFETY: only probes dlopen; no CUDA call.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::Unavailable(
                "the CUDA driver library (libcuda.so.1) was not found: no NVIDIA driver is installed".into(),
            ));
        }
        let mut version = 0;
        // SAFETY: plain out-parameter call, valid before cuInit.
        let rc = unsafe { sys::cuDriverGetVersion(&mut version) };
        if rc != sys::cudaError_enum::CUDA_SUCCESS {
            return Err(GpuError::Unavailable(format!("cuDriverGetVersion failed: {rc:?}")));
        }
        if version < MIN_DRIVER_VERSION {
            return Err(GpuError::Unavailable(format!(
                "the NVIDIA driver supports CUDA {} but gpuindex needs CUDA {} or newer",
                format_version(version),
                format_version(MIN_DRIVER_VERSION)
            )));
        }
        if let Err(e) = cudarc::driver::result::init() {
            return Err(GpuError::Unavailable(match e.0 {
                sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => "the driver found no CUDA device".into(),
                other => format!("cuInit failed: {other:?}"),
            }));
        }
        let count = CudaContext::device_count().map_err(driver("cuDeviceGetCount"))?;
        if count <= 0 {
            return Err(GpuError::Unavailable("the driver found no CUDA device".into()));
        }
        if ordinal >= count as usize {
            return Err(GpuError::Unavailable(format!("device {ordinal} asked for, but only {count} found")));
        }
        // SAFETY: only probes dlopen.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(GpuError::Unavailable("NVRTC (libnvrtc.so.13 or .12) was not found: kernels cannot be compiled".into()));
        }
        let (mut maj, mut min) = (0, 0);
        // SAFETY: plain out-parameter call.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut maj, &mut min) };
        let ctx = CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))?;
        let cc = ctx.compute_capability().map_err(driver("cuDeviceGetAttribute"))?;
        if cc < MIN_COMPUTE_CAPABILITY {
            return Err(GpuError::Unavailable(format!(
                "device {ordinal} has compute capability {}.{}; gpuindex needs {}.{} or newer",
                cc.0, cc.1, MIN_COMPUTE_CAPABILITY.0, MIN_COMPUTE_CAPABILITY.1
            )));
        }
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(driver("cuDeviceGetName"))?,
            total_memory: ctx.total_mem().map_err(driver("cuDeviceTotalMem"))?,
            compute_capability: cc,
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(driver("cuDeviceGetAttribute"))?,
            driver_version: version,
            nvrtc_version: (maj, min),
        };
        Ok((ctx, info))
    })
}
