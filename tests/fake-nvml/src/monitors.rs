//! What monitoring tools ask of a GPU beyond what drainwatch reads: the
//! versioned temperature query, whether a display is attached, the Windows
//! driver model, and the BAR1 aperture. nvitop asks all of them on every
//! refresh (a missing one is an error on its stderr; a MIG device without
//! BAR1 figures breaks its table), so each answers as a 575 driver on a
//! headless Linux server does.

use std::ffi::{c_int, c_uint};

use simhost::{GpuSpec, GpuView, MigInstance};

use crate::types::*;
use crate::{fail_if, mig, put, with_gpu, with_spec};

const MIB: u64 = 1 << 20;

/// # Safety
/// `temp` is null or points to an `nvmlTemperature_t` whose `version` and
/// `sensorType` the caller set, as NVML's own contract asks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(
    device: NvmlDevice,
    temp: *mut TemperatureV1,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.temperature)?;
        if temp.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller set `version` and `sensorType`.
        let (version, sensor) = unsafe { ((*temp).version, (*temp).sensor_type) };
        if version != TEMPERATURE_V1_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        if sensor != TEMPERATURE_GPU {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        put(
            temp,
            TemperatureV1 {
                version,
                sensor_type: sensor,
                temperature: c_int::try_from(gpu.temp_c).unwrap_or(c_int::MAX),
            },
        )
    })
}

/// No monitor is attached to a server's GPU, and none could be.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDisplayMode(device: NvmlDevice, mode: *mut c_uint) -> NvmlReturn {
    with_spec(device, |_, _| put(mode, FEATURE_DISABLED))
}

/// No display is initialised on the GPU (no X server, no console on it).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDisplayActive(
    device: NvmlDevice,
    active: *mut c_uint,
) -> NvmlReturn {
    with_spec(device, |_, _| put(active, FEATURE_DISABLED))
}

/// WDDM or TCC: a Windows notion, NOT_SUPPORTED on Linux as from the real
/// library (which exports it on every platform). The 575 generation has no
/// `_v2` yet.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDriverModel(
    device: NvmlDevice,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> NvmlReturn {
    with_spec(device, |_, _| Err(ERROR_NOT_SUPPORTED))
}

/// The BAR1 aperture of a GPU: resizable BAR maps all of its memory, rounded
/// up to a power of two (128 GiB for 96 GiB), as on the real board.
fn bar1_total(spec: &GpuSpec) -> u64 {
    spec.total_bytes.next_power_of_two()
}

/// What the driver maps through BAR1: a MiB of its own, and 2 MiB per
/// process with a context on the GPU.
fn bar1_gpu(spec: &GpuSpec, gpu: &GpuView) -> Bar1Memory {
    let total = bar1_total(spec);
    let used = (MIB + 2 * MIB * gpu.processes.len() as u64).min(total);
    Bar1Memory {
        bar1_total: total,
        bar1_free: total - used,
        bar1_used: used,
    }
}

/// A MIG device gets its instance's share of the aperture, by memory.
fn bar1_mig(spec: &GpuSpec, instance: &MigInstance) -> Bar1Memory {
    let share = u128::from(bar1_total(spec)) * u128::from(instance.memory_bytes)
        / u128::from(spec.total_bytes.max(1));
    let total = (u64::try_from(share).unwrap_or(u64::MAX) / MIB) * MIB;
    let used = MIB.min(total);
    Bar1Memory {
        bar1_total: total,
        bar1_free: total - used,
        bar1_used: used,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    device: NvmlDevice,
    bar1: *mut Bar1Memory,
) -> NvmlReturn {
    if let Some(rc) =
        mig::answer_for_mig(device, |_, _, spec, inst| put(bar1, bar1_mig(spec, inst)))
    {
        return rc;
    }
    with_gpu(device, |_, spec, gpu| {
        fail_if(gpu.faults.memory_info)?;
        put(bar1, bar1_gpu(spec, gpu))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar1_covers_the_memory_and_splits_by_instance() {
        let spec = GpuSpec::rtx_pro_6000(0);
        assert_eq!(bar1_total(&spec), 128 << 30);
        let half = MigInstance {
            profile: "3g.48gb".to_owned(),
            memory_bytes: spec.total_bytes / 2,
            used_bytes: 0,
        };
        let b = bar1_mig(&spec, &half);
        assert_eq!(b.bar1_total, 64 << 30);
        assert_eq!(b.bar1_used + b.bar1_free, b.bar1_total);
    }
}
