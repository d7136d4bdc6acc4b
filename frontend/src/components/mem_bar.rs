//! A horizontal memory bar: used against total, with a thin marker at the idle
//! baseline.

use leptos::prelude::*;
use shared::units::{fmt_bytes, fraction};

/// Percent of `total` as a CSS length, or `None` when either side is unknown.
fn percent(part: Option<u64>, total: Option<u64>) -> Option<String> {
    Some(format!("{:.2}%", fraction(part?, total?) * 100.0))
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
) -> impl IntoView {
    let fill = move || percent(used.get(), total.get()).unwrap_or_else(|| "0%".to_owned());
    let marker_left = move || percent(baseline.get(), total.get());
    let bar_title = move || match (used.get(), total.get()) {
        (Some(u), Some(t)) => format!(
            "{} of {} used ({:.1} %)",
            fmt_bytes(u),
            fmt_bytes(t),
            fraction(u, t) * 100.0
        ),
        _ => "memory not reported".to_owned(),
    };

    view! {
        <div class="mem-bar" data-testid="gpu-mem-bar" title=bar_title>
            <div class="mem-fill" style:width=fill></div>
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
