//! MIG: a GPU's mode, and its MIG devices as handles of their own.
//!
//! A GPU whose host `health.mig` is `Some` is in MIG mode, with one MIG device
//! per instance listed there. MIG handles point into their own static table,
//! apart from the GPUs', so a MIG handle passed where only a GPU handle is
//! valid is refused as an unknown handle. The identity and memory queries a
//! MIG-aware client makes on a MIG handle (name, UUID, memory, the GPU and
//! compute instance ids, the parent) answer for the instance.

use std::ffi::{c_char, c_uint};

use simhost::MigInstance;

use crate::driver::{MAX_DEVICES, driver};
use crate::types::*;
use crate::{code, fail_if, guard, put, put_str, with_gpu};

/// MIG devices a GPU may have (seven on every MIG-capable board so far).
pub(crate) const MAX_MIG_DEVICES: u32 = 7;

/// MIG handles are addresses of these slots, `gpu * MAX_MIG_DEVICES + i`.
static MIG_SLOTS: [DeviceSlot; MAX_DEVICES * MAX_MIG_DEVICES as usize] = {
    let mut slots = [const { DeviceSlot { index: 0 } }; MAX_DEVICES * MAX_MIG_DEVICES as usize];
    let mut i = 0;
    while i < slots.len() {
        slots[i].index = i as u32;
        i += 1;
    }
    slots
};

/// The (GPU, instance) behind a MIG handle; `None` for anything else.
pub(crate) fn mig_of(device: NvmlDevice) -> Option<(u32, u32)> {
    let base = MIG_SLOTS.as_ptr() as usize;
    let addr = device as usize;
    let size = std::mem::size_of::<DeviceSlot>();
    if addr < base || !(addr - base).is_multiple_of(size) {
        return None;
    }
    let slot = (addr - base) / size;
    (slot < MIG_SLOTS.len()).then(|| {
        (
            (slot / MAX_MIG_DEVICES as usize) as u32,
            (slot % MAX_MIG_DEVICES as usize) as u32,
        )
    })
}

/// Runs `f` on the instance behind MIG handle `device`, as the host has it
/// now; INVALID_ARGUMENT when the handle is not one or its instance is gone.
fn with_instance(
    device: NvmlDevice,
    f: impl FnOnce(u32, u32, &simhost::GpuSpec, &MigInstance) -> Result<(), NvmlReturn>,
) -> Result<(), NvmlReturn> {
    let (gpu, i) = mig_of(device).ok_or(ERROR_INVALID_ARGUMENT)?;
    let drv = driver()?;
    let view = drv.view()?;
    let spec = drv
        .inventory
        .gpus
        .get(gpu as usize)
        .ok_or(ERROR_INVALID_ARGUMENT)?;
    let g = view.gpus.get(gpu as usize).ok_or(ERROR_INVALID_ARGUMENT)?;
    fail_if(g.faults.mig)?;
    let instance = g
        .health
        .mig
        .as_ref()
        .and_then(|list| list.get(i as usize))
        .ok_or(ERROR_INVALID_ARGUMENT)?;
    f(gpu, i, spec, instance)
}

/// For the identity and memory queries: `Some(code)` when `device` is a MIG
/// handle (the query answered for its instance), `None` to go on as for a GPU.
pub(crate) fn answer_for_mig(
    device: NvmlDevice,
    f: impl FnOnce(u32, u32, &simhost::GpuSpec, &MigInstance) -> Result<(), NvmlReturn>,
) -> Option<NvmlReturn> {
    mig_of(device).map(|_| guard(|| code(with_instance(device, f))))
}

/// A MIG device's name, as the real driver forms it.
pub(crate) fn name(spec: &simhost::GpuSpec, instance: &MigInstance) -> String {
    format!("{} MIG {}", spec.name, instance.profile)
}

/// A MIG device's UUID: `MIG-` and a UUID derived from its parent's.
pub(crate) fn uuid(spec: &simhost::GpuSpec, i: u32) -> String {
    let parent = spec.uuid.trim_start_matches("GPU-");
    // Keep the parent's shape; vary the last group so each instance differs.
    let (head, tail) = parent.rsplit_once('-').unwrap_or((parent, "000000000000"));
    let tail: String = tail.chars().take(10).collect();
    format!("MIG-{head}-{tail}{i:02x}")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.mig)?;
        let mode = c_uint::from(gpu.health.mig.is_some());
        put(current, mode)?;
        put(pending, mode)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: NvmlDevice,
    count: *mut c_uint,
) -> NvmlReturn {
    with_gpu(device, |_, _, gpu| {
        fail_if(gpu.faults.mig)?;
        put(count, MAX_MIG_DEVICES)
    })
}

/// NOT_FOUND for an index with no instance, as the real library answers for a
/// slot left empty; INVALID_ARGUMENT on a GPU not in MIG mode.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig: *mut NvmlDevice,
) -> NvmlReturn {
    with_gpu(device, |gpu_index, _, gpu| {
        fail_if(gpu.faults.mig)?;
        let list = gpu.health.mig.as_ref().ok_or(ERROR_INVALID_ARGUMENT)?;
        if index >= MAX_MIG_DEVICES {
            return Err(ERROR_INVALID_ARGUMENT);
        }
        if index as usize >= list.len() {
            return Err(ERROR_NOT_FOUND);
        }
        let slot = (gpu_index * MAX_MIG_DEVICES + index) as usize;
        put(mig, &MIG_SLOTS[slot] as NvmlDevice)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: NvmlDevice,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        code(with_instance(mig, |gpu, _, _, _| {
            put(device, driver()?.handle(gpu)?)
        }))
    })
}

/// Any handle we gave out: 1 for a MIG device, 0 for a GPU.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig: *mut c_uint,
) -> NvmlReturn {
    if mig_of(device).is_some() {
        return guard(|| code(with_instance(device, |_, _, _, _| put(is_mig, 1))));
    }
    with_gpu(device, |_, _, _| put(is_mig, 0))
}

/// On a MIG handle its GPU instance's id; on a GPU, NOT_SUPPORTED.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(device: NvmlDevice, id: *mut c_uint) -> NvmlReturn {
    if mig_of(device).is_some() {
        return guard(|| code(with_instance(device, |_, i, _, _| put(id, i + 1))));
    }
    with_gpu(device, |_, _, _| Err(ERROR_NOT_SUPPORTED))
}

/// One compute instance per GPU instance, id 0, as the default MIG setup makes.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    if mig_of(device).is_some() {
        return guard(|| code(with_instance(device, |_, _, _, _| put(id, 0))));
    }
    with_gpu(device, |_, _, _| Err(ERROR_NOT_SUPPORTED))
}

/// The names used by [`crate::nvmlDeviceGetName`] for MIG handles.
pub(crate) fn put_name(device: NvmlDevice, out: *mut c_char, length: c_uint) -> Option<NvmlReturn> {
    answer_for_mig(device, |_, _, spec, inst| {
        put_str(&name(spec, inst), out, length)
    })
}

pub(crate) fn put_uuid(device: NvmlDevice, out: *mut c_char, length: c_uint) -> Option<NvmlReturn> {
    answer_for_mig(device, |_, i, spec, _| put_str(&uuid(spec, i), out, length))
}
