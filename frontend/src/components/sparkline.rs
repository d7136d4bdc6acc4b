//! A GPU's memory over the last five minutes, as a fixed-size inline SVG.

use leptos::prelude::*;
use shared::units::fmt_bytes;

use crate::series::{STEP_MS, VIEW_H, VIEW_W, WINDOW_MS};
use crate::state::AppState;

/// The sparkline of GPU `index`: memory used, scaled to the GPU's total, the
/// right edge being the latest sample's second.
#[component]
pub(crate) fn Sparkline(
    /// NVML's index of the GPU.
    index: u32,
    /// The GPU's memory, the top of the scale; when unknown, the series' maximum.
    #[prop(into)]
    total: Signal<Option<u64>>,
) -> impl IntoView {
    let state = AppState::get();
    let end_ms = Memo::new(move |_| {
        state
            .latest
            .with(|l| l.as_ref().map_or(0, |s| s.at_ms - s.at_ms % STEP_MS))
    });
    let paths = Memo::new(move |_| {
        let end = end_ms.get();
        let total = total.get();
        state.series.with(|all| match all.get(&index) {
            Some(series) => {
                let top = total.or_else(|| series.max()).unwrap_or(1);
                series.paths(end, top)
            }
            None => (String::new(), String::new()),
        })
    });
    let title = move || {
        let top = total
            .get()
            .map_or_else(String::new, |t| format!(", scale 0 – {}", fmt_bytes(t)));
        format!("memory used, last {} min{top}", WINDOW_MS / 60_000)
    };

    // The tooltip sits on a wrapper: a `<title>` child would come out as an HTML
    // element here, not SVG's.
    view! {
        <div class="spark-wrap" title=title>
            <svg
                class="sparkline"
                data-testid="gpu-sparkline"
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
        </div>
    }
}
