//! A `libnvidia-ml.so.1` over a simulated host ([`simhost`]): the real NVML C ABI
//! (12.575 generation, driver 575.57.08), so that drainwatch — and any other NVML
//! client — reads a GPU host on a machine without GPUs through its real code path.
//!
//! Layout: [`types`] holds the header's structs and codes; `driver` the init count,
//! handle table and host view; this file the exported functions, grouped as the
//! header groups them, but for three families of their own: [`health`] (clock
//! events, ECC, retired pages and remapped rows, PCIe, video engines,
//! per-process utilisation), [`mig`], [`events`] (XID errors) and [`monitors`]
//! (what nvitop and gpustat ask besides: the versioned temperature, display,
//! driver model, BAR1). Every export runs its body under [`guard`], so a panic
//! becomes `NVML_ERROR_UNKNOWN` instead of unwinding into C. Functions a real
//! driver has but this one does not implement are simply not exported: a client
//! gets "function not found" from its loader, honestly.
//!
//! Where the real library keeps older generations of an entry point for old
//! binaries (`nvmlInit`/`_v2`, `nvmlDeviceGetCount`/`_v2`, the process lists in
//! v1/`_v2`/`_v3`, `nvmlDeviceGetPciInfo`/`_v2`/`_v3`, …), this one exports every
//! generation of each function it implements, all over one body that differs
//! only in the struct layout written. The full list, by family, is
//! `tests/raw_abi.rs`, which checks it against this file and the built library.
//!
//! The host can switch faults on per GPU ([`simhost::GpuFaults`] in `host.json`,
//! read live): the chosen queries then return the chosen `nvmlReturn_t` before
//! touching the caller's buffers, as a real driver does when a sensor is missing
//! or the GPU has fallen off the bus.

mod driver;
pub mod events;
pub mod health;
pub mod mig;
pub mod monitors;
pub mod types;

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong};
use std::panic::{AssertUnwindSafe, catch_unwind};

use simhost::{Fault, GpuFaults, GpuSpec, GpuView, HostView};

use driver::driver;
use types::*;

/// Runs an export's body; a panic must never cross the C boundary.
fn guard(f: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(ERROR_UNKNOWN)
}

/// Folds `Result<(), code>` into a return code.
fn code(r: Result<(), NvmlReturn>) -> NvmlReturn {
    r.err().unwrap_or(SUCCESS)
}

/// Runs `f` on one GPU's spec and current readings, after the checks every device
/// query makes: initialised, known handle.
fn with_gpu(
    device: NvmlDevice,
    f: impl FnOnce(u32, &GpuSpec, &GpuView) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        code((|| {
            let drv = driver()?;
            let index = drv.index_of(device)?;
            let view: std::sync::Arc<HostView> = drv.view()?;
            let spec = &drv.inventory.gpus[index as usize];
            let gpu = &view.gpus[index as usize];
            f(index, spec, gpu)
        })())
    })
}

/// As [`with_gpu`] for fixed properties: no host view is read, so they answer
/// even when the host's live state cannot be read.
fn with_spec(
    device: NvmlDevice,
    f: impl FnOnce(u32, &GpuSpec) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        code((|| {
            let drv = driver()?;
            let index = drv.index_of(device)?;
            f(index, &drv.inventory.gpus[index as usize])
        })())
    })
}

/// `nvml.h`'s code for a fault the host names.
fn fault_code(fault: Fault) -> NvmlReturn {
    match fault {
        Fault::NotSupported => ERROR_NOT_SUPPORTED,
        Fault::NoPermission => ERROR_NO_PERMISSION,
        Fault::NotFound => ERROR_NOT_FOUND,
        Fault::InsufficientPower => ERROR_INSUFFICIENT_POWER,
        Fault::Timeout => ERROR_TIMEOUT,
        Fault::IrqIssue => ERROR_IRQ_ISSUE,
        Fault::CorruptedInforom => ERROR_CORRUPTED_INFOROM,
        Fault::GpuIsLost => ERROR_GPU_IS_LOST,
        Fault::ResetRequired => ERROR_RESET_REQUIRED,
        Fault::OperatingSystem => ERROR_OPERATING_SYSTEM,
        Fault::InUse => ERROR_IN_USE,
        Fault::Memory => ERROR_MEMORY,
        Fault::NoData => ERROR_NO_DATA,
        Fault::Unknown => ERROR_UNKNOWN,
    }
}

