//! A GPU's clocks and health, as an operator checks them before trusting it
//! with a 90-second warm-up: clock-event (throttle) reasons, ECC errors,
//! retired pages and remapped rows, the PCIe link, persistence and compute
//! mode, MIG, the video engines and the XID errors it raised.
//!
//! Each reading is optional, as in [`GpuSample`](crate::GpuSample): a field
//! NVML did not give is `None` and the sample's `errors` say why, under the
//! field's name here (`"ecc"`, `"remapped_rows"`, …). A field the GPU does not
//! have is `None` with the reason "not supported by this GPU", never zero.
//! What is read how often is the backend's; see ARCHITECTURE.md.

use serde::{Deserialize, Serialize};

/// One GPU's clocks and health in one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuHealth {
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub mem_clock_max_mhz: Option<u32>,
    /// `nvmlClocksEventReason*` bits set now; [`reason_names`] decodes them.
    pub clocks_event_reasons: Option<u64>,
    pub encoder_percent: Option<u32>,
    pub decoder_percent: Option<u32>,
    pub pcie: Option<PcieLink>,
    /// PCIe traffic, KiB/s, as NVML samples it (over 20 ms on a real driver).
    pub pcie_tx_kib_s: Option<u32>,
    pub pcie_rx_kib_s: Option<u32>,
    /// ECC on now; `None` where the board has no ECC.
    pub ecc_enabled: Option<bool>,
    /// Only where ECC is on.
    pub ecc: Option<EccErrors>,
    /// Older boards retire pages…
    pub retired_pages: Option<RetiredPages>,
    /// …newer ones remap rows.
    pub remapped_rows: Option<RemappedRows>,
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<ComputeMode>,
    pub mig_enabled: Option<bool>,
    /// The MIG devices of a GPU in MIG mode, as its children.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigDevice>,
    /// XID errors seen since drainwatch started watching, newest last (at most
    /// [`XID_SHOWN`]); all of them are kept in the store.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub xid: Vec<XidEvent>,
    /// When the slow fields (ECC, pages, rows, modes, MIG, PCIe traffic) were
    /// last read (Unix ms).
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub slow_at_ms: Option<u64>,
}

/// XID errors a sample carries per GPU.
pub const XID_SHOWN: usize = 8;

/// The PCIe link now and at most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub gen_current: u32,
    pub gen_max: u32,
    pub width_current: u32,
    pub width_max: u32,
}

impl PcieLink {
    pub fn narrower(&self) -> bool {
        self.width_current < self.width_max
    }

    pub fn slower(&self) -> bool {
        self.gen_current < self.gen_max
    }
}

/// ECC error counts: volatile since the driver loaded, aggregate over the
/// board's life; corrected (single-bit) and uncorrected (double-bit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccErrors {
    pub volatile_corrected: u64,
    pub volatile_uncorrected: u64,
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPages {
    pub single_bit: u32,
    pub double_bit: u32,
    /// A retirement waits for the next reset.
    pub pending: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    /// A remap waits for the next reset.
    pub pending: bool,
    /// A remap failed: the GPU should be taken out of service.
    pub failure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

impl ComputeMode {
    pub fn label(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::ExclusiveThread => "exclusive thread",
            Self::Prohibited => "prohibited",
            Self::ExclusiveProcess => "exclusive process",
        }
    }
}

/// One MIG device of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// Its index under its GPU.
    pub index: u32,
    pub uuid: Option<String>,
    /// NVML's name, e.g. `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
    pub name: Option<String>,
    pub gpu_instance_id: Option<u32>,
    pub mem_total_bytes: Option<u64>,
    pub mem_used_bytes: Option<u64>,
}

impl MigDevice {
    /// The profile from the name (`1g.10gb`), or the whole name.
    pub fn profile(&self) -> Option<&str> {
        let name = self.name.as_deref()?;
        Some(name.rsplit_once(" MIG ").map_or(name, |(_, p)| p))
    }
}

