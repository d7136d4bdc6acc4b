//! The C types and constants of NVML's public header (`nvml.h`, 12.575 generation)
//! that this library implements. Layouts must match the header byte for byte.

use std::ffi::{c_char, c_uint, c_ulonglong};

pub type NvmlReturn = c_uint;

pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const ERROR_ALREADY_INITIALIZED: NvmlReturn = 5;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const ERROR_INSUFFICIENT_POWER: NvmlReturn = 8;
pub const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const ERROR_TIMEOUT: NvmlReturn = 10;
pub const ERROR_IRQ_ISSUE: NvmlReturn = 11;
pub const ERROR_LIBRARY_NOT_FOUND: NvmlReturn = 12;
pub const ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
pub const ERROR_CORRUPTED_INFOROM: NvmlReturn = 14;
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const ERROR_RESET_REQUIRED: NvmlReturn = 16;
pub const ERROR_OPERATING_SYSTEM: NvmlReturn = 17;
pub const ERROR_LIB_RM_VERSION_MISMATCH: NvmlReturn = 18;
pub const ERROR_IN_USE: NvmlReturn = 19;
pub const ERROR_MEMORY: NvmlReturn = 20;
pub const ERROR_NO_DATA: NvmlReturn = 21;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlDevice_t`: an opaque pointer. Ours point into a static table.
pub type NvmlDevice = *const DeviceSlot;

/// One entry of the handle table; its address is the handle.
#[derive(Debug)]
#[repr(C)]
pub struct DeviceSlot {
    pub index: u32,
}

/// `nvmlMemory_t` (v1): 24 bytes; `used` includes what the driver reserves.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`: 40 bytes; `used` excludes `reserved`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2` = `NVML_STRUCT_VERSION(Memory, 2)`.
pub const MEMORY_V2_VERSION: c_uint = (std::mem::size_of::<MemoryV2>() as c_uint) | (2 << 24);

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_v1_t`: what `nvmlDeviceGetComputeRunningProcesses` (no suffix) fills.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
}

/// `nvmlProcessInfo_t` (= `_v2_t`): what the `_v2` and `_v3` calls fill; 24 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlPciInfo_t`: 68 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlPciInfo_t` as it was before `_v3`: 52 bytes, what `nvmlDeviceGetPciInfo`
/// and `_v2` fill. The first 36 bytes are laid out as in [`PciInfo`] (its
/// `busIdLegacy` was this struct's `busId`); four reserved words follow.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfoLegacy {
    pub bus_id: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub reserved: [c_uint; 4],
}

/// `nvmlTemperature_v1_t`: what `nvmlDeviceGetTemperatureV` fills; 12 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TemperatureV1 {
    pub version: c_uint,
    pub sensor_type: c_uint,
    pub temperature: std::ffi::c_int,
}

/// `nvmlTemperature_v1` = `NVML_STRUCT_VERSION(Temperature, 1)`.
pub const TEMPERATURE_V1_VERSION: c_uint =
    (std::mem::size_of::<TemperatureV1>() as c_uint) | (1 << 24);

/// `nvmlBAR1Memory_t`: the BAR1 aperture, bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Bar1Memory {
    pub bar1_total: c_ulonglong,
    pub bar1_free: c_ulonglong,
    pub bar1_used: c_ulonglong,
}

/// Not attached to a MIG instance.
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 0x8;

pub const INVALID_INSTANCE_ID: c_uint = 0xFFFF_FFFF;

pub const TEMPERATURE_GPU: c_uint = 0;
pub const CLOCK_GRAPHICS: c_uint = 0;
pub const CLOCK_SM: c_uint = 1;
pub const CLOCK_MEM: c_uint = 2;
pub const CLOCK_VIDEO: c_uint = 3;
pub const BRAND_NVIDIA_RTX: c_uint = 13;
pub const ARCH_BLACKWELL: c_uint = 10;
pub const FEATURE_DISABLED: c_uint = 0;
pub const FEATURE_ENABLED: c_uint = 1;

