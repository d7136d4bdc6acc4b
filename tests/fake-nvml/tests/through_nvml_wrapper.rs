//! The fake read through nvml-wrapper, exactly as drainwatch reads it: the built
//! cdylib loaded by path, real struct versions, the two-call process protocol.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use simhost::{Fault, GpuFaults, GpuUse, HOST_DIR_ENV, Inventory, Registration};

const MIB: u64 = 1 << 20;

/// The cdylib `cargo test` built for this test, beside it in `deps/`.
fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.with_file_name("libnvidia_ml.so")
}

/// One host for the whole test process: NVML state is process-wide. GPU 4 is
/// the fault-switch test's alone; the other tests leave it be.
fn host() -> &'static tempfile::TempDir {
    static HOST: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOST.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut inv = Inventory::with_gpus(5);
        inv.release_delay_ms = 200;
        inv.save(dir.path()).expect("save");
        // SAFETY: set once, before any thread of this process reads it via NVML.
        unsafe { std::env::set_var(HOST_DIR_ENV, dir.path()) };
        dir
    })
}

fn nvml() -> Nvml {
    host();
    Nvml::builder()
        .lib_path(OsStr::new(&lib_path()))
        .init()
        .expect("init the fake")
}

#[test]
fn reports_inventory_and_driver_generation() {
    let nvml = nvml();
    assert_eq!(nvml.device_count().expect("count"), 5);
    assert_eq!(nvml.sys_driver_version().expect("driver"), "575.57.08");
    assert_eq!(nvml.sys_nvml_version().expect("nvml"), "12.575.57.08");
    assert_eq!(nvml.sys_cuda_driver_version().expect("cuda"), 12_090);
    let dev = nvml.device_by_index(2).expect("gpu 2");
    assert_eq!(dev.name().expect("name"), "NVIDIA RTX PRO 6000 Blackwell");
    assert!(dev.uuid().expect("uuid").starts_with("GPU-"));
    assert_eq!(dev.index().expect("index"), 2);
    let by_uuid = nvml
        .device_by_uuid(dev.uuid().expect("uuid"))
        .expect("by uuid");
    assert_eq!(by_uuid.index().expect("index"), 2);
    assert_eq!(dev.pci_info().expect("pci").bus_id, "00000000:38:00.0");
    let mem = dev.memory_info().expect("memory v2");
    assert_eq!(mem.total, 96 << 30);
    assert_eq!(mem.used + mem.free + mem.reserved, mem.total);
    assert!(dev.power_usage().expect("power") >= 20_000);
    assert_eq!(dev.enforced_power_limit().expect("limit"), 600_000);
    assert!(dev.temperature(TemperatureSensor::Gpu).expect("temp") > 20);
    assert!(matches!(
        nvml.device_by_index(5),
        Err(NvmlError::InvalidArg)
    ));
    assert!(matches!(dev.fan_speed(0), Err(NvmlError::NotSupported)));
}

#[test]
fn process_memory_appears_and_is_released_after_exit() {
    let nvml = nvml();
    let dir = host().path();
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn");
    let st = simhost::read_proc_stat(child.id())
        .expect("stat")
        .expect("alive");
    Registration::new(dir, st.pid, st.start_ticks)
        .set(&[
            GpuUse {
                gpu: 1,
                used_bytes: 3000 * MIB,
                util_percent: 50,
            },
            GpuUse {
                gpu: 3,
                used_bytes: 1000 * MIB,
                util_percent: 50,
            },
        ])
        .expect("register");
    std::thread::sleep(std::time::Duration::from_millis(10));

    let gpu1 = nvml.device_by_index(1).expect("gpu 1");
    let procs = gpu1.running_compute_processes().expect("processes");
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, st.pid);
    assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(3000 * MIB));
    assert_eq!(gpu1.memory_info().expect("mem").used, 3004 * MIB);
    assert_eq!(gpu1.utilization_rates().expect("util").gpu, 50);
    assert!(
        nvml.device_by_index(0)
            .expect("gpu 0")
            .running_compute_processes()
            .expect("p")
            .is_empty()
    );

    child.kill().expect("kill");
    child.wait().expect("reap");
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Exited, but the context is still being torn down.
    assert_eq!(gpu1.memory_info().expect("mem").used, 3004 * MIB);
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(gpu1.memory_info().expect("mem").used, 4 * MIB);
    assert!(gpu1.running_compute_processes().expect("p").is_empty());
    assert_eq!(
        nvml.device_by_index(3)
            .expect("gpu 3")
            .memory_info()
            .expect("m")
            .used,
        4 * MIB
    );
}

