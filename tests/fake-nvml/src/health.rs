//! The health queries of `nvml.h`, over each GPU's `health` in the host
//! ([`simhost::GpuHealth`], read live): clock-event (throttle) reasons, ECC
//! mode and error counts, retired pages, remapped rows, the PCIe link and its
//! throughput, encoder and decoder load, and per-process utilisation. Each
//! takes the GPU's fault switch for its family, as the other queries do.

use std::ffi::{c_uint, c_ulonglong};

use simhost::{GpuHealth, GpuSpec, GpuView};

use crate::types::*;
use crate::{fail_if, put, put_list, with_gpu};

/// The reasons the driver reports now: the host's, and idling when the GPU is
/// idle (as a real driver does).
fn event_reasons(gpu: &GpuView) -> c_ulonglong {
    let idle = if gpu.util_gpu_percent == 0 {
        CLOCKS_EVENT_REASON_GPU_IDLE
    } else {
        0
    };
    gpu.health.clocks_event_reasons | idle
}

/// Runs `f` on GPU `device`'s health, after its family's fault switch.
fn with_health(
    device: NvmlDevice,
    switch: impl FnOnce(&simhost::GpuFaults) -> Option<simhost::Fault>,
    f: impl FnOnce(&GpuSpec, &GpuView, &GpuHealth) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    with_gpu(device, |_, spec, gpu| {
        fail_if(switch(&gpu.faults))?;
        f(spec, gpu, &gpu.health)
    })
}

// ---------------------------------------------------------------- clock events

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.clocks_event_reasons,
        |_, gpu, _| put(reasons, event_reasons(gpu)),
    )
}

/// The name the header had before 12.535; kept for older clients.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    nvmlDeviceGetCurrentClocksEventReasons(device, reasons)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedClocksEventReasons(
    device: NvmlDevice,
    supported: *mut c_ulonglong,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.clocks_event_reasons,
        |_, _, _| put(supported, CLOCKS_EVENT_REASONS_ALL),
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedClocksThrottleReasons(
    device: NvmlDevice,
    supported: *mut c_ulonglong,
) -> NvmlReturn {
    nvmlDeviceGetSupportedClocksEventReasons(device, supported)
}

// ---------------------------------------------------------------- ECC

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEccMode(
    device: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.ecc,
        |_, _, h| {
            let mode = c_uint::from(h.ecc_enabled);
            put(current, mode)?;
            put(pending, mode)
        },
    )
}

/// `errorType` 0 corrected / 1 uncorrected; `counterType` 0 volatile / 1
/// aggregate. With ECC off: NOT_SUPPORTED, as the real library answers.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: NvmlDevice,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.ecc,
        |_, _, h| {
            if !h.ecc_enabled {
                return Err(ERROR_NOT_SUPPORTED);
            }
            let counts = match counter_type {
                ECC_COUNTER_VOLATILE => h.ecc_volatile,
                ECC_COUNTER_AGGREGATE => h.ecc_aggregate,
                _ => return Err(ERROR_INVALID_ARGUMENT),
            };
            match error_type {
                MEMORY_ERROR_CORRECTED => put(count, counts.corrected),
                MEMORY_ERROR_UNCORRECTED => put(count, counts.uncorrected),
                _ => Err(ERROR_INVALID_ARGUMENT),
            }
        },
    )
}

// ---------------------------------------------------------------- retired pages, remapped rows

/// Addresses of retired pages: made up, page-aligned and distinct.
fn page_addresses(cause: c_uint, n: u32) -> Vec<c_ulonglong> {
    (0..u64::from(n))
        .map(|i| 0x1_0000_0000 + (u64::from(cause) << 32) + i * 0x1000)
        .collect()
}

