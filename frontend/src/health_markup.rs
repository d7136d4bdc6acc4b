//! A GPU card's health as HTML text: the badge in its head (shown only when
//! something is wrong, the details on hover), the clocks-and-link line, and
//! the MIG devices of a GPU in MIG mode. Text, as [`crate::gpu_markup`] is,
//! for the same reasons.
//!
//! A field the GPU lacks reads "not supported"; a field NVML failed to give
//! reads "—" with NVML's reason on hover; neither is ever shown as zero.

use std::fmt::Write as _;

use shared::GpuSample;
use shared::health::{GpuHealth, HealthIssue, HealthReason, brief, issues_now, reason_names};
use shared::units::{fmt_bytes, fmt_bytes_of, fmt_percent};

use crate::gpu_markup::MISSING;
use crate::markup::escape;

/// The badge: empty when the GPU shows nothing wrong. Throttling alone is a
/// warning (amber); anything the launch gate may refuse is red.
pub(crate) fn badge(gpu: Option<&GpuSample>) -> String {
    let Some(g) = gpu else {
        return String::new();
    };
    let issues = issues_now(g.index, &g.health);
    if issues.is_empty() {
        return String::new();
    }
    let level = if issues.iter().all(|i| i.reason == HealthReason::Throttle) {
        "warn"
    } else {
        "bad"
    };
    let mut reasons: Vec<&str> = issues.iter().map(|i| reason_key(i.reason)).collect();
    reasons.dedup();
    let title = issues
        .iter()
        .map(HealthIssue::line)
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        r#"<span class="health-badge health-{level}" data-testid="gpu-health-badge" data-level="{level}" data-reasons="{}" title="{}">{}</span>"#,
        reasons.join(","),
        escape(&title),
        escape(&brief(&issues).unwrap_or_default())
    )
}

fn reason_key(r: HealthReason) -> &'static str {
    match r {
        HealthReason::Xid => "xid",
        HealthReason::RowRemap => "row_remap",
        HealthReason::Ecc => "ecc",
        HealthReason::Pcie => "pcie",
        HealthReason::Throttle => "throttle",
    }
}

