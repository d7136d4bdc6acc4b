//! The queries monitoring tools make beyond drainwatch's (nvitop and gpustat
//! ask them on every refresh), read through nvml-wrapper and, where it has no
//! wrapper, its raw bindings: the versioned temperature, the display, the
//! Windows driver model, and the BAR1 aperture of GPUs and MIG devices.

use std::ffi::{c_int, c_uint};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use simhost::{Fault, GpuFaults, GpuUse, MigInstance, Registration};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

mod common;

use common::{WRITE, eventually};

/// The GPUs of this test process's host; each test has one of its own.
const GPUS: u32 = 4;

fn host() -> &'static tempfile::TempDir {
    common::host(GPUS)
}

fn nvml() -> Nvml {
    common::nvml(GPUS)
}

/// `nvmlTemperature_v1_t`, declared here from the header.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TemperatureV1 {
    version: c_uint,
    sensor_type: c_uint,
    temperature: c_int,
}

/// `nvmlTemperature_v1`: `NVML_STRUCT_VERSION(Temperature, 1)`.
const TEMPERATURE_V1: c_uint = 12 | (1 << 24);

/// `nvmlDeviceGetTemperatureV` on `device` with the given version and sensor:
/// (return code, temperature).
fn temperature_v(
    nvml: &Nvml,
    device: &nvml_wrapper::Device,
    version: c_uint,
    sensor: c_uint,
) -> (u32, i32) {
    let f = nvml
        .lib()
        .nvmlDeviceGetTemperatureV
        .as_ref()
        .expect("exported");
    let mut t = TemperatureV1 {
        version,
        sensor_type: sensor,
        temperature: -1,
    };
    // SAFETY: a live handle and a header-shaped struct with its version set.
    let rc = unsafe { f(device.handle(), (&raw mut t).cast()) };
    (rc, t.temperature)
}

#[test]
fn the_versioned_temperature_reads_as_the_plain_one() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(0).expect("gpu 0");
    let plain = gpu.temperature(TemperatureSensor::Gpu).expect("plain");
    assert_eq!(
        temperature_v(&nvml, &gpu, TEMPERATURE_V1, 0),
        (0, plain as i32)
    );
    // A caller built against another layout is told so; only the GPU sensor exists.
    assert_eq!(temperature_v(&nvml, &gpu, 12 | (2 << 24), 0).0, 25);
    assert_eq!(temperature_v(&nvml, &gpu, TEMPERATURE_V1, 1).0, 2);
}

#[test]
fn a_server_gpu_has_no_display_and_no_windows_driver_model() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(0).expect("gpu 0");
    assert!(!gpu.is_display_active().expect("display active"));
    assert!(!gpu.is_display_connected().expect("display mode"));
    let f = nvml
        .lib()
        .nvmlDeviceGetDriverModel
        .as_ref()
        .expect("exported");
    let (mut current, mut pending) = (7, 7);
    // SAFETY: a live handle and two out-pointers to u32s, as the header declares.
    let rc = unsafe { f(gpu.handle(), &mut current, &mut pending) };
    assert_eq!(
        (rc, current, pending),
        (3, 7, 7),
        "NOT_SUPPORTED, untouched"
    );
}

#[test]
fn bar1_spans_the_memory_and_grows_with_each_context() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(1).expect("gpu 1");
    let idle = gpu.bar1_memory_info().expect("bar1");
    assert_eq!(idle.total, 128 * GIB);
    assert_eq!((idle.used, idle.free), (MIB, 128 * GIB - MIB));
    let reg = Registration::for_self(host().path()).expect("register");
    reg.set(&[GpuUse {
        gpu: 1,
        used_bytes: 10 * GIB,
        util_percent: 20,
    }])
    .expect("set");
    eventually("this process's context", || {
        gpu.bar1_memory_info()
            .is_ok_and(|b| b.used == 3 * MIB && b.free == 128 * GIB - 3 * MIB)
    });
    drop(reg);
}

#[test]
fn a_mig_device_has_its_share_of_bar1() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(2).expect("gpu 2");
    {
        let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        simhost::set_health(host().path(), 2, |h| {
            h.mig = Some(vec![MigInstance {
                profile: "4g.48gb".to_owned(),
                memory_bytes: 48 * GIB,
                used_bytes: 0,
            }]);
        })
        .expect("mig");
    }
    eventually("MIG mode", || gpu.mig_mode().is_ok_and(|m| m.current == 1));
    let mig = gpu.mig_device_by_index(0).expect("mig device");
    let bar1 = mig
        .bar1_memory_info()
        .expect("MIG BAR1 (nvitop's MIG rows need it)");
    assert_eq!(bar1.total, 64 * GIB);
    assert_eq!(bar1.used + bar1.free, bar1.total);
}

#[test]
fn they_fail_with_the_switch_of_what_they_read() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(3).expect("gpu 3");
    {
        let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        simhost::set_faults(
            host().path(),
            3,
            GpuFaults {
                temperature: Some(Fault::NotSupported),
                memory_info: Some(Fault::GpuIsLost),
                ..GpuFaults::default()
            },
        )
        .expect("faults");
    }
    eventually("the faults", || {
        matches!(gpu.bar1_memory_info(), Err(NvmlError::GpuLost))
    });
    assert_eq!(temperature_v(&nvml, &gpu, TEMPERATURE_V1, 0), (3, -1));
    assert!(matches!(
        gpu.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::NotSupported)
    ));
    // Fixed properties still answer.
    assert!(!gpu.is_display_active().expect("display active"));
}
