//! Fault switches: per GPU, which driver queries fail and with which NVML error.
//!
//! Stored in `host.json` as each GPU's `faults` object (absent or `{}`: none),
//! keyed by query and valued by the error's name in `nvml.h` without its
//! `NVML_ERROR_` prefix:
//!
//! ```json
//! { "gpus": [ { "name": "…", "faults": { "temperature": "NOT_SUPPORTED",
//!                                        "utilization": "GPU_IS_LOST" } } ] }
//! ```
//!
//! Readers pick them up live, like allocations: switching one on or off is a
//! rewrite of `host.json` ([`set_faults`], [`clear_faults`]), atomic as every write
//! here. The mapping from a [`Fault`] to its `nvmlReturn_t` number belongs to the
//! fake NVML library, which mirrors the header.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Inventory;

/// An NVML error a query can be made to return, named as in `nvml.h`
/// (`NVML_ERROR_<NAME>`): only errors a device query can really give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Fault {
    /// `NVML_ERROR_NOT_SUPPORTED`: the device does not have the feature.
    NotSupported,
    /// `NVML_ERROR_NO_PERMISSION`.
    NoPermission,
    /// `NVML_ERROR_NOT_FOUND`.
    NotFound,
    /// `NVML_ERROR_INSUFFICIENT_POWER`: external power cables not attached.
    InsufficientPower,
    /// `NVML_ERROR_TIMEOUT`.
    Timeout,
    /// `NVML_ERROR_IRQ_ISSUE`.
    IrqIssue,
    /// `NVML_ERROR_CORRUPTED_INFOROM`.
    CorruptedInforom,
    /// `NVML_ERROR_GPU_IS_LOST`: the GPU has fallen off the bus.
    GpuIsLost,
    /// `NVML_ERROR_RESET_REQUIRED`.
    ResetRequired,
    /// `NVML_ERROR_OPERATING_SYSTEM`: blocked by the OS or cgroups.
    OperatingSystem,
    /// `NVML_ERROR_IN_USE`.
    InUse,
    /// `NVML_ERROR_MEMORY`: insufficient memory.
    Memory,
    /// `NVML_ERROR_NO_DATA`.
    NoData,
    /// `NVML_ERROR_UNKNOWN`: an internal driver error.
    Unknown,
}

impl Fault {
    /// Every fault, for tests that check them all.
    pub const ALL: [Fault; 14] = [
        Fault::NotSupported,
        Fault::NoPermission,
        Fault::NotFound,
        Fault::InsufficientPower,
        Fault::Timeout,
        Fault::IrqIssue,
        Fault::CorruptedInforom,
        Fault::GpuIsLost,
        Fault::ResetRequired,
        Fault::OperatingSystem,
        Fault::InUse,
        Fault::Memory,
        Fault::NoData,
        Fault::Unknown,
    ];
}

/// One GPU's switches: `Some(fault)` makes the named queries for that GPU return
/// the fault instead of a value. Unknown keys are refused, so a typo cannot pass
/// for a switch that is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuFaults {
    /// `nvmlDeviceGetHandleByIndex(_v2)`, `…ByUUID`, `…ByPciBusId(_v2)`, `…BySerial` for this GPU:
    /// the device cannot be opened at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<Fault>,
    /// `nvmlDeviceGetMemoryInfo` and `nvmlDeviceGetMemoryInfo_v2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_info: Option<Fault>,
    /// `nvmlDeviceGetUtilizationRates`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<Fault>,
    /// `nvmlDeviceGetTemperature`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<Fault>,
    /// `nvmlDeviceGetPowerUsage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_usage: Option<Fault>,
    /// `nvmlDeviceGetPowerManagementLimit`, `…DefaultLimit`, `nvmlDeviceGetEnforcedPowerLimit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<Fault>,
    /// `nvmlDeviceGetComputeRunningProcesses` (v1, `_v2`, `_v3`), on the count
    /// query as on the fill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_processes: Option<Fault>,
    /// `nvmlDeviceGetGraphicsRunningProcesses` (v1, `_v2`, `_v3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graphics_processes: Option<Fault>,
    /// `nvmlDeviceGetCurrentClocksEventReasons`, `…SupportedClocksEventReasons`
    /// (and their `Throttle` names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks_event_reasons: Option<Fault>,
    /// `nvmlDeviceGetEccMode`, `nvmlDeviceGetTotalEccErrors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc: Option<Fault>,
    /// `nvmlDeviceGetRetiredPages(_v2)`, `…RetiredPagesPendingStatus`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<Fault>,
    /// `nvmlDeviceGetRemappedRows`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<Fault>,
    /// The PCIe link: generation, width, speed, throughput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie: Option<Fault>,
    /// `nvmlDeviceGetEncoderUtilization`, `…DecoderUtilization`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<Fault>,
    /// `nvmlDeviceGetProcessUtilization`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_utilization: Option<Fault>,
    /// `nvmlDeviceGetMigMode`, `…MaxMigDeviceCount`, `…MigDeviceHandleByIndex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<Fault>,
    /// `nvmlDeviceGetSupportedEventTypes`, `nvmlDeviceRegisterEvents`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Fault>,
}