/// An XID error a GPU raised: its code and when drainwatch was told (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub code: u64,
    pub at_ms: u64,
}

/// The clock-event reasons by bit, with the words an operator knows them by.
pub const REASONS: [(u64, &str); 9] = [
    (0x1, "GPU idle"),
    (0x2, "applications clocks setting"),
    (0x4, "software power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "software thermal slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "hardware power brake"),
    (0x100, "display clock setting"),
];

/// The reasons that mean the GPU is held below the clocks it could run at
/// for power or heat: throttling, as a benchmark's result must mention.
pub const THROTTLE_MASK: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

/// The bit for "the GPU is idle".
pub const REASON_IDLE: u64 = 0x1;

/// `reasons` decoded, in bit order; bits without a name as hex.
pub fn reason_names(reasons: u64) -> Vec<String> {
    let mut out: Vec<String> = REASONS
        .iter()
        .filter(|(bit, _)| reasons & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect();
    let known: u64 = REASONS.iter().map(|(b, _)| b).sum();
    let rest = reasons & !known;
    if rest != 0 {
        out.push(format!("other ({rest:#x})"));
    }
    out
}

/// What can be wrong with a GPU, each a reason the pre-launch gate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthReason {
    /// An XID error since the last successful launch.
    Xid,
    /// A row remap pending or failed (or, on older boards, a page retirement
    /// pending).
    RowRemap,
    /// An uncorrected ECC error since the last successful launch.
    Ecc,
    /// A PCIe link narrower (or, under load, slower) than the GPU's max.
    Pcie,
    /// Clocks held down for power or heat.
    Throttle,
}

impl HealthReason {
    pub fn label(self) -> &'static str {
        match self {
            Self::Xid => "XID error",
            Self::RowRemap => "row remap",
            Self::Ecc => "uncorrected ECC",
            Self::Pcie => "PCIe link",
            Self::Throttle => "throttling",
        }
    }
}

/// One thing wrong with one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthIssue {
    pub gpu_index: u32,
    pub reason: HealthReason,
    /// What exactly, for people: "XID 79 at 12:03:04", "x4 of x16".
    pub detail: String,
}

impl HealthIssue {
    pub fn line(&self) -> String {
        format!(
            "GPU {}: {} ({})",
            self.gpu_index,
            self.reason.label(),
            self.detail
        )
    }
}

/// `issues` in a word or two, for a badge or a table cell: one issue by
/// what it is ("XID 79", "x4 of x16", "row remap", "ECC error",
/// "throttled"), more by how many; `None` for none.
pub fn brief(issues: &[HealthIssue]) -> Option<String> {
    match issues {
        [] => None,
        [one] => Some(match one.reason {
            HealthReason::Xid | HealthReason::Pcie => one.detail.clone(),
            HealthReason::RowRemap => "row remap".to_owned(),
            HealthReason::Ecc => "ECC error".to_owned(),
            HealthReason::Throttle => "throttled".to_owned(),
        }),
        more => Some(format!("{} issues", more.len())),
    }
}

/// What is wrong with a GPU now, by what it shows alone: the badge on its
/// card. The gate adds what needs history (an XID or ECC error since the last
/// launch); here an XID counts while it is among the recent ones shown, and
/// ECC while the volatile uncorrected count is above zero.
pub fn issues_now(gpu_index: u32, h: &GpuHealth) -> Vec<HealthIssue> {
    let mut out = Vec::new();
    let mut push = |reason, detail: String| {
        out.push(HealthIssue {
            gpu_index,
            reason,
            detail,
        })
    };
    if let Some(x) = h.xid.last() {
        push(HealthReason::Xid, format!("XID {}", x.code));
    }
    for detail in row_remap_issues(h) {
        push(HealthReason::RowRemap, detail.to_owned());
    }
    if let Some(e) = h.ecc
        && e.volatile_uncorrected > 0
    {
        push(
            HealthReason::Ecc,
            format!(
                "{} uncorrected since the driver loaded",
                e.volatile_uncorrected
            ),
        );
    }
    if let Some(p) = pcie_issue(h) {
        push(HealthReason::Pcie, p);
    }
    if let Some(r) = h.clocks_event_reasons
        && r & THROTTLE_MASK != 0
    {
        push(
            HealthReason::Throttle,
            reason_names(r & THROTTLE_MASK).join(", "),
        );
    }
    out
}