/// `nvmlClocksEventReason*`: why the clocks are held below their maximum.
pub const CLOCKS_EVENT_REASON_GPU_IDLE: u64 = 0x1;
/// Every reason the header names (idle, application clocks, software power
/// cap, hardware slowdown, sync boost, software and hardware thermal,
/// hardware power brake, display clocks).
pub const CLOCKS_EVENT_REASONS_ALL: u64 = 0x1ff;
/// `nvmlEccCounterType_t`.
pub const ECC_COUNTER_VOLATILE: c_uint = 0;
pub const ECC_COUNTER_AGGREGATE: c_uint = 1;
/// `nvmlMemoryErrorType_t`.
pub const MEMORY_ERROR_CORRECTED: c_uint = 0;
pub const MEMORY_ERROR_UNCORRECTED: c_uint = 1;
/// `nvmlPageRetirementCause_t`.
pub const PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT: c_uint = 0;
pub const PAGE_RETIREMENT_CAUSE_DOUBLE_BIT: c_uint = 1;
/// `nvmlPcieUtilCounter_t`.
pub const PCIE_UTIL_TX_BYTES: c_uint = 0;
pub const PCIE_UTIL_RX_BYTES: c_uint = 1;

/// `nvmlProcessUtilizationSample_t`: 32 bytes (`pid`, padding, a µs
/// timestamp, then SM, memory, encoder and decoder percent).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: std::ffi::c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}
pub const COMPUTEMODE_DEFAULT: c_uint = 0;

/// `nvmlErrorString`'s texts, as the real library words them.
pub fn error_string(code: NvmlReturn) -> &'static std::ffi::CStr {
    match code {
        SUCCESS => c"Success",
        ERROR_UNINITIALIZED => c"Uninitialized",
        ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        ERROR_NOT_SUPPORTED => c"Not Supported",
        ERROR_NO_PERMISSION => c"Insufficient Permissions",
        ERROR_ALREADY_INITIALIZED => c"Already Initialized",
        ERROR_NOT_FOUND => c"Not Found",
        ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ERROR_INSUFFICIENT_POWER => c"Insufficient External Power",
        ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ERROR_TIMEOUT => c"Timeout",
        ERROR_IRQ_ISSUE => c"Interrupt Request Issue",
        ERROR_LIBRARY_NOT_FOUND => c"NVML Shared Library Not Found",
        ERROR_FUNCTION_NOT_FOUND => c"Function Not Found",
        ERROR_CORRUPTED_INFOROM => c"Corrupted infoROM",
        ERROR_GPU_IS_LOST => c"GPU is lost",
        ERROR_RESET_REQUIRED => c"GPU requires restart",
        ERROR_OPERATING_SYSTEM => c"The operating system has blocked the request.",
        ERROR_LIB_RM_VERSION_MISMATCH => c"RM has detected an NVML/RM version mismatch.",
        ERROR_IN_USE => c"In use by another client",
        ERROR_MEMORY => c"Insufficient Memory",
        ERROR_NO_DATA => c"No data",
        ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn layouts_match_the_header() {
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(size_of::<MemoryV2>(), 40);
        assert_eq!(MEMORY_V2_VERSION, 0x0200_0028);
        assert_eq!(size_of::<ProcessInfoV1>(), 16);
        assert_eq!(size_of::<ProcessInfo>(), 24);
        assert_eq!(size_of::<PciInfo>(), 68);
        assert_eq!(size_of::<PciInfoLegacy>(), 52);
        // The legacy layout is a prefix of the current one, up to the reserved words.
        assert_eq!(
            std::mem::offset_of!(PciInfoLegacy, reserved),
            std::mem::offset_of!(PciInfo, bus_id)
        );
        assert_eq!(size_of::<Utilization>(), 8);
        assert_eq!(size_of::<TemperatureV1>(), 12);
        assert_eq!(TEMPERATURE_V1_VERSION, 0x0100_000C);
        assert_eq!(size_of::<Bar1Memory>(), 24);
    }
}
