//! A GPU card's readings as HTML text: the head line, the memory figures, the
//! foreign holders' line and the utilisation, power and temperature stats.
//! `GpuCard` sets these as its blocks' content (`inner_html`), one reactive
//! block each, so a sample redraws the same elements. Why text and not
//! components: see [`crate::markup`]. Text from NVML (names, UUIDs, reasons)
//! goes through [`escape`].

use std::fmt::Write as _;

use shared::units::{fmt_bytes, fmt_percent, fmt_power_mw, fmt_temp_c};
use shared::{GpuSample, MemHolders};

use crate::markup::escape;

/// Shown for a reading NVML did not give.
pub(crate) const MISSING: &str = "—";

/// Why `field` is missing: its entry in `errors`, else an entry for the same
/// family of fields (`power` for `power_limit_mw`), else a generic line.
fn missing_reason(gpu: &GpuSample, field: &str) -> String {
    let family = field.split('_').next().unwrap_or(field);
    gpu.errors
        .iter()
        .find(|e| e.field == field)
        .or_else(|| {
            gpu.errors
                .iter()
                .find(|e| e.field.split('_').next() == Some(family))
        })
        .map_or_else(
            || "not reported by NVML".to_owned(),
            |e| format!("{}: {}", e.field, e.reason),
        )
}

/// The foreign line's tooltip: every foreign PID, and what NVML leaves out.
fn foreign_title(h: &MemHolders) -> String {
    let pids = h
        .foreign_pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = format!(
        "GPU memory held by processes outside the managed server: {} (pid {pids})",
        fmt_bytes(h.foreign_bytes)
    );
    if h.unattributed {
        text.push_str("\nNVML does not report some processes' amounts");
    }
    text
}

/// Where a reading is shown: the span's class and `data-testid`, the
/// attribute that carries the raw number, the field NVML reports it as (for
/// the reason it is missing), and the text before the value.
struct Slot {
    class: &'static str,
    testid: &'static str,
    data: &'static str,
    field: &'static str,
    lead: &'static str,
}

/// A slot without lead text.
const fn slot(
    class: &'static str,
    testid: &'static str,
    data: &'static str,
    field: &'static str,
) -> Slot {
    Slot {
        class,
        testid,
        data,
        field,
        lead: "",
    }
}

const MEM_USED: Slot = slot(
    "num mem-used",
    "gpu-mem-used",
    "data-bytes",
    "mem_used_bytes",
);
const MEM_TOTAL: Slot = slot(
    "num mem-total",
    "gpu-mem-total",
    "data-bytes",
    "mem_total_bytes",
);
const UTIL: Slot = slot(
    "num stat-value",
    "gpu-util",
    "data-percent",
    "util_gpu_percent",
);
const POWER: Slot = slot("num stat-value", "gpu-power", "data-mw", "power_mw");
const POWER_LIMIT: Slot = Slot {
    lead: "/ ",
    ..slot(
        "num stat-sub",
        "gpu-power-limit",
        "data-mw",
        "power_limit_mw",
    )
};
const TEMP: Slot = slot("num stat-value", "gpu-temp", "data-celsius", "temp_c");

