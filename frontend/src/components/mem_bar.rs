//! A horizontal memory bar, stacked by holder: the rest (idle baseline, driver,
//! unattributed) in grey, then the managed server's processes, then foreign
//! processes in amber; with a thin marker at the idle baseline.

use leptos::prelude::*;
use shared::MemHolders;
use shared::units::{fmt_bytes, fraction};

/// Percent of `total` as a CSS length, or `None` when either side is unknown.
fn percent(part: Option<u64>, total: Option<u64>) -> Option<String> {
    Some(format!("{:.2}%", fraction(part?, total?) * 100.0))
}

/// A fraction of the bar as a CSS length.
fn css_percent(f: f64) -> String {
    format!("{:.2}%", f * 100.0)
}

/// The bar's tooltip: used of total, then each holder.
fn bar_title(holders: &MemHolders, used: Option<u64>, total: Option<u64>) -> String {
    let (Some(u), Some(t)) = (used, total) else {
        return "memory not reported".to_owned();
    };
    let mut lines = vec![format!(
        "{} of {} used ({:.1} %)",
        fmt_bytes(u),
        fmt_bytes(t),
        fraction(u, t) * 100.0
    )];
    lines.push(format!("server: {}", fmt_bytes(holders.server_bytes)));
    if holders.has_foreign() {
        lines.push(format!("foreign: {}", fmt_bytes(holders.foreign_bytes)));
    }
    if holders.has_outside() {
        lines.push(format!(
            "host PIDs outside this PID namespace (whose, unknown): {}",
            fmt_bytes(holders.outside_bytes)
        ));
    }
    if let Some(other) = holders.other_bytes {
        lines.push(format!(
            "other (idle baseline, driver, unattributed): {}",
            fmt_bytes(other)
        ));
    }
    if holders.unattributed {
        lines.push("NVML does not report some processes' amounts".to_owned());
    }
    lines.join("\n")
}

/// The bar. Fixed height; empty while the figures are unknown.
#[component]
pub(crate) fn MemBar(
    /// Bytes in use.
    #[prop(into)]
    used: Signal<Option<u64>>,
    /// Bytes the GPU has.
    #[prop(into)]
    total: Signal<Option<u64>>,
    /// Bytes in use when no process held the GPU; drawn as a marker.
    #[prop(into)]
    baseline: Signal<Option<u64>>,
    /// Who holds what.
    #[prop(into)]
    holders: Signal<MemHolders>,
) -> impl IntoView {
    let widths = Memo::new(move |_| holders.with(|h| h.bar_fractions(used.get(), total.get())));
    let width = move |i: usize| move || css_percent(widths.with(|w| w[i]));
    let marker_left = move || percent(baseline.get(), total.get());
    let title = move || holders.with(|h| bar_title(h, used.get(), total.get()));
    // One holder's part of the stack: the `i`-th width, its bytes.
    let seg = move |i: usize,
                    class: &'static str,
                    testid: &'static str,
                    get: fn(&MemHolders) -> Option<u64>| {
        view! {
            <div
                class=class
                data-testid=testid
                data-bytes=move || holders.with(|h| get(h).map(|b| b.to_string()))
                style:width=width(i)
            ></div>
        }
    };

    view! {
        <div class="mem-bar" data-testid="gpu-mem-bar" title=title>
            <div class="mem-stack">
                {seg(0, "mem-seg mem-other", "gpu-bar-other", |h| h.other_bytes)}
                {seg(1, "mem-seg mem-server", "gpu-bar-server", |h| Some(h.server_bytes))}
                {seg(2, "mem-seg mem-foreign", "gpu-bar-foreign", |h| Some(h.foreign_bytes))}
            </div>
            <div
                class="mem-baseline"
                data-testid="gpu-mem-baseline"
                data-bytes=move || baseline.get().map(|b| b.to_string())
                style:left=move || marker_left().unwrap_or_else(|| "0%".to_owned())
                style:visibility=move || {
                    if marker_left().is_some() { "visible" } else { "hidden" }
                }
            ></div>
        </div>
    }
}
