//! A restart's per-GPU memory over time as a fixed-size inline SVG: one line per
//! GPU from 0 to the GPUs' total memory, a vertical line per marker (SIGTERM,
//! SIGKILL, verified, launch, ready, failed), and the running requests as a step
//! line in a track underneath. The drawing itself is [`crate::chart`]'s.

use leptos::prelude::*;
use shared::restart::RestartDetail;

use crate::chart::{self, H, W};
use crate::state::AppState;

/// The drain chart of one restart.
#[component]
pub(crate) fn DrainChart(
    /// The restart's record, refetched while it runs.
    #[prop(into)]
    detail: Signal<RestartDetail>,
) -> impl IntoView {
    let state = AppState::get();
    // GPU totals and indices from the latest sample (timeline entries are in
    // the same index order). A GPU's total does not change: the last known
    // totals are kept through a sample that misses them.
    let gpus = Memo::new(move |prev: Option<&(Vec<Option<u64>>, Vec<u32>)>| {
        let now = state.latest.with(|l| {
            l.as_ref().map_or_else(Default::default, |s| {
                (
                    s.gpus.iter().map(|g| g.mem_total_bytes).collect::<Vec<_>>(),
                    s.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
                )
            })
        });
        match prev {
            Some(p) if !now.0.iter().any(Option::is_some) => p.clone(),
            _ => now,
        }
    });
    // Plain closures: an element's markup is only replaced when it changed.
    let markup = move || detail.with(|d| gpus.with(|g| chart::svg_markup(d, &g.0, &g.1)));
    let legend = move || {
        let lines = detail.with(|d| {
            d.timeline
                .iter()
                .map(|p| p.mem_used_bytes.len())
                .max()
                .unwrap_or(0)
        });
        gpus.with(|g| chart::legend_markup(lines, &g.1))
    };

    view! {
        <div class="chart-wrap">
            <svg
                class="drain-chart"
                data-testid="drain-chart"
                data-points=move || detail.with(|d| d.timeline.len().to_string())
                width=W.to_string()
                height=H.to_string()
                viewBox=format!("0 0 {W} {H}")
                role="img"
                aria-label="GPU memory during the operation"
                inner_html=markup
            ></svg>
            <div class="chart-legend" data-testid="chart-legend" inner_html=legend></div>
        </div>
    }
}