/// Fails a query with the fault switched on for it, if any.
fn fail_if(fault: Option<Fault>) -> Result<(), NvmlReturn> {
    fault.map_or(Ok(()), |f| Err(fault_code(f)))
}

/// As [`fail_if`], for queries that read no live state: looks up GPU `index`'s
/// switches now.
fn fail_if_switched(
    index: u32,
    pick: impl FnOnce(&GpuFaults) -> Option<Fault>,
) -> Result<(), NvmlReturn> {
    fail_if(pick(&driver()?.faults(index)))
}

/// Writes `value` through an out-pointer, refusing null.
fn put<T>(out: *mut T, value: T) -> Result<(), NvmlReturn> {
    if out.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller passed a pointer to a T; null was refused above.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `s` NUL-terminated into a caller buffer of `len` bytes.
fn put_str(s: &str, buf: *mut c_char, len: c_uint) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller promises `len` writable bytes; we write len(s) + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    Ok(())
}

/// Copies `s` NUL-terminated into a fixed array (truncating, as the header allows).
fn fill_array<const N: usize>(s: &str, out: &mut [c_char; N]) {
    *out = [0; N];
    for (dst, src) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *dst = src as c_char;
    }
}

/// Reads a caller's NUL-terminated string.
fn read_str<'a>(s: *const c_char) -> Result<&'a str, NvmlReturn> {
    if s.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| ERROR_INVALID_ARGUMENT)
}

/// The two-call protocol of NVML's process lists: with too little room (or a
/// count of 0), say how many are needed; with enough, fill them.
fn put_list<T>(items: &[T], count: *mut c_uint, out: *mut T) -> Result<(), NvmlReturn>
where
    T: Copy,
{
    if count.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, points to the caller's count.
    let room = unsafe { *count } as usize;
    let needed = items.len();
    // SAFETY: as above.
    unsafe { *count = needed as c_uint };
    if needed == 0 {
        return Ok(());
    }
    if room < needed {
        return Err(ERROR_INSUFFICIENT_SIZE);
    }
    if out.is_null() {
        return Err(ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: the caller said `room >= needed` entries are writable at `out`.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, needed) };
    Ok(())
}

// ---------------------------------------------------------------- init, errors

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard(driver::init)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    guard(driver::init)
}

/// Flags (`NO_GPUS`, `NO_ATTACH`) change nothing here: the host has no GPUs to attach.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    guard(driver::init)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(driver::shutdown)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    error_string(result).as_ptr()
}

/// Not part of NVML: lets a client tell this library from a real driver, so that it
/// can label simulated numbers as such.
#[unsafe(no_mangle)]
pub extern "C" fn drainwatch_simulated_host() -> c_int {
    1
}

// ---------------------------------------------------------------- system

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    guard(|| code(driver().and_then(|d| put_str(&d.inventory.driver_version, version, length))))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    // Like the real library, this one answers before init too.
    guard(|| {
        let v = driver()
            .map(|d| d.inventory.nvml_version.clone())
            .unwrap_or_else(|_| simhost::Inventory::default().nvml_version);
        code(put_str(&v, version, length))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> NvmlReturn {
    guard(|| code(driver().and_then(|d| put(version, d.inventory.cuda_driver_version))))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> NvmlReturn {
    nvmlSystemGetCudaDriverVersion(version)
}

/// The process's name as the kernel has it (`/proc/<pid>/comm`).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        code(driver().and_then(|_| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map_err(|_| ERROR_NOT_FOUND)?;
            put_str(comm.trim_end(), name, length)
        }))
    })
}

// ---------------------------------------------------------------- device handles

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    guard(|| code(driver().and_then(|d| put(count, d.count()))))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    nvmlDeviceGetCount_v2(count)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        code(driver().and_then(|d| {
            let handle = d.handle(index)?;
            fail_if(d.faults(index).handle)?;
            put(device, handle)
        }))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    nvmlDeviceGetHandleByIndex_v2(index, device)
}

