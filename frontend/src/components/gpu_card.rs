//! One GPU's card: name, memory (bar stacked by holder, figures, idle baseline,
//! foreign holders), utilisation, power, temperature and the memory sparkline;
//! or, for a GPU NVML could not open, the reason.

use leptos::either::Either;
use leptos::prelude::*;
use shared::units::{fmt_bytes, fmt_percent, fmt_power_mw, fmt_temp_c};
use shared::{GpuSample, MemHolders};

use crate::components::mem_bar::MemBar;
use crate::components::sparkline::Sparkline;
use crate::state::AppState;

/// Shown for a reading NVML did not give.
const MISSING: &str = "—";

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

/// A reading as text, or [`MISSING`].
fn shown<T>(value: Option<T>, fmt: impl Fn(T) -> String) -> String {
    value.map_or_else(|| MISSING.to_owned(), fmt)
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

/// A reading as text, or [`MISSING`] (tracked).
fn text_of(
    gpu: Memo<Option<GpuSample>>,
    get: fn(&GpuSample) -> Option<String>,
) -> impl Fn() -> String + Copy {
    move || gpu.with(|g| shown(g.as_ref().and_then(get), |s| s))
}

/// A reading's raw number, for its data attribute (tracked).
fn raw_of(
    gpu: Memo<Option<GpuSample>>,
    get: fn(&GpuSample) -> Option<u64>,
) -> impl Fn() -> Option<String> + Copy {
    move || gpu.with(|g| g.as_ref().and_then(get).map(|v| v.to_string()))
}

/// One reading in its slot: the text, the raw number, and a tooltip saying
/// why when it is missing.
fn reading(
    gpu: Memo<Option<GpuSample>>,
    slot: Slot,
    raw: fn(&GpuSample) -> Option<u64>,
    text: fn(&GpuSample) -> Option<String>,
) -> impl IntoView {
    let field = slot.field;
    let why = move || {
        gpu.with(|g| {
            g.as_ref()
                .filter(|g| text(g).is_none())
                .map(|g| missing_reason(g, field))
        })
    };
    view! {
        <span class=slot.class data-testid=slot.testid title=why>
            {slot.lead}
            {text_of(gpu, text)}
        </span>
    }
    .attr(slot.data, raw_of(gpu, raw))
}

/// The card of GPU `index`, following the latest sample.
#[component]
pub(crate) fn GpuCard(
    /// NVML's index of the GPU this card shows.
    index: u32,
) -> impl IntoView {
    let state = AppState::get();
    let gpu = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .and_then(|s| s.gpus.iter().find(|g| g.index == index).cloned())
        })
    });
    // Who holds this GPU's memory, from the same sample's process list.
    let holders = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .and_then(|s| {
                    s.gpus
                        .iter()
                        .find(|g| g.index == index)
                        .map(|g| MemHolders::of(g, &s.processes))
                })
                .unwrap_or_default()
        })
    });
    let device_error = Memo::new(move |_| {
        gpu.with(|g| {
            g.as_ref().and_then(|g| {
                g.errors
                    .iter()
                    .find(|e| e.field == "device")
                    .map(|e| e.reason.clone())
            })
        })
    });

    let used = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_used_bytes)));
    let total = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_total_bytes)));
    let baseline =
        Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_baseline_bytes)));

    let name = move || {
        gpu.with(|g| {
            g.as_ref()
                .and_then(|g| g.name.clone())
                .unwrap_or_else(|| MISSING.to_owned())
        })
    };
    let name_title = move || {
        gpu.with(|g| {
            g.as_ref().map(|g| {
                let name = g.name.as_deref().unwrap_or("name not reported");
                let uuid = g.uuid.as_deref().unwrap_or("uuid not reported");
                format!("{name}\n{uuid}")
            })
        })
    };

    let readings = move || {
        view! {
            <div class="gpu-mem">
                <MemBar used=used total=total baseline=baseline holders=holders />
                <div class="mem-text">
                    {reading(gpu, MEM_USED, |g| g.mem_used_bytes, |g| g.mem_used_bytes.map(fmt_bytes))}
                    <span class="sep">" / "</span>
                    {reading(gpu, MEM_TOTAL, |g| g.mem_total_bytes, |g| g.mem_total_bytes.map(fmt_bytes))}
                    <span
                        class="num mem-idle"
                        data-testid="gpu-mem-idle"
                        data-bytes=raw_of(gpu, |g| g.mem_baseline_bytes)
                        title=move || {
                            gpu.with(|g| match g.as_ref().and_then(|g| g.mem_baseline_bytes) {
                                Some(_) => {
                                    "what this GPU used when NVML last listed no process on it"
                                        .to_owned()
                                }
                                None => {
                                    "not seen idle since drainwatch started: NVML has listed a process on this GPU in every sample"
                                        .to_owned()
                                }
                            })
                        }
                    >
                        "idle "
                        {text_of(gpu, |g| g.mem_baseline_bytes.map(fmt_bytes))}
                    </span>
                </div>
                // Always there, so the card keeps its height when a foreign
                // process comes or goes.
                <div class="holder-line">
                    <Show when=move || holders.with(MemHolders::has_foreign)>
                        <span
                            class="num foreign-holder"
                            data-testid="gpu-foreign"
                            data-bytes=move || holders.with(|h| h.foreign_bytes.to_string())
                            data-pids=move || {
                                holders
                                    .with(|h| {
                                        h.foreign_pids
                                            .iter()
                                            .map(u32::to_string)
                                            .collect::<Vec<_>>()
                                            .join(",")
                                    })
                            }
                            title=move || holders.with(foreign_title)
                        >
                            {move || holders.with(|h| h.foreign_line().unwrap_or_default())}
                        </span>
                    </Show>
                </div>
            </div>
            <div class="gpu-stats">
                <div class="stat">
                    <span class="stat-label">"util"</span>
                    {reading(gpu, UTIL, |g| g.util_gpu_percent.map(u64::from), |g| g.util_gpu_percent.map(fmt_percent))}
                </div>
                <div class="stat">
                    <span class="stat-label">"power"</span>
                    {reading(gpu, POWER, |g| g.power_mw.map(u64::from), |g| g.power_mw.map(fmt_power_mw))}
                    {reading(gpu, POWER_LIMIT, |g| g.power_limit_mw.map(u64::from), |g| g.power_limit_mw.map(fmt_power_mw))}
                </div>
                <div class="stat">
                    <span class="stat-label">"temp"</span>
                    {reading(gpu, TEMP, |g| g.temp_c.map(u64::from), |g| g.temp_c.map(fmt_temp_c))}
                </div>
            </div>
            <Sparkline index=index total=total baseline=baseline />
        }
    };

    view! {
        <article
            class="gpu-card"
            class:gpu-unreadable=move || device_error.with(Option::is_some)
            data-testid="gpu-card"
            data-gpu-index=index.to_string()
        >
            <div class="gpu-head">
                <span class="gpu-id">"GPU " {index}</span>
                <span class="gpu-name" data-testid="gpu-name" title=name_title>
                    {name}
                </span>
            </div>
            {move || match device_error.get() {
                Some(reason) => {
                    Either::Left(
                        view! {
                            <div class="gpu-error" data-testid="gpu-error" title=reason.clone()>
                                <span class="gpu-error-label">"NVML cannot read this GPU"</span>
                                <span class="gpu-error-reason">{reason.clone()}</span>
                            </div>
                        },
                    )
                }
                None => Either::Right(readings()),
            }}
        </article>
    }
}
