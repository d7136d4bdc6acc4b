//! The health queries read through nvml-wrapper, as drainwatch reads them:
//! clock-event reasons, ECC, retired pages, remapped rows (raw, as
//! nvml-wrapper has no wrapper for it), the PCIe link, the video engines and
//! per-process utilisation, each following the host's `health` live and each
//! failing with its fault switch; MIG devices as handles of their own; XID
//! errors delivered through an event set.

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, PcieUtilCounter, RetirementCause,
};
use nvml_wrapper::error::NvmlError;
use simhost::{EccCounts, Fault, GpuFaults, GpuUse, Registration};

mod common;

use common::{WRITE, eventually};

/// The GPUs of this test process's host; each test has one of its own.
const GPUS: u32 = 6;

fn host() -> &'static tempfile::TempDir {
    common::host(GPUS)
}

fn nvml() -> Nvml {
    common::nvml(GPUS)
}

fn set_health(gpu: u32, f: impl FnOnce(&mut simhost::GpuHealth)) {
    let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
    simhost::set_health(host().path(), gpu, f).expect("set health");
}

#[test]
fn a_healthy_gpu_says_so_and_every_change_shows_live() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(0).expect("gpu 0");
    // As shipped: idle, ECC on and clean, Gen 5 x16, persistence on.
    assert_eq!(
        gpu.current_throttle_reasons().expect("reasons"),
        ThrottleReasons::GPU_IDLE
    );
    assert!(
        gpu.supported_throttle_reasons()
            .expect("supported")
            .contains(ThrottleReasons::SW_POWER_CAP)
    );
    assert!(gpu.is_ecc_enabled().expect("ecc").currently_enabled);
    assert_eq!(
        gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .expect("ecc"),
        0
    );
    assert!(
        gpu.retired_pages(RetirementCause::DoubleBitEccError)
            .expect("pages")
            .is_empty()
    );
    assert!(!gpu.are_pages_pending_retired().expect("pending"));
    assert_eq!(
        (
            gpu.current_pcie_link_gen().expect("gen"),
            gpu.max_pcie_link_gen().expect("max gen")
        ),
        (5, 5)
    );
    assert_eq!(
        (
            gpu.current_pcie_link_width().expect("w"),
            gpu.max_pcie_link_width().expect("max w")
        ),
        (16, 16)
    );
    assert!(gpu.pcie_throughput(PcieUtilCounter::Receive).expect("rx") > 0);
    assert_eq!(gpu.encoder_utilization().expect("enc").utilization, 0);
    assert!(gpu.is_in_persistent_mode().expect("persistence"));

    set_health(0, |h| {
        h.clocks_event_reasons = 0x4 | 0x40;
        h.ecc_volatile = EccCounts {
            corrected: 12,
            uncorrected: 1,
        };
        h.ecc_aggregate = EccCounts {
            corrected: 30,
            uncorrected: 2,
        };
        h.retired_pages.double_bit = 3;
        h.retired_pages.pending = true;
        h.remapped_rows.pending = true;
        h.remapped_rows.uncorrectable = 1;
        h.pcie.gen_current = 3;
        h.pcie.width_current = 4;
        h.encoder_util = 17;
        h.decoder_util = 23;
    });
    eventually("the reasons to change", || {
        gpu.current_throttle_reasons().ok()
            == Some(
                ThrottleReasons::GPU_IDLE
                    | ThrottleReasons::SW_POWER_CAP
                    | ThrottleReasons::HW_THERMAL_SLOWDOWN,
            )
    });
    assert_eq!(
        gpu.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .expect("ecc"),
        12
    );
    assert_eq!(
        gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .expect("ecc"),
        2
    );
    let pages = gpu
        .retired_pages(RetirementCause::DoubleBitEccError)
        .expect("pages");
    assert_eq!(pages.len(), 3);
    assert!(gpu.are_pages_pending_retired().expect("pending"));
    assert_eq!(
        (
            gpu.current_pcie_link_gen().expect("gen"),
            gpu.current_pcie_link_width().expect("w")
        ),
        (3, 4)
    );
    assert_eq!(gpu.encoder_utilization().expect("enc").utilization, 17);
    assert_eq!(gpu.decoder_utilization().expect("dec").utilization, 23);
    // Remapped rows, through the raw symbol.
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the header's signature; four writable counters and a live handle.
    let rc = unsafe {
        let f = nvml
            .lib()
            .nvmlDeviceGetRemappedRows
            .as_ref()
            .expect("exported");
        f(
            gpu.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    assert_eq!((rc, corr, unc, pending, failure), (0, 0, 1, 1, 0));

    // ECC off: its counters are not supported, never zero.
    set_health(0, |h| h.ecc_enabled = false);
    eventually("ECC off", || {
        gpu.is_ecc_enabled().is_ok_and(|m| !m.currently_enabled)
    });
    assert!(matches!(
        gpu.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        Err(NvmlError::NotSupported)
    ));
}

#[test]
fn per_process_utilisation_follows_each_process() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(1).expect("gpu 1");
    assert!(
        gpu.process_utilization_stats(None)
            .expect("none yet")
            .is_empty()
    );
    let reg = Registration::for_self(host().path()).expect("register");
    reg.set(&[GpuUse {
        gpu: 1,
        used_bytes: 1 << 30,
        util_percent: 40,
    }])
    .expect("set");
    eventually("a sample of this process", || {
        gpu.process_utilization_stats(None).is_ok_and(|s| {
            s.iter()
                .any(|p| p.pid == std::process::id() && p.sm_util == 40)
        })
    });
    drop(reg);
}

