//! NVML's errors as drainwatch words them: one lowercase line each, the same
//! in a GPU's reading, its health fields and the log.

use nvml_wrapper::error::NvmlError;

/// NVML's error as one lowercase line.
pub(super) fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => format!("cannot load the NVML library: {inner}"),
        NvmlError::FailedToLoadSymbol(s) => format!("the NVML library lacks a function: {s}"),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_owned(),
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".to_owned(),
        NvmlError::NotSupported => "not supported by this GPU".to_owned(),
        NvmlError::GpuLost => "the GPU has fallen off the bus".to_owned(),
        other => other.to_string().to_lowercase(),
    }
}
