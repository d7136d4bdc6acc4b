//! What hardware the simulated host has, and which driver it claims to run.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{GpuFaults, GpuHealth};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The whole host. Stored as `host.json`; every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Inventory {
    /// One driver generation, claimed coherently: 575.x ships NVML 12.575 and CUDA 12.9,
    /// the first branch with Blackwell workstation/server GPUs.
    pub driver_version: String,
    pub nvml_version: String,
    /// As NVML encodes it: 1000 × major + 10 × minor.
    pub cuda_driver_version: i32,
    /// How long after a process exits its memory is still held (context teardown).
    pub release_delay_ms: u64,
    pub gpus: Vec<GpuSpec>,
}

/// One GPU's fixed properties.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSpec {
    pub name: String,
    pub uuid: String,
    pub serial: String,
    /// `domain:bus:device.function`, as in `nvidia-smi`.
    pub pci_bus_id: String,
    pub total_bytes: u64,
    /// What the driver keeps for itself (`nvmlMemory_v2_t.reserved`); not counted as used in v2.
    pub reserved_bytes: u64,
    /// Used memory with no process on the GPU.
    pub baseline_bytes: u64,
    pub power_limit_mw: u32,
    pub idle_power_mw: u32,
    pub idle_temp_c: u32,
    /// Temperature at sustained full load.
    pub load_temp_c: u32,
    pub max_graphics_clock_mhz: u32,
    pub max_mem_clock_mhz: u32,
    /// Driver queries made to fail on this GPU (see [`GpuFaults`]); unlike the
    /// rest, read live by readers, not fixed at init. Absent: none.
    #[serde(default, skip_serializing_if = "GpuFaults::is_empty")]
    pub faults: GpuFaults,
    /// What the driver reports of the GPU's health (read live, as the faults).
    #[serde(default, skip_serializing_if = "GpuHealth::is_default")]
    pub health: GpuHealth,
}

impl Default for GpuSpec {
    fn default() -> Self {
        Self::rtx_pro_6000(0)
    }
}

impl GpuSpec {
    /// An NVIDIA RTX PRO 6000 Blackwell as the `index`-th GPU of the host.
    pub fn rtx_pro_6000(index: u32) -> Self {
        // Deterministic, well-formed identifiers per index.
        let h = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(u64::from(index) + 1);
        Self {
            name: "NVIDIA RTX PRO 6000 Blackwell".to_owned(),
            uuid: format!(
                "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                (h >> 32) as u32,
                (h >> 16) as u16,
                h as u16,
                (index * 0x1111 + 0x4000) as u16,
                h & 0xffff_ffff_ffff
            ),
            serial: format!("1794025{index:06}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index * 0x10),
            total_bytes: 96 * GIB,
            reserved_bytes: 0,
            baseline_bytes: 4 * MIB,
            power_limit_mw: 600_000,
            idle_power_mw: 24_000,
            idle_temp_c: 31,
            load_temp_c: 78,
            max_graphics_clock_mhz: 2_617,
            max_mem_clock_mhz: 14_001,
            faults: GpuFaults::default(),
            health: GpuHealth::default(),
        }
    }
}

impl Default for Inventory {
    fn default() -> Self {
        Self::with_gpus(8)
    }
}

impl Inventory {
    /// `count` identical RTX PRO 6000 GPUs.
    pub fn with_gpus(count: u32) -> Self {
        Self {
            driver_version: "575.57.08".to_owned(),
            nvml_version: "12.575.57.08".to_owned(),
            cuda_driver_version: 12_090,
            release_delay_ms: 1_500,
            gpus: (0..count).map(GpuSpec::rtx_pro_6000).collect(),
        }
    }

    /// Reads `host.json` from the host directory, or the default when it is absent.
    pub fn load(dir: &Path) -> io::Result<Self> {
        match std::fs::read(dir.join("host.json")) {
            Ok(body) => serde_json::from_slice(&body)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("host.json: {e}"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Writes `host.json` atomically.
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        crate::fsutil::write_atomic(&dir.join("host.json"), &body)
    }
}