fn handle_where(device: *mut NvmlDevice, pred: impl Fn(&GpuSpec) -> bool) -> NvmlReturn {
    guard(|| {
        code(driver().and_then(|d| {
            let index = d
                .inventory
                .gpus
                .iter()
                .position(pred)
                .ok_or(ERROR_NOT_FOUND)?;
            let handle = d.handle(index as u32)?;
            fail_if(d.faults(index as u32).handle)?;
            put(device, handle)
        }))
    })
}

/// A PCI address as the bus-id lookups accept it (hexadecimal, as `nvml.h`
/// documents): `domain:bus:device.function`, `domain:bus:device` or
/// `bus:device.function` (domain 0). Returns (domain, bus, device, function).
fn parse_bus_id(s: &str) -> Option<(u32, u32, u32, u32)> {
    let hex = |p: &str| u32::from_str_radix(p.trim(), 16).ok();
    let parts: Vec<&str> = s.trim().split(':').collect();
    let (domain, bus, rest) = match *parts.as_slice() {
        [domain, bus, rest] => (hex(domain)?, hex(bus)?, rest),
        [bus, rest] => (0, hex(bus)?, rest),
        _ => return None,
    };
    let (dev, function) = match rest.split_once('.') {
        Some((dev, function)) => (hex(dev)?, hex(function)?),
        // Only the three-part form may leave the function out.
        None if parts.len() == 3 => (hex(rest)?, 0),
        None => return None,
    };
    Some((domain, bus, dev, function))
}