/// Polls `cond` until it holds; fails after `timeout`. (The fake reuses one view
/// of the host for a few milliseconds, so a switch shows up shortly after it is set.)
fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn fault_switches_fail_the_chosen_queries_live() {
    let nvml = nvml();
    let dir = host().path();
    let gpu = nvml.device_by_index(4).expect("gpu 4");
    let uuid = gpu.uuid().expect("uuid");
    assert!(gpu.temperature(TemperatureSensor::Gpu).is_ok());

    simhost::set_faults(
        dir,
        4,
        GpuFaults {
            temperature: Some(Fault::NotSupported),
            power_usage: Some(Fault::NotSupported),
            utilization: Some(Fault::GpuIsLost),
            memory_info: Some(Fault::Unknown),
            compute_processes: Some(Fault::Unknown),
            graphics_processes: Some(Fault::NoPermission),
            power_limit: Some(Fault::NoPermission),
            ..GpuFaults::default()
        },
    )
    .expect("switch faults on");
    eventually("the temperature to fail", Duration::from_secs(5), || {
        matches!(
            gpu.temperature(TemperatureSensor::Gpu),
            Err(NvmlError::NotSupported)
        )
    });
    assert!(matches!(gpu.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(gpu.utilization_rates(), Err(NvmlError::GpuLost)));
    assert!(matches!(gpu.memory_info(), Err(NvmlError::Unknown)));
    assert!(matches!(
        gpu.running_compute_processes(),
        Err(NvmlError::Unknown)
    ));
    assert!(matches!(
        gpu.running_graphics_processes(),
        Err(NvmlError::NoPermission)
    ));
    assert!(matches!(
        gpu.enforced_power_limit(),
        Err(NvmlError::NoPermission)
    ));
    // Queries without a switch still answer, on this GPU and the others.
    assert_eq!(gpu.name().expect("name"), "NVIDIA RTX PRO 6000 Blackwell");
    assert_eq!(gpu.index().expect("index"), 4);
    assert!(nvml.device_by_index(4).is_ok());
    let other = nvml.device_by_index(0).expect("gpu 0");
    assert!(other.temperature(TemperatureSensor::Gpu).expect("temp") > 20);
    assert!(other.utilization_rates().is_ok());
    assert_eq!(other.memory_info().expect("memory").total, 96 << 30);

    // The GPU falls off the bus: it cannot even be opened.
    simhost::set_faults(
        dir,
        4,
        GpuFaults {
            handle: Some(Fault::GpuIsLost),
            ..GpuFaults::default()
        },
    )
    .expect("lose the GPU");
    eventually("opening the GPU to fail", Duration::from_secs(5), || {
        matches!(nvml.device_by_index(4), Err(NvmlError::GpuLost))
    });
    assert!(matches!(nvml.device_by_uuid(uuid), Err(NvmlError::GpuLost)));
    // Only the handle switch is on now.
    assert!(gpu.temperature(TemperatureSensor::Gpu).is_ok());

    simhost::clear_faults(dir).expect("switch faults off");
    eventually("GPU 4 to answer again", Duration::from_secs(5), || {
        nvml.device_by_index(4).is_ok()
    });
    assert!(gpu.temperature(TemperatureSensor::Gpu).expect("temp") > 20);
    assert!(gpu.power_usage().expect("power") >= 20_000);
    assert_eq!(gpu.utilization_rates().expect("util").gpu, 0);
    assert_eq!(gpu.memory_info().expect("memory").used, 4 * MIB);
    assert!(
        gpu.running_compute_processes()
            .expect("processes")
            .is_empty()
    );
    assert_eq!(gpu.enforced_power_limit().expect("limit"), 600_000);
}