#[test]
fn each_family_fails_with_its_switch() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(3).expect("gpu 3");
    {
        let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        simhost::set_faults(
            host().path(),
            3,
            GpuFaults {
                clocks_event_reasons: Some(Fault::NotSupported),
                ecc: Some(Fault::NotSupported),
                retired_pages: Some(Fault::NotSupported),
                pcie: Some(Fault::GpuIsLost),
                video: Some(Fault::NotSupported),
                process_utilization: Some(Fault::NotFound),
                ..GpuFaults::default()
            },
        )
        .expect("faults");
    }
    eventually("the reasons to fail", || {
        matches!(gpu.current_throttle_reasons(), Err(NvmlError::NotSupported))
    });
    assert!(matches!(gpu.is_ecc_enabled(), Err(NvmlError::NotSupported)));
    assert!(matches!(
        gpu.are_pages_pending_retired(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        gpu.current_pcie_link_gen(),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(
        gpu.encoder_utilization(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        gpu.process_utilization_stats(None),
        Err(NvmlError::NotFound)
    ));
    // The rest still answers.
    assert!(gpu.memory_info().is_ok());
}

/// GPU and compute instance ids, raw (nvml-wrapper has no wrapper for them):
/// (return code, id, return code, id).
fn raw_instance_ids(nvml: &Nvml, device: &nvml_wrapper::Device) -> (u32, u32, u32, u32) {
    let (mut gi, mut ci) = (u32::MAX, u32::MAX);
    // SAFETY: a live handle and out-pointers to u32s, as the header declares.
    unsafe {
        let g = nvml
            .lib()
            .nvmlDeviceGetGpuInstanceId
            .as_ref()
            .expect("exported");
        let c = nvml
            .lib()
            .nvmlDeviceGetComputeInstanceId
            .as_ref()
            .expect("exported");
        (
            g(device.handle(), &mut gi),
            gi,
            c(device.handle(), &mut ci),
            ci,
        )
    }
}

fn instance_ids(nvml: &Nvml, device: &nvml_wrapper::Device) -> (u32, u32) {
    let (g, _, c, _) = raw_instance_ids(nvml, device);
    (g, c)
}

#[test]
fn mig_devices_are_children_with_their_own_identity_and_memory() {
    let nvml = nvml();
    let gpu = nvml.device_by_index(4).expect("gpu 4");
    assert_eq!(gpu.mig_mode().expect("mig mode").current, 0);
    assert!(!gpu.mig_is_mig_device_handle().expect("is mig"));
    assert!(
        gpu.mig_device_by_index(0).is_err(),
        "no MIG devices while MIG is off"
    );
    assert_eq!(
        instance_ids(&nvml, &gpu),
        (3, 3),
        "NOT_SUPPORTED on a GPU handle"
    );

    const GIB: u64 = 1 << 30;
    set_health(4, |h| {
        h.mig = Some(vec![
            simhost::MigInstance {
                profile: "1g.24gb".into(),
                memory_bytes: 24 * GIB,
                used_bytes: 3 * GIB,
            },
            simhost::MigInstance {
                profile: "2g.48gb".into(),
                memory_bytes: 48 * GIB,
                used_bytes: 0,
            },
        ]);
    });
    eventually("MIG mode on", || {
        gpu.mig_mode().map(|m| m.current == 1).unwrap_or(false)
    });
    assert_eq!(gpu.mig_device_count().expect("max"), 7);
    let parent_uuid = gpu.uuid().expect("uuid");
    let mut uuids = Vec::new();
    for (i, (profile, total, used)) in [("1g.24gb", 24 * GIB, 3 * GIB), ("2g.48gb", 48 * GIB, 0)]
        .into_iter()
        .enumerate()
    {
        let mig = gpu.mig_device_by_index(i as u32).expect("mig device");
        assert!(mig.mig_is_mig_device_handle().expect("is mig"));
        assert!(
            mig.name()
                .expect("name")
                .ends_with(&format!("MIG {profile}"))
        );
        let uuid = mig.uuid().expect("uuid");
        assert!(uuid.starts_with("MIG-"), "{uuid}");
        assert_ne!(uuid, parent_uuid);
        uuids.push(uuid);
        let mem = mig.memory_info().expect("memory");
        assert_eq!((mem.total, mem.used, mem.free), (total, used, total - used));
        let ids = raw_instance_ids(&nvml, &mig);
        assert_eq!(ids, (0, i as u32 + 1, 0, 0));
        assert_eq!(
            mig.mig_parent_device()
                .expect("parent")
                .uuid()
                .expect("uuid"),
            parent_uuid
        );
    }
    assert_ne!(uuids[0], uuids[1]);
    assert!(matches!(
        gpu.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));

    set_health(4, |h| h.mig = None);
    eventually("MIG mode off", || {
        gpu.mig_mode().map(|m| m.current == 0).unwrap_or(false)
    });
}

#[test]
fn an_xid_reaches_a_waiting_event_set_once_and_only_for_its_gpu() {
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enums::event::XidError;

    let nvml = nvml();
    let gpu = nvml.device_by_index(5).expect("gpu 5");
    // An XID raised before registering is history, not an event.
    {
        let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
        simhost::raise_xid(host().path(), 5, 13).expect("xid");
    }
    assert!(
        gpu.supported_event_types()
            .expect("types")
            .contains(EventTypes::CRITICAL_XID_ERROR)
    );
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (types, code, index, then_nothing) = std::thread::scope(|s| {
        // Event sets are not Send: created, registered and waited on in one thread.
        let waiter = s.spawn(|| {
            let set = nvml.create_event_set().expect("set");
            let set = gpu
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .map_err(|e| e.error)
                .expect("register");
            let quiet = matches!(set.wait(20), Err(NvmlError::Timeout));
            ready_tx.send(quiet).expect("ready");
            let event = set.wait(5_000).expect("an event");
            let code = match event.event_data {
                Some(XidError::Value(code)) => code,
                other => panic!("not an XID: {other:?}"),
            };
            let next = set.wait(50);
            let index = event.device.index().expect("index");
            (
                event.event_type,
                code,
                index,
                matches!(next, Err(NvmlError::Timeout)),
            )
        });
        assert!(
            ready.recv().expect("ready"),
            "an old XID was delivered as new"
        );
        {
            let _w = WRITE.lock().unwrap_or_else(|p| p.into_inner());
            simhost::raise_xid(host().path(), 2, 48).expect("xid on another gpu");
            simhost::raise_xid(host().path(), 5, 79).expect("xid");
        }
        waiter.join().expect("waiter")
    });
    assert!(types.contains(EventTypes::CRITICAL_XID_ERROR));
    assert_eq!((code, index), (79, 5));
    assert!(then_nothing, "each XID is delivered once");
}