/// Both generations of the bus-id lookup: any accepted spelling of the address
/// finds the GPU (an 8- or 4-digit domain, upper or lower case, no domain).
fn handle_by_bus_id(bus_id: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    guard(|| {
        if let Err(e) = driver() {
            return e;
        }
        let wanted = match read_str(bus_id).map(parse_bus_id) {
            Ok(Some(address)) => address,
            Ok(None) => return ERROR_INVALID_ARGUMENT,
            Err(e) => return e,
        };
        handle_where(device, |g| parse_bus_id(&g.pci_bus_id) == Some(wanted))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    match read_str(uuid) {
        Ok(uuid) => handle_where(device, |g| g.uuid == uuid),
        Err(e) => e,
    }
}

/// Deprecated in `nvml.h` (a multi-GPU board shares one serial) but still
/// exported by the real library; every simulated board carries one GPU.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleBySerial(
    serial: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    match read_str(serial) {
        Ok(serial) => handle_where(device, |g| g.serial == serial),
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_bus_id(bus_id, device)
}

/// The pre-`_v2` entry point, kept by the real library for old binaries.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    handle_by_bus_id(bus_id, device)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    with_spec(device, |i, _| put(index, i))
}

// ---------------------------------------------------------------- identity

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    if let Some(rc) = mig::put_name(device, name, length) {
        return rc;
    }
    with_spec(device, |_, spec| put_str(&spec.name, name, length))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    if let Some(rc) = mig::put_uuid(device, uuid, length) {
        return rc;
    }
    with_spec(device, |_, spec| put_str(&spec.uuid, uuid, length))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSerial(
    device: NvmlDevice,
    serial: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_spec(device, |_, spec| put_str(&spec.serial, serial, length))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMinorNumber(device: NvmlDevice, minor: *mut c_uint) -> NvmlReturn {
    with_spec(device, |i, _| put(minor, i))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetBrand(device: NvmlDevice, brand: *mut c_uint) -> NvmlReturn {
    with_spec(device, |_, _| put(brand, BRAND_NVIDIA_RTX))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetArchitecture(device: NvmlDevice, arch: *mut c_uint) -> NvmlReturn {
    with_spec(device, |_, _| put(arch, ARCH_BLACKWELL))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    with_spec(device, |_, _| {
        put(major, 12)?;
        put(minor, 0)
    })
}

/// GPU `i`'s PCI identity, in the `_v3` layout the older layouts are cut from.
fn pci_info(i: u32, spec: &GpuSpec) -> PciInfo {
    // "00000000:18:00.0" → domain, bus, device.
    let (domain, bus, dev, _) = parse_bus_id(&spec.pci_bus_id).unwrap_or_default();
    let mut info = PciInfo {
        bus_id_legacy: [0; 16],
        domain,
        bus,
        device: dev,
        // 10de = NVIDIA; 2bb5 = RTX PRO 6000 Blackwell.
        pci_device_id: 0x2bb5_10de,
        pci_sub_system_id: 0x204e_10de + (i << 20),
        bus_id: [0; 32],
    };
    fill_array(
        &format!("{domain:04X}:{bus:02X}:{dev:02X}.0"),
        &mut info.bus_id_legacy,
    );
    fill_array(&spec.pci_bus_id, &mut info.bus_id);
    info
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v3(device: NvmlDevice, pci: *mut PciInfo) -> NvmlReturn {
    with_spec(device, |i, spec| put(pci, pci_info(i, spec)))
}

/// The first two generations fill the 52-byte layout from before `_v3`: the
/// legacy bus id and the same five numbers, never the 32-byte `busId` (a caller
/// built against them has no room for it).
fn pci_info_legacy(device: NvmlDevice, pci: *mut PciInfoLegacy) -> NvmlReturn {
    with_spec(device, |i, spec| {
        let v3 = pci_info(i, spec);
        put(
            pci,
            PciInfoLegacy {
                bus_id: v3.bus_id_legacy,
                domain: v3.domain,
                bus: v3.bus,
                device: v3.device,
                pci_device_id: v3.pci_device_id,
                pci_sub_system_id: v3.pci_sub_system_id,
                reserved: [0; 4],
            },
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: NvmlDevice,
    pci: *mut PciInfoLegacy,
) -> NvmlReturn {
    pci_info_legacy(device, pci)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo(device: NvmlDevice, pci: *mut PciInfoLegacy) -> NvmlReturn {
    pci_info_legacy(device, pci)
}

// ---------------------------------------------------------------- memory, load

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut Memory) -> NvmlReturn {
    if let Some(rc) = mig::answer_for_mig(device, |_, _, _, inst| {
        let used = inst.used_bytes.min(inst.memory_bytes);
        put(
            memory,
            Memory {
                total: inst.memory_bytes,
                free: inst.memory_bytes - used,
                used,
            },
        )
    }) {
        return rc;
    }
    with_gpu(device, |_, spec, gpu| {
        fail_if(gpu.faults.memory_info)?;
        let used = gpu.used_bytes + spec.reserved_bytes;
        put(
            memory,
            Memory {
                total: spec.total_bytes,
                free: spec.total_bytes.saturating_sub(used),
                used,
            },
        )
    })
}

/// # Safety
/// `memory` is null or points to an `nvmlMemory_v2_t` whose `version` the
/// caller set, as NVML's own contract asks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    if let Some(rc) = mig::answer_for_mig(device, |_, _, _, inst| {
        if memory.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller set `version` in its struct.
        if unsafe { (*memory).version } != MEMORY_V2_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let used = inst.used_bytes.min(inst.memory_bytes);
        put(
            memory,
            MemoryV2 {
                version: MEMORY_V2_VERSION,
                total: inst.memory_bytes,
                reserved: 0,
                free: inst.memory_bytes - used,
                used,
            },
        )
    }) {
        return rc;
    }
    with_gpu(device, |_, spec, gpu| {
        fail_if(gpu.faults.memory_info)?;
        if memory.is_null() {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller set `version` in its struct.
        if unsafe { (*memory).version } != MEMORY_V2_VERSION {
            return Err(ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        put(
            memory,
            MemoryV2 {
                version: MEMORY_V2_VERSION,
                total: spec.total_bytes,
                reserved: spec.reserved_bytes,
                free: spec
                    .total_bytes
                    .saturating_sub(spec.reserved_bytes + gpu.used_bytes),
                used: gpu.used_bytes,
            },
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    utilization: *mut Utilization,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.utilization)?;
        put(
            utilization,
            Utilization {
                gpu: gpu.util_gpu_percent,
                memory: gpu.util_mem_percent,
            },
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperature(
    device: NvmlDevice,
    sensor: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.temperature)?;
        if sensor != TEMPERATURE_GPU {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        put(temp, gpu.temp_c)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerUsage(device: NvmlDevice, power: *mut c_uint) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.power_usage)?;
        put(power, gpu.power_mw)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: NvmlDevice,
    limit: *mut c_uint,
) -> NvmlReturn {
    with_spec(device, |i, spec| {
        fail_if_switched(i, |f| f.power_limit)?;
        put(limit, spec.power_limit_mw)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: NvmlDevice,
    limit: *mut c_uint,
) -> NvmlReturn {
    nvmlDeviceGetPowerManagementLimit(device, limit)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: NvmlDevice,
    limit: *mut c_uint,
) -> NvmlReturn {
    nvmlDeviceGetPowerManagementLimit(device, limit)
}

fn clock(spec: &GpuSpec, gpu: &GpuView, kind: c_uint, max: bool) -> Result<c_uint, NvmlReturn> {
    match kind {
        CLOCK_GRAPHICS | CLOCK_SM if max => Ok(spec.max_graphics_clock_mhz),
        CLOCK_GRAPHICS | CLOCK_SM => Ok(gpu.graphics_clock_mhz),
        CLOCK_MEM if max || gpu.util_gpu_percent > 0 => Ok(spec.max_mem_clock_mhz),
        CLOCK_MEM => Ok(405),
        CLOCK_VIDEO if max => Ok(spec.max_graphics_clock_mhz * 9 / 10),
        CLOCK_VIDEO => Ok(gpu.graphics_clock_mhz * 9 / 10),
        _ => Err(ERROR_INVALID_ARGUMENT),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, spec, gpu| {
        put(mhz, clock(spec, gpu, kind, false)?)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    mhz: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, spec, gpu| {
        put(mhz, clock(spec, gpu, kind, true)?)
    })
}

/// P0 under load or holding memory, P8 at rest.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPerformanceState(
    device: NvmlDevice,
    pstate: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, spec, gpu| {
        let busy = gpu.util_gpu_percent > 0 || gpu.used_bytes > spec.baseline_bytes;
        put(pstate, if busy { 0 } else { 8 })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPersistenceMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        put(mode, c_uint::from(gpu.health.persistence_mode))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeMode(device: NvmlDevice, mode: *mut c_uint) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        if gpu.health.compute_mode > 3 {
            return Err(ERROR_UNKNOWN);
        }
        put(mode, gpu.health.compute_mode)
    })
}

/// Server-edition boards are passively cooled: no fan to report, as on the real card.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetFanSpeed(device: NvmlDevice, _speed: *mut c_uint) -> NvmlReturn {
    with_spec(device, |_, _| Err(ERROR_NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: NvmlDevice,
    _fan: c_uint,
    _speed: *mut c_uint,
) -> NvmlReturn {
    with_spec(device, |_, _| Err(ERROR_NOT_SUPPORTED))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNumFans(device: NvmlDevice, fans: *mut c_uint) -> NvmlReturn {
    with_spec(device, |_, _| put(fans, 0))
}

// ---------------------------------------------------------------- processes
//
// Three lists (compute, graphics, MPS), each in three generations, as the real
// library exports them: the unsuffixed call fills `nvmlProcessInfo_v1_t`, `_v2`
// and `_v3` fill the 24-byte `nvmlProcessInfo_t`. One body per list; the
// generations differ only in the record they write, so all nine report the same
// processes, take the same fault switch and follow the same two-call protocol.

/// One entry of a process list, in the layout of the generation asked for.
trait ProcessRecord: Copy {
    fn new(pid: c_uint, used_bytes: c_ulonglong) -> Self;
}

impl ProcessRecord for ProcessInfoV1 {
    fn new(pid: c_uint, used_bytes: c_ulonglong) -> Self {
        Self {
            pid,
            used_gpu_memory: used_bytes,
        }
    }
}

impl ProcessRecord for ProcessInfo {
    fn new(pid: c_uint, used_bytes: c_ulonglong) -> Self {
        Self {
            pid,
            used_gpu_memory: used_bytes,
            gpu_instance_id: INVALID_INSTANCE_ID,
            compute_instance_id: INVALID_INSTANCE_ID,
        }
    }
}

/// Which of a GPU's process lists.
#[derive(Debug, Clone, Copy)]
enum ProcessList {
    /// The simulated host's processes.
    Compute,
    /// A headless inference host runs no graphics contexts.
    Graphics,
    /// No MPS daemon on the simulated host; no fault switch either (the
    /// graphics list's is not this query's).
    Mps,
}

fn running_processes<T: ProcessRecord>(
    list: ProcessList,
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut T,
) -> NvmlReturn {
    match list {
        ProcessList::Compute => with_gpu(device, |_, _, gpu| {
            fail_if(gpu.faults.compute_processes)?;
            let records: Vec<T> = gpu
                .processes
                .iter()
                .map(|p| T::new(p.pid, p.used_bytes))
                .collect();
            put_list(&records, count, infos)
        }),
        ProcessList::Graphics => with_spec(device, |i, _| {
            fail_if_switched(i, |f| f.graphics_processes)?;
            put_list::<T>(&[], count, infos)
        }),
        ProcessList::Mps => with_spec(device, |_, _| put_list::<T>(&[], count, infos)),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Compute, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Compute, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    running_processes(ProcessList::Compute, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Graphics, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Graphics, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    running_processes(ProcessList::Graphics, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Mps, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    running_processes(ProcessList::Mps, device, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    running_processes(ProcessList::Mps, device, count, infos)
}

/// Total energy since the driver loaded, in mJ: not simulated.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: NvmlDevice,
    _energy: *mut c_ulonglong,
) -> NvmlReturn {
    with_spec(device, |_, _| Err(ERROR_NOT_SUPPORTED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_return_the_headers_codes() {
        assert_eq!(fault_code(Fault::NotSupported), 3);
        assert_eq!(fault_code(Fault::NoPermission), 4);
        assert_eq!(fault_code(Fault::GpuIsLost), 15);
        assert_eq!(fault_code(Fault::Memory), 20);
        assert_eq!(fault_code(Fault::Unknown), 999);
        let mut seen = std::collections::HashSet::new();
        for f in Fault::ALL {
            let c = fault_code(f);
            assert_ne!(c, SUCCESS, "{f:?}");
            assert!(seen.insert(c), "{f:?} shares code {c}");
            // Every fault but UNKNOWN is one the header names specifically.
            if f != Fault::Unknown {
                assert_ne!(error_string(c), c"Unknown Error", "{f:?}");
            }
        }
    }

    #[test]
    fn bus_ids_parse_in_every_spelling_the_header_accepts() {
        let gpu = Some((0, 0x38, 0, 0));
        assert_eq!(parse_bus_id("00000000:38:00.0"), gpu);
        assert_eq!(parse_bus_id("0000:38:00.0"), gpu);
        assert_eq!(parse_bus_id("0:38:0.0"), gpu);
        assert_eq!(parse_bus_id("0000:38:00"), gpu);
        assert_eq!(parse_bus_id("38:00.0"), gpu);
        assert_eq!(parse_bus_id("0000:3a:00.0"), Some((0, 0x3a, 0, 0)));
        assert_eq!(parse_bus_id("0000:3A:1f.1"), Some((0, 0x3a, 0x1f, 1)));
        assert_eq!(parse_bus_id("38:00"), None);
        assert_eq!(parse_bus_id(""), None);
        assert_eq!(parse_bus_id("GPU-1234"), None);
        assert_eq!(parse_bus_id("0000:38:zz.0"), None);
        assert_eq!(parse_bus_id("1:0000:38:00.0"), None);
    }

    #[test]
    fn only_a_switched_on_fault_fails_a_query() {
        assert_eq!(fail_if(None), Ok(()));
        assert_eq!(fail_if(Some(Fault::NotSupported)), Err(ERROR_NOT_SUPPORTED));
        let faults = GpuFaults {
            temperature: Some(Fault::NotSupported),
            ..GpuFaults::default()
        };
        assert_eq!(fail_if(faults.temperature), Err(ERROR_NOT_SUPPORTED));
        assert_eq!(fail_if(faults.power_usage), Ok(()));
        assert_eq!(fail_if(GpuFaults::default().compute_processes), Ok(()));
    }
}