/// One item of the health line: its text, or "not supported", or [`MISSING`]
/// with NVML's reason on hover.
fn item(out: &mut String, g: &GpuSample, testid: &str, field: &str, text: Option<String>) {
    let lead = testid.trim_start_matches("gpu-h-");
    let (class, shown, title) = match (text, g.error(field)) {
        (Some(t), _) => ("hf", t, None),
        (None, Some(r)) if g.unsupported(field) => (
            "hf hf-na",
            format!("{lead} not supported"),
            Some(r.to_owned()),
        ),
        (None, Some(r)) => ("hf hf-err", format!("{lead} {MISSING}"), Some(r.to_owned())),
        (None, None) => ("hf hf-err", format!("{lead} {MISSING}"), None),
    };
    let _ = write!(out, r#"<span class="{class}" data-testid="{testid}""#);
    if class == "hf hf-na" {
        out.push_str(r#" data-unsupported="true""#);
    }
    if let Some(t) = title {
        let _ = write!(out, r#" title="{}""#, escape(&format!("{field}: {t}")));
    }
    let _ = write!(out, ">{}</span>", escape(&shown));
}

fn ecc_text(h: &GpuHealth) -> Option<String> {
    match (h.ecc_enabled, h.ecc) {
        (Some(false), _) => Some("off".to_owned()),
        (_, Some(e)) if e.volatile_uncorrected > 0 => {
            Some(format!("{} uncorrected", e.volatile_uncorrected))
        }
        (_, Some(e)) if e.volatile_corrected > 0 => {
            Some(format!("{} corrected", e.volatile_corrected))
        }
        (_, Some(_)) => Some("ok".to_owned()),
        _ => None,
    }
}

/// Everything else, for the line's tooltip: one fact per line, each unread
/// fact with why.
fn details(g: &GpuSample) -> String {
    let h = &g.health;
    let mut lines: Vec<String> = clocks_and_link(h)
        .into_iter()
        .chain(errors_and_modes(h))
        .map(|(name, field, v)| {
            let v = v.unwrap_or_else(|| g.error(field).unwrap_or("not read yet").to_owned());
            format!("{name}: {v}")
        })
        .collect();
    match g.error("xid") {
        Some(why) => lines.push(format!("XID errors: not watched ({why})")),
        None if h.xid.is_empty() => lines.push("XID errors: none seen".to_owned()),
        None => {}
    }
    for x in &h.xid {
        lines.push(format!(
            "XID {} at {}",
            x.code,
            crate::localtime::hms(x.at_ms)
        ));
    }
    lines.join("\n")
}

/// A fact of the details: its name, the sample's field it comes from (whose
/// error says why it is missing), and its value when it was read.
type Fact = (&'static str, &'static str, Option<String>);

/// The clocks, why they are held back, and the PCIe link.
fn clocks_and_link(h: &shared::health::GpuHealth) -> Vec<Fact> {
    let mhz = |cur: Option<u32>, max: Option<u32>| {
        cur.map(|c| match max {
            Some(m) => format!("{c} of {m} MHz"),
            None => format!("{c} MHz"),
        })
    };
    vec![
        (
            "SM clock",
            "sm_clock_mhz",
            mhz(h.sm_clock_mhz, h.sm_clock_max_mhz),
        ),
        (
            "memory clock",
            "mem_clock_mhz",
            mhz(h.mem_clock_mhz, h.mem_clock_max_mhz),
        ),
        (
            "clock events",
            "clocks_event_reasons",
            h.clocks_event_reasons.map(|r| {
                let names = reason_names(r);
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            }),
        ),
        (
            "PCIe link",
            "pcie",
            h.pcie.map(|p| {
                format!(
                    "Gen {} x{} (max Gen {} x{})",
                    p.gen_current, p.width_current, p.gen_max, p.width_max
                )
            }),
        ),
        (
            "PCIe traffic",
            "pcie_throughput",
            h.pcie_tx_kib_s
                .zip(h.pcie_rx_kib_s)
                .map(|(tx, rx)| format!("tx {tx} KiB/s, rx {rx} KiB/s")),
        ),
    ]
}

/// Memory errors, the GPU's modes and its media engines.
fn errors_and_modes(h: &shared::health::GpuHealth) -> Vec<Fact> {
    let on_off = |b: bool| if b { "on" } else { "off" }.to_owned();
    vec![
        (
            "ECC",
            "ecc",
            h.ecc.map(|e| {
                format!(
                    "volatile {} corrected, {} uncorrected; aggregate {} corrected, {} uncorrected",
                    e.volatile_corrected,
                    e.volatile_uncorrected,
                    e.aggregate_corrected,
                    e.aggregate_uncorrected
                )
            }),
        ),
        (
            "remapped rows",
            "remapped_rows",
            h.remapped_rows.map(|r| {
                format!(
                    "{} correctable, {} uncorrectable{}{}",
                    r.correctable,
                    r.uncorrectable,
                    if r.pending { ", remap pending" } else { "" },
                    if r.failure { ", remap FAILED" } else { "" }
                )
            }),
        ),
        (
            "retired pages",
            "retired_pages",
            h.retired_pages.map(|p| {
                format!(
                    "{} single-bit, {} double-bit{}",
                    p.single_bit,
                    p.double_bit,
                    if p.pending {
                        ", retirement pending"
                    } else {
                        ""
                    }
                )
            }),
        ),
        (
            "persistence mode",
            "persistence_mode",
            h.persistence_mode.map(on_off),
        ),
        (
            "compute mode",
            "compute_mode",
            h.compute_mode.map(|m| m.label().to_owned()),
        ),
        ("MIG mode", "mig", h.mig_enabled.map(on_off)),
        (
            "encoder",
            "encoder_percent",
            h.encoder_percent.map(fmt_percent),
        ),
        (
            "decoder",
            "decoder_percent",
            h.decoder_percent.map(fmt_percent),
        ),
    ]
}

/// The clocks-and-link line: SM clock, PCIe link, ECC; the rest (the memory
/// clock among it) on hover.
pub(crate) fn line(gpu: Option<&GpuSample>) -> String {
    let Some(g) = gpu else {
        return String::new();
    };
    let h = &g.health;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<span class="hl-all" title="{}">"#,
        escape(&details(g))
    );
    item(
        &mut out,
        g,
        "gpu-h-SM",
        "sm_clock_mhz",
        h.sm_clock_mhz.map(|c| format!("SM {c} MHz")),
    );
    item(
        &mut out,
        g,
        "gpu-h-PCIe",
        "pcie",
        h.pcie
            .map(|p| format!("PCIe Gen{} x{}", p.gen_current, p.width_current)),
    );
    item(
        &mut out,
        g,
        "gpu-h-ECC",
        "ecc",
        ecc_text(h).map(|t| format!("ECC {t}")),
    );
    out.push_str("</span>");
    out
}

/// The MIG devices, as children of their GPU: empty unless MIG is on.
pub(crate) fn mig(gpu: Option<&GpuSample>) -> String {
    let Some(g) = gpu.filter(|g| g.health.mig_enabled == Some(true)) else {
        return String::new();
    };
    let mut out = String::from(r#"<span class="mig-label">MIG</span>"#);
    if g.health.mig.is_empty() {
        out.push_str(r#"<span class="mig-none">no instances</span>"#);
    }
    for m in &g.health.mig {
        let title = format!(
            "{}\n{}\nGPU instance {}",
            m.name.as_deref().unwrap_or("name not reported"),
            m.uuid.as_deref().unwrap_or("uuid not reported"),
            m.gpu_instance_id
                .map_or_else(|| MISSING.to_owned(), |i| i.to_string())
        );
        let mem = match (m.mem_used_bytes, m.mem_total_bytes) {
            (Some(u), Some(t)) => fmt_bytes_of(u, t),
            (None, Some(t)) => format!("{MISSING} / {}", fmt_bytes(t)),
            _ => MISSING.to_owned(),
        };
        let _ = write!(
            out,
            r#"<span class="mig-dev" data-testid="gpu-mig-device" data-mig-index="{}" data-uuid="{}" title="{}"><b>{}</b> <span class="num">{}</span></span>"#,
            m.index,
            escape(m.uuid.as_deref().unwrap_or_default()),
            escape(&title),
            escape(m.profile().unwrap_or(MISSING)),
            escape(&mem)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use shared::FieldError;
    use shared::gpu::NOT_SUPPORTED;
    use shared::health::{EccErrors, MigDevice, PcieLink, XidEvent};

    use super::*;

    fn gpu() -> GpuSample {
        GpuSample {
            index: 3,
            health: GpuHealth {
                sm_clock_mhz: Some(1410),
                sm_clock_max_mhz: Some(1980),
                mem_clock_mhz: Some(2619),
                clocks_event_reasons: Some(0x1),
                pcie: Some(PcieLink {
                    gen_current: 5,
                    gen_max: 5,
                    width_current: 16,
                    width_max: 16,
                }),
                ecc_enabled: Some(true),
                ecc: Some(EccErrors::default()),
                ..GpuHealth::default()
            },
            ..GpuSample::default()
        }
    }

    #[test]
    fn a_healthy_gpu_has_no_badge_and_its_line_reads_in_units() {
        let g = gpu();
        assert_eq!(badge(Some(&g)), "");
        let html = line(Some(&g));
        for text in ["SM 1410 MHz", "PCIe Gen5 x16", "ECC ok"] {
            assert!(html.contains(&format!(">{text}</span>")), "{text}: {html}");
        }
        assert!(html.contains("SM clock: 1410 of 1980 MHz"), "{html}");
        assert!(html.contains("memory clock: 2619 MHz"), "{html}");
        assert!(html.contains("XID errors: none seen"), "{html}");
        assert!(html.contains("clock events: GPU idle"), "{html}");
    }

    #[test]
    fn the_badge_names_one_issue_and_counts_more() {
        let mut g = gpu();
        g.health.xid.push(XidEvent {
            code: 79,
            at_ms: 1_000,
        });
        let html = badge(Some(&g));
        assert!(html.contains(r#"data-level="bad""#), "{html}");
        assert!(html.contains(r#"data-reasons="xid""#), "{html}");
        assert!(html.contains(">XID 79</span>"), "{html}");
        assert!(
            html.contains(r#"title="GPU 3: XID error (XID 79)""#),
            "{html}"
        );
        g.health.pcie.as_mut().expect("pcie").width_current = 4;
        let html = badge(Some(&g));
        assert!(html.contains(">2 issues</span>"), "{html}");
        assert!(html.contains("GPU 3: PCIe link (x4 of x16)"), "{html}");
        // Throttling alone is a warning.
        let mut t = gpu();
        t.health.clocks_event_reasons = Some(0x40);
        let html = badge(Some(&t));
        assert!(html.contains(r#"data-level="warn""#), "{html}");
        assert!(html.contains(">throttled</span>"), "{html}");
        assert!(html.contains("hardware thermal slowdown"), "{html}");
    }

    #[test]
    fn unsupported_reads_not_supported_and_an_error_reads_missing() {
        let mut g = gpu();
        g.health.ecc = None;
        g.health.ecc_enabled = None;
        g.health.sm_clock_mhz = None;
        g.errors = vec![
            FieldError {
                field: "ecc".to_owned(),
                reason: NOT_SUPPORTED.to_owned(),
            },
            FieldError {
                field: "sm_clock_mhz".to_owned(),
                reason: "no permission".to_owned(),
            },
        ];
        let html = line(Some(&g));
        assert!(
            html.contains(r#"data-testid="gpu-h-ECC" data-unsupported="true" title="ecc: not supported by this GPU">ECC not supported</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"class="hf hf-err" data-testid="gpu-h-SM" title="sm_clock_mhz: no permission">SM —</span>"#),
            "{html}"
        );
        assert!(!html.contains("ECC 0"), "{html}");
    }

    #[test]
    fn mig_devices_are_listed_under_their_gpu() {
        let mut g = gpu();
        assert_eq!(mig(Some(&g)), "");
        g.health.mig_enabled = Some(true);
        g.health.mig = vec![MigDevice {
            index: 0,
            uuid: Some("MIG-1".to_owned()),
            name: Some("NVIDIA H100 MIG 1g.10gb".to_owned()),
            gpu_instance_id: Some(9),
            mem_total_bytes: Some(10 << 30),
            mem_used_bytes: Some(1 << 30),
        }];
        let html = mig(Some(&g));
        assert!(html.contains(r#"data-uuid="MIG-1""#), "{html}");
        assert!(html.contains("<b>1g.10gb</b>"), "{html}");
        assert!(html.contains("GPU instance 9"), "{html}");
    }
}
