//! A GPU's memory over the last five minutes, as a fixed-size inline SVG: the y
//! axis runs from 0 to the GPU's total memory, never scaled to the data, so a
//! full GPU looks full; a faint dashed line marks the idle baseline.

use leptos::prelude::*;
use shared::units::fmt_bytes;

use crate::series::{STEP_MS, VIEW_H, VIEW_W, WINDOW_MS, y_of};
use crate::state::AppState;

/// The sparkline of GPU `index`: memory used, scaled to the GPU's total, the
/// right edge being the latest sample's second.
#[component]
pub(crate) fn Sparkline(
    /// NVML's index of the GPU.
    index: u32,
    /// The GPU's memory, the top of the scale. Until it is first known nothing
    /// is drawn; a sample that misses it keeps the last known one.
    #[prop(into)]
    total: Signal<Option<u64>>,
    /// Memory used when no process held the GPU; drawn as a dashed line.
    #[prop(into)]
    baseline: Signal<Option<u64>>,
) -> impl IntoView {
    let state = AppState::get();
    // A GPU's total does not change: one failed reading must not rescale the box.
    let scale = Memo::new(move |prev: Option<&Option<u64>>| {
        total.get().or_else(|| prev.copied().flatten())
    });
    let end_ms = Memo::new(move |_| {
        state
            .latest
            .with(|l| l.as_ref().map_or(0, |s| s.at_ms - s.at_ms % STEP_MS))
    });
    let paths = Memo::new(move |_| {
        let end = end_ms.get();
        let Some(top) = scale.get() else {
            return (String::new(), String::new());
        };
        state.series.with(|all| {
            all.get(&index)
                .map_or_else(|| (String::new(), String::new()), |s| s.paths(end, top))
        })
    });
    // The baseline's height as a share of the box, from the top.
    let baseline_top = Memo::new(move |_| {
        let (b, top) = (baseline.get()?, scale.get()?);
        Some(y_of(b, top) / VIEW_H)
    });
    let title = move || {
        let minutes = WINDOW_MS / 60_000;
        let mut text = match scale.get() {
            Some(t) => format!(
                "memory used, last {minutes} min, scale 0 – {}",
                fmt_bytes(t)
            ),
            None => format!("memory used, last {minutes} min: total memory not reported"),
        };
        if let Some(b) = baseline.get() {
            text.push_str(&format!("\ndashed: idle baseline {}", fmt_bytes(b)));
        }
        text
    };

    // The tooltip sits on a wrapper: a `<title>` child would come out as an HTML
    // element here, not SVG's. The dashed line and the label are HTML over the
    // SVG, which is stretched to its box and would stretch them too.
    view! {
        <div class="spark-wrap" title=title>
            <svg
                class="sparkline"
                data-testid="gpu-sparkline"
                data-scale-bytes=move || scale.get().map(|t| t.to_string())
                viewBox=format!("0 0 {VIEW_W} {VIEW_H}")
                preserveAspectRatio="none"
                role="img"
                aria-label=title
            >
                <path class="spark-area" d=move || paths.with(|p| p.1.clone())></path>
                <path
                    class="spark-line"
                    vector-effect="non-scaling-stroke"
                    d=move || paths.with(|p| p.0.clone())
                ></path>
            </svg>
            <div
                class="spark-baseline"
                data-testid="gpu-spark-baseline"
                data-bytes=move || baseline.get().map(|b| b.to_string())
                style:top=move || {
                    format!("{:.2}%", baseline_top.get().unwrap_or(1.0) * 100.0)
                }
                style:visibility=move || {
                    if baseline_top.get().is_some() { "visible" } else { "hidden" }
                }
            ></div>
            <span class="spark-span">{format!("{} min", WINDOW_MS / 60_000)}</span>
        </div>
    }
}
