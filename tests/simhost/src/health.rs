//! A GPU's health as a driver reports it: clock-event (throttle) reasons,
//! ECC error counts, retired pages and remapped rows, the PCIe link,
//! persistence and compute mode, MIG, encoder and decoder load, and the XID
//! errors it raised. Stored in `host.json` as each GPU's `health` object
//! (absent or `{}`: a healthy RTX PRO 6000 on a Gen 5 x16 link, ECC on, no
//! MIG), read live like the fault switches: a test makes a GPU unhealthy by
//! rewriting it ([`set_health`], [`raise_xid`]).

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Inventory;

/// Corrected and uncorrected ECC errors of one counter (volatile: since the
/// driver loaded; aggregate: over the board's life).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EccCounts {
    pub corrected: u64,
    pub uncorrected: u64,
}

/// Pages the driver retired (older boards) and whether a retirement waits
/// for the next reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetiredPages {
    pub single_bit: u32,
    pub double_bit: u32,
    pub pending: bool,
}

/// Rows the driver remapped (Ampere and later), a remap waiting for the next
/// reset, and a remap that failed (the GPU should be taken out of service).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

/// The PCIe link: generation and lanes now and at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PcieLink {
    pub gen_current: u32,
    pub gen_max: u32,
    pub width_current: u32,
    pub width_max: u32,
}

impl Default for PcieLink {
    fn default() -> Self {
        Self {
            gen_current: 5,
            gen_max: 5,
            width_current: 16,
            width_max: 16,
        }
    }
}

/// One MIG GPU instance of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstance {
    /// Its profile's name, e.g. `1g.24gb`.
    pub profile: String,
    pub memory_bytes: u64,
    /// Of it, in use now.
    #[serde(default)]
    pub used_bytes: u64,
}

/// An XID error the GPU raised, and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Xid {
    pub code: u64,
    pub at_ms: u64,
}

/// A GPU's health. Every field has a healthy default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuHealth {
    /// `nvmlClocksEventReason*` bits set now beyond idling (which the driver
    /// adds itself when the GPU is idle): `0x4` software power cap, `0x20`
    /// software thermal slowdown, `0x40` hardware thermal, `0x80` hardware
    /// power brake, `0x8` hardware slowdown, `0x10` sync boost.
    pub clocks_event_reasons: u64,
    pub ecc_enabled: bool,
    pub ecc_volatile: EccCounts,
    pub ecc_aggregate: EccCounts,
    pub retired_pages: RetiredPages,
    pub remapped_rows: RemappedRows,
    pub pcie: PcieLink,
    pub persistence_mode: bool,
    /// `nvmlComputeMode_t`: 0 default, 1 exclusive thread (deprecated), 2
    /// prohibited, 3 exclusive process.
    pub compute_mode: u32,
    /// MIG mode on, with these instances; `None`: off.
    pub mig: Option<Vec<MigInstance>>,
    /// Percent of the encoder and decoder busy.
    pub encoder_util: u32,
    pub decoder_util: u32,
    /// XID errors raised so far, oldest first.
    pub xid: Vec<Xid>,
}

impl Default for GpuHealth {
    fn default() -> Self {
        Self {
            clocks_event_reasons: 0,
            ecc_enabled: true,
            ecc_volatile: EccCounts::default(),
            ecc_aggregate: EccCounts::default(),
            retired_pages: RetiredPages::default(),
            remapped_rows: RemappedRows::default(),
            pcie: PcieLink::default(),
            persistence_mode: true,
            compute_mode: 0,
            mig: None,
            encoder_util: 0,
            decoder_util: 0,
            xid: Vec::new(),
        }
    }
}

impl GpuHealth {
    /// Healthy and as shipped: nothing to write.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Changes GPU `gpu`'s health in `host.json` with `f` (atomically written).
pub fn set_health(dir: &Path, gpu: u32, f: impl FnOnce(&mut GpuHealth)) -> io::Result<()> {
    let mut inventory = Inventory::load(dir)?;
    let count = inventory.gpus.len();
    let spec = inventory.gpus.get_mut(gpu as usize).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("host.json has {count} GPUs, no GPU {gpu}"),
        )
    })?;
    f(&mut spec.health);
    inventory.save(dir)
}

/// GPU `gpu` raises XID `code` now (also counted, as a real driver does, by
/// nothing else: an XID's consequences are the test's to set).
pub fn raise_xid(dir: &Path, gpu: u32, code: u64) -> io::Result<()> {
    let at_ms = crate::now_ms();
    set_health(dir, gpu, |h| h.xid.push(Xid { code, at_ms }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe;

    #[test]
    fn health_defaults_are_not_written_and_changes_reach_the_view() {
        let body = serde_json::to_string(&Inventory::with_gpus(2)).expect("write");
        assert!(!body.contains("health"), "{body}");
        let dir = tempfile::tempdir().expect("tempdir");
        Inventory::with_gpus(2).save(dir.path()).expect("save");
        set_health(dir.path(), 1, |h| {
            h.pcie.width_current = 1;
            h.remapped_rows.pending = true;
        })
        .expect("set");
        raise_xid(dir.path(), 1, 79).expect("xid");
        let view = observe(dir.path(), 1_000).expect("observe");
        assert!(view.gpus[0].health.is_default());
        let h = &view.gpus[1].health;
        assert_eq!((h.pcie.width_current, h.pcie.width_max), (1, 16));
        assert!(h.remapped_rows.pending);
        assert_eq!(h.xid.len(), 1);
        assert_eq!(h.xid[0].code, 79);
        assert!(set_health(dir.path(), 2, |_| {}).is_err());
        assert!(serde_json::from_str::<GpuHealth>(r#"{"pcie": {"widht_current": 1}}"#).is_err());
    }
}