impl GpuFaults {
    /// No switch on.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Replaces GPU `gpu`'s fault switches in the host directory's `host.json`
/// (written atomically; readers see the old switches or the new ones).
pub fn set_faults(dir: &Path, gpu: u32, faults: GpuFaults) -> io::Result<()> {
    let mut inventory = Inventory::load(dir)?;
    let count = inventory.gpus.len();
    let spec = inventory.gpus.get_mut(gpu as usize).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("host.json has {count} GPUs, no GPU {gpu}"),
        )
    })?;
    spec.faults = faults;
    inventory.save(dir)
}

/// Switches every fault off on every GPU.
pub fn clear_faults(dir: &Path) -> io::Result<()> {
    let mut inventory = Inventory::load(dir)?;
    for spec in &mut inventory.gpus {
        spec.faults = GpuFaults::default();
    }
    inventory.save(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuSpec, observe};

    #[test]
    fn absent_faults_mean_none_and_are_not_written() {
        // A host.json written before the switches existed.
        let old = r#"{ "gpus": [ { "name": "old card" }, {} ] }"#;
        let inv: Inventory = serde_json::from_str(old).expect("parse");
        assert_eq!(inv.gpus.len(), 2);
        assert_eq!(inv.gpus[0].name, "old card");
        assert!(inv.gpus.iter().all(|g| g.faults.is_empty()));
        assert_eq!(inv.gpus[1].faults, GpuFaults::default());

        let body = serde_json::to_string(&Inventory::with_gpus(2)).expect("write");
        assert!(!body.contains("faults"), "{body}");
        let empty: GpuFaults = serde_json::from_str("{}").expect("empty object");
        assert!(empty.is_empty());
    }

    #[test]
    fn faults_use_the_headers_names_and_round_trip() {
        let json = r#"{ "temperature": "NOT_SUPPORTED", "power_usage": "NOT_SUPPORTED",
                        "utilization": "GPU_IS_LOST", "compute_processes": "UNKNOWN",
                        "memory_info": "CORRUPTED_INFOROM" }"#;
        let f: GpuFaults = serde_json::from_str(json).expect("parse");
        assert_eq!(
            f,
            GpuFaults {
                temperature: Some(Fault::NotSupported),
                power_usage: Some(Fault::NotSupported),
                utilization: Some(Fault::GpuIsLost),
                compute_processes: Some(Fault::Unknown),
                memory_info: Some(Fault::CorruptedInforom),
                ..GpuFaults::default()
            }
        );
        assert!(!f.is_empty());
        let back: GpuFaults =
            serde_json::from_str(&serde_json::to_string(&f).expect("write")).expect("reparse");
        assert_eq!(back, f);

        let names: Vec<String> = Fault::ALL
            .iter()
            .map(|f| serde_json::to_string(f).expect("name"))
            .collect();
        assert!(names.contains(&"\"GPU_IS_LOST\"".to_owned()));
        assert!(names.contains(&"\"IRQ_ISSUE\"".to_owned()));
        assert!(names.contains(&"\"MEMORY\"".to_owned()));
        for (f, name) in Fault::ALL.iter().zip(&names) {
            assert_eq!(serde_json::from_str::<Fault>(name).expect("parse name"), *f);
        }
    }

    #[test]
    fn typos_and_unknown_errors_are_refused() {
        assert!(serde_json::from_str::<GpuFaults>(r#"{ "temprature": "NOT_SUPPORTED" }"#).is_err());
        assert!(serde_json::from_str::<GpuFaults>(r#"{ "temperature": "ON_FIRE" }"#).is_err());
        assert!(serde_json::from_str::<GpuFaults>(r#"{ "temperature": 3 }"#).is_err());
    }

    #[test]
    fn set_and_clear_rewrite_host_json_and_reach_the_view() {
        let dir = tempfile::tempdir().expect("tempdir");
        Inventory::with_gpus(3).save(dir.path()).expect("save");
        let lost = GpuFaults {
            utilization: Some(Fault::GpuIsLost),
            ..GpuFaults::default()
        };
        set_faults(dir.path(), 1, lost).expect("set");

        let inv = Inventory::load(dir.path()).expect("load");
        assert_eq!(inv.gpus[1].faults, lost);
        assert!(inv.gpus[0].faults.is_empty() && inv.gpus[2].faults.is_empty());
        // Everything else about the GPU is kept.
        assert_eq!(
            GpuSpec {
                faults: GpuFaults::default(),
                ..inv.gpus[1].clone()
            },
            GpuSpec::rtx_pro_6000(1)
        );
        let view = observe(dir.path(), 1_000).expect("observe");
        assert_eq!(view.gpus[1].faults, lost);
        assert!(view.gpus[0].faults.is_empty());

        let err = set_faults(dir.path(), 3, lost).expect_err("no GPU 3");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

        clear_faults(dir.path()).expect("clear");
        let view = observe(dir.path(), 1_000).expect("observe");
        assert!(view.gpus.iter().all(|g| g.faults.is_empty()));
        assert_eq!(
            Inventory::load(dir.path()).expect("load"),
            Inventory::with_gpus(3)
        );
    }
}