/// One reading in its slot: the text (or [`MISSING`]), the raw number in the
/// slot's data attribute, and a tooltip saying why when it is missing.
fn reading(
    out: &mut String,
    gpu: Option<&GpuSample>,
    slot: &Slot,
    raw: Option<u64>,
    text: Option<String>,
) {
    let _ = write!(
        out,
        r#"<span class="{}" data-testid="{}""#,
        slot.class, slot.testid
    );
    if let Some(raw) = raw {
        let _ = write!(out, r#" {}="{raw}""#, slot.data);
    }
    if let (Some(g), None) = (gpu, &text) {
        let _ = write!(
            out,
            r#" title="{}""#,
            escape(&missing_reason(g, slot.field))
        );
    }
    let text = text.unwrap_or_else(|| MISSING.to_owned());
    let _ = write!(out, ">{}{}</span>", slot.lead, escape(&text));
}

/// The card's head line: the index and the GPU's name, its UUID in the tooltip.
pub(crate) fn head(index: u32, gpu: Option<&GpuSample>) -> String {
    let mut out = format!(
        r#"<span class="gpu-id">GPU {index}</span><span class="gpu-name" data-testid="gpu-name""#
    );
    if let Some(g) = gpu {
        let name = g.name.as_deref().unwrap_or("name not reported");
        let uuid = g.uuid.as_deref().unwrap_or("uuid not reported");
        let _ = write!(out, r#" title="{}""#, escape(&format!("{name}\n{uuid}")));
    }
    let name = gpu.and_then(|g| g.name.as_deref()).unwrap_or(MISSING);
    let _ = write!(out, ">{}</span>", escape(name));
    out
}

/// The memory figures: used / total, and the idle baseline.
pub(crate) fn mem_text(gpu: Option<&GpuSample>) -> String {
    let mut out = String::new();
    let (used, total, idle) = gpu.map_or((None, None, None), |g| {
        (g.mem_used_bytes, g.mem_total_bytes, g.mem_baseline_bytes)
    });
    reading(&mut out, gpu, &MEM_USED, used, used.map(fmt_bytes));
    out.push_str(r#"<span class="sep"> / </span>"#);
    reading(&mut out, gpu, &MEM_TOTAL, total, total.map(fmt_bytes));
    out.push_str(r#"<span class="num mem-idle" data-testid="gpu-mem-idle""#);
    if let Some(idle) = idle {
        let _ = write!(out, r#" data-bytes="{idle}""#);
    }
    let title = match idle {
        Some(_) => "what this GPU used when NVML last listed no process on it",
        None => {
            "not seen idle since drainwatch started: NVML has listed a process on this GPU in every sample"
        }
    };
    let shown = idle.map_or_else(|| MISSING.to_owned(), fmt_bytes);
    let _ = write!(out, r#" title="{title}">idle {shown}</span>"#);
    out
}

/// The foreign holders' line, then the line of PIDs from outside
/// drainwatch's PID namespace: empty when neither holds memory here.
pub(crate) fn holder_line(h: &MemHolders) -> String {
    let joined = |pids: &[u32]| {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut out = String::new();
    if h.has_foreign() {
        out.push_str(&format!(
            r#"<span class="num foreign-holder" data-testid="gpu-foreign" data-bytes="{}" data-pids="{}" title="{}">{}</span>"#,
            h.foreign_bytes,
            joined(&h.foreign_pids),
            escape(&foreign_title(h)),
            escape(&h.foreign_line().unwrap_or_default())
        ));
    }
    if h.has_outside() {
        out.push_str(&format!(
            r#"<span class="num outside-holder" data-testid="gpu-outside" data-bytes="{}" data-pids="{}" title="{}">{}</span>"#,
            h.outside_bytes,
            joined(&h.outside_pids),
            escape(shared::process::OUTSIDE_NOTE),
            escape(&h.outside_line().unwrap_or_default())
        ));
    }
    out
}

/// Utilisation, power (with its limit) and temperature.
pub(crate) fn stats(gpu: Option<&GpuSample>) -> String {
    let get = |f: fn(&GpuSample) -> Option<u32>| gpu.and_then(f);
    let (util, power, limit, temp) = (
        get(|g| g.util_gpu_percent),
        get(|g| g.power_mw),
        get(|g| g.power_limit_mw),
        get(|g| g.temp_c),
    );
    let mut out = String::new();
    let label = |out: &mut String, text: &str| {
        let _ = write!(
            out,
            r#"<div class="stat"><span class="stat-label">{text}</span>"#
        );
    };
    label(&mut out, "util");
    reading(
        &mut out,
        gpu,
        &UTIL,
        util.map(u64::from),
        util.map(fmt_percent),
    );
    out.push_str("</div>");
    label(&mut out, "power");
    reading(
        &mut out,
        gpu,
        &POWER,
        power.map(u64::from),
        power.map(fmt_power_mw),
    );
    reading(
        &mut out,
        gpu,
        &POWER_LIMIT,
        limit.map(u64::from),
        limit.map(fmt_power_mw),
    );
    out.push_str("</div>");
    label(&mut out, "temp");
    reading(
        &mut out,
        gpu,
        &TEMP,
        temp.map(u64::from),
        temp.map(fmt_temp_c),
    );
    out.push_str("</div>");
    out
}

#[cfg(test)]
mod tests {
    use shared::FieldError;

    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu() -> GpuSample {
        GpuSample {
            index: 0,
            uuid: Some("GPU-1".to_owned()),
            name: Some("H100 <sim>".to_owned()),
            mem_total_bytes: Some(80 * GIB),
            mem_used_bytes: Some(40 * GIB),
            mem_baseline_bytes: None,
            util_gpu_percent: Some(87),
            util_mem_percent: None,
            power_mw: Some(350_000),
            power_limit_mw: None,
            temp_c: Some(61),
            health: Default::default(),
            errors: vec![FieldError {
                field: "power".to_owned(),
                reason: "not supported".to_owned(),
            }],
        }
    }

    #[test]
    fn head_names_the_gpu() {
        assert_eq!(
            head(2, Some(&gpu())),
            r#"<span class="gpu-id">GPU 2</span><span class="gpu-name" data-testid="gpu-name" title="H100 &lt;sim&gt;
GPU-1">H100 &lt;sim&gt;</span>"#
        );
        assert_eq!(
            head(2, None),
            r#"<span class="gpu-id">GPU 2</span><span class="gpu-name" data-testid="gpu-name">—</span>"#
        );
    }

    #[test]
    fn memory_figures_carry_their_bytes() {
        let html = mem_text(Some(&gpu()));
        assert_eq!(
            html,
            concat!(
                r#"<span class="num mem-used" data-testid="gpu-mem-used" data-bytes="42949672960">40.0 GiB</span>"#,
                r#"<span class="sep"> / </span>"#,
                r#"<span class="num mem-total" data-testid="gpu-mem-total" data-bytes="85899345920">80.0 GiB</span>"#,
                r#"<span class="num mem-idle" data-testid="gpu-mem-idle" title="not seen idle since drainwatch started: NVML has listed a process on this GPU in every sample">idle —</span>"#,
            )
        );
        // Without a sample: every figure missing, no reason to give.
        let none = mem_text(None);
        assert_eq!(none.matches("—").count(), 3);
        assert!(!none.contains("data-bytes"));
        assert!(!none.contains("not reported by NVML"));
    }

    #[test]
    fn stats_say_why_a_reading_is_missing() {
        let html = stats(Some(&gpu()));
        assert!(html.starts_with(concat!(
            r#"<div class="stat"><span class="stat-label">util</span>"#,
            r#"<span class="num stat-value" data-testid="gpu-util" data-percent="87">87 %</span></div>"#,
        )));
        assert!(html.contains(
            r#"<span class="num stat-value" data-testid="gpu-power" data-mw="350000">350 W</span>"#
        ));
        // The limit's own field has no entry: its family's entry says why.
        assert!(html.contains(
            r#"<span class="num stat-sub" data-testid="gpu-power-limit" title="power: not supported">/ —</span>"#
        ));
        assert!(html.ends_with(
            r#"<span class="num stat-value" data-testid="gpu-temp" data-celsius="61">61 °C</span></div>"#
        ));
        let mut g = gpu();
        g.errors.clear();
        assert!(stats(Some(&g)).contains(r#"title="not reported by NVML">/ —"#));
    }

    #[test]
    fn foreign_line_only_with_foreign_holders() {
        assert_eq!(holder_line(&MemHolders::default()), "");
        let h = MemHolders {
            foreign_bytes: 3 * GIB,
            foreign_pids: vec![7, 8],
            unattributed: true,
            ..MemHolders::default()
        };
        assert_eq!(
            holder_line(&h),
            r#"<span class="num foreign-holder" data-testid="gpu-foreign" data-bytes="3221225472" data-pids="7,8" title="GPU memory held by processes outside the managed server: 3.0 GiB (pid 7, 8)
NVML does not report some processes&#39; amounts">foreign 3.0 GiB · pids 7, 8</span>"#
        );
    }

    #[test]
    fn host_pids_from_outside_the_namespace_have_a_line_of_their_own() {
        let h = MemHolders {
            outside_bytes: 2 << 30,
            outside_pids: vec![4242],
            ..MemHolders::default()
        };
        let line = holder_line(&h);
        assert!(!line.contains("gpu-foreign"), "{line}");
        assert!(
            line.contains(r#"data-testid="gpu-outside" data-bytes="2147483648" data-pids="4242""#),
            "{line}"
        );
        assert!(
            line.contains(">outside this PID namespace 2.0 GiB · pid 4242</span>"),
            "{line}"
        );
        assert!(line.contains("run with hostPID"), "{line}");
    }
}