/// What the GPU's memory repair waits for or failed at: a row remap failed
/// or pending, a page retirement pending (each a [`HealthReason::RowRemap`]).
pub fn row_remap_issues(h: &GpuHealth) -> Vec<&'static str> {
    let mut out = Vec::new();
    if let Some(r) = h.remapped_rows {
        if r.failure {
            out.push("a row remap failed");
        } else if r.pending {
            out.push("a row remap is pending a reset");
        }
    }
    if h.retired_pages.is_some_and(|p| p.pending) {
        out.push("a page retirement is pending a reset");
    }
    out
}

/// The PCIe link's problem, if any: narrower than its max always; slower only
/// while the GPU works, because an idle GPU drops its link speed to save power.
pub fn pcie_issue(h: &GpuHealth) -> Option<String> {
    let p = h.pcie?;
    let idle = h.clocks_event_reasons.is_none_or(|r| r & REASON_IDLE != 0);
    if p.narrower() {
        Some(format!("x{} of x{}", p.width_current, p.width_max))
    } else if p.slower() && !idle {
        Some(format!("Gen {} of Gen {}", p.gen_current, p.gen_max))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_decode_by_name_and_unknown_bits_show() {
        assert_eq!(reason_names(0), Vec::<String>::new());
        assert_eq!(
            reason_names(0x4 | 0x40),
            vec!["software power cap", "hardware thermal slowdown"]
        );
        assert_eq!(reason_names(0x1000), vec!["other (0x1000)"]);
    }

    #[test]
    fn a_healthy_gpu_has_no_issues_and_each_fault_names_itself() {
        let healthy = GpuHealth {
            clocks_event_reasons: Some(REASON_IDLE),
            pcie: Some(PcieLink {
                gen_current: 1,
                gen_max: 5,
                width_current: 16,
                width_max: 16,
            }),
            ecc: Some(EccErrors {
                volatile_corrected: 40,
                ..Default::default()
            }),
            remapped_rows: Some(RemappedRows {
                correctable: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(
            issues_now(0, &healthy).is_empty(),
            "idle Gen 1 and corrected errors are normal"
        );

        let mut busy = healthy.clone();
        busy.clocks_event_reasons = Some(0);
        assert_eq!(issues_now(0, &busy)[0].detail, "Gen 1 of Gen 5");

        let mut bad = healthy;
        bad.pcie = Some(PcieLink {
            gen_current: 5,
            gen_max: 5,
            width_current: 1,
            width_max: 16,
        });
        bad.remapped_rows = Some(RemappedRows {
            failure: true,
            ..Default::default()
        });
        bad.xid = vec![XidEvent { code: 79, at_ms: 5 }];
        bad.clocks_event_reasons = Some(0x40);
        let lines: Vec<String> = issues_now(3, &bad).iter().map(HealthIssue::line).collect();
        assert_eq!(
            lines,
            vec![
                "GPU 3: XID error (XID 79)",
                "GPU 3: row remap (a row remap failed)",
                "GPU 3: PCIe link (x1 of x16)",
                "GPU 3: throttling (hardware thermal slowdown)",
            ]
        );
    }

    #[test]
    fn mig_profile_comes_from_the_name() {
        let d = MigDevice {
            index: 0,
            uuid: None,
            name: Some("NVIDIA RTX PRO 6000 MIG 1g.24gb".into()),
            gpu_instance_id: Some(1),
            mem_total_bytes: None,
            mem_used_bytes: None,
        };
        assert_eq!(d.profile(), Some("1g.24gb"));
    }
}