fn retired(
    device: NvmlDevice,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: Option<*mut c_ulonglong>,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.retired_pages,
        |_, _, h| {
            let n = match cause {
                PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT => h.retired_pages.single_bit,
                PAGE_RETIREMENT_CAUSE_DOUBLE_BIT => h.retired_pages.double_bit,
                _ => return Err(ERROR_INVALID_ARGUMENT),
            };
            let pages = page_addresses(cause, n);
            if let Some(ts) = timestamps
                && !ts.is_null()
                && !pages.is_empty()
            {
                // SAFETY: non-null; the caller gives as many slots as addresses
                // (checked by the address list's own protocol below first).
                let room = if count.is_null() {
                    0
                } else {
                    unsafe { *count }
                } as usize;
                if room >= pages.len() {
                    let stamps = vec![simhost::now_ms() / 1000; pages.len()];
                    // SAFETY: `room` slots are writable at `ts`.
                    unsafe { std::ptr::copy_nonoverlapping(stamps.as_ptr(), ts, stamps.len()) };
                }
            }
            put_list(&pages, count, addresses)
        },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPages(
    device: NvmlDevice,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> NvmlReturn {
    retired(device, cause, count, addresses, None)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: NvmlDevice,
    cause: c_uint,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> NvmlReturn {
    retired(device, cause, count, addresses, Some(timestamps))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: NvmlDevice,
    pending: *mut c_uint,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.retired_pages,
        |_, _, h| put(pending, c_uint::from(h.retired_pages.pending)),
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRemappedRows(
    device: NvmlDevice,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.remapped_rows,
        |_, _, h| {
            let r = h.remapped_rows;
            put(correctable, r.correctable)?;
            put(uncorrectable, r.uncorrectable)?;
            put(pending, c_uint::from(r.pending))?;
            put(failure, c_uint::from(r.failure))
        },
    )
}

// ---------------------------------------------------------------- PCIe

fn pcie(device: NvmlDevice, out: *mut c_uint, pick: fn(&simhost::PcieLink) -> u32) -> NvmlReturn {
    with_health(device, |f| f.pcie, |_, _, h| put(out, pick(&h.pcie)))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: NvmlDevice,
    gen_: *mut c_uint,
) -> NvmlReturn {
    pcie(device, gen_, |p| p.gen_current)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: NvmlDevice,
    gen_: *mut c_uint,
) -> NvmlReturn {
    pcie(device, gen_, |p| p.gen_max)
}

/// The GPU's own maximum (the slot may allow less: `nvmlDeviceGetMaxPcieLinkGeneration`).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuMaxPcieLinkGeneration(
    device: NvmlDevice,
    gen_: *mut c_uint,
) -> NvmlReturn {
    pcie(device, gen_, |p| p.gen_max)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: NvmlDevice,
    width: *mut c_uint,
) -> NvmlReturn {
    pcie(device, width, |p| p.width_current)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: NvmlDevice,
    width: *mut c_uint,
) -> NvmlReturn {
    pcie(device, width, |p| p.width_max)
}

/// MB/s per lane of each generation, after encoding (as `nvidia-smi` counts).
fn lane_mbps(gen_: u32) -> u32 {
    match gen_ {
        1 => 250,
        2 => 500,
        3 => 985,
        4 => 1_969,
        5 => 3_938,
        _ => 7_563,
    }
}

/// The link's current speed in Mb/s per lane, as `nvmlDeviceGetPcieSpeed` says it.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPcieSpeed(device: NvmlDevice, speed: *mut c_uint) -> NvmlReturn {
    pcie(device, speed, |p| match p.gen_current {
        1 => 2_500,
        2 => 5_000,
        3 => 8_000,
        4 => 16_000,
        5 => 32_000,
        _ => 64_000,
    })
}

/// KB/s over the last 20 ms: a tenth of the link while the GPU is busy,
/// more received than sent, a trickle at rest.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPcieThroughput(
    device: NvmlDevice,
    counter: c_uint,
    value: *mut c_uint,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.pcie,
        |_, gpu, h| {
            let link_kbps =
                u64::from(lane_mbps(h.pcie.gen_current)) * u64::from(h.pcie.width_current) * 1_000;
            let busy = link_kbps * u64::from(gpu.util_gpu_percent) / 1_000;
            let (tx, rx) = (busy / 3 + 40, busy + 120);
            match counter {
                PCIE_UTIL_TX_BYTES => put(value, tx.min(u64::from(u32::MAX)) as c_uint),
                PCIE_UTIL_RX_BYTES => put(value, rx.min(u64::from(u32::MAX)) as c_uint),
                _ => Err(ERROR_INVALID_ARGUMENT),
            }
        },
    )
}

// ---------------------------------------------------------------- encoder, decoder, per process

/// The video engines sample over 167 ms, as on recent boards.
const VIDEO_SAMPLING_US: c_uint = 167_000;

/// One video engine's load (`pick` chooses which) and its sampling period.
fn video_util(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
    pick: fn(&GpuHealth) -> u32,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.video,
        |_, _, h| {
            put(util, pick(h).min(100))?;
            put(period_us, VIDEO_SAMPLING_US)
        },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    video_util(device, util, period_us, |h| h.encoder_util)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    video_util(device, util, period_us, |h| h.decoder_util)
}

/// One sample per process with a context on the GPU (timestamps in µs):
/// its share of the SMs, of the memory bandwidth in proportion, no video.
/// Samples no newer than `last_seen` are left out; two calls, as the
/// process lists.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    samples: *mut ProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> NvmlReturn {
    with_health(
        device,
        |f| f.process_utilization,
        |_, gpu, _| {
            let now_us = simhost::now_ms() * 1_000;
            let list: Vec<ProcessUtilizationSample> = if now_us > last_seen {
                gpu.processes
                    .iter()
                    .map(|p| ProcessUtilizationSample {
                        pid: p.pid,
                        time_stamp: now_us,
                        sm_util: p.util_percent,
                        mem_util: p.util_percent * 55 / 100,
                        enc_util: 0,
                        dec_util: 0,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            put_list(&list, count, samples)
        },
    )
}
