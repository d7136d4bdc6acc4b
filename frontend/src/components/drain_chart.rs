//! A restart's per-GPU memory over time as a fixed-size inline SVG: one line per
//! GPU from 0 to the GPUs' total memory, a vertical line per marker (SIGTERM,
//! SIGKILL, verified, launch, ready, failed), and the running requests as a step
//! line in a track underneath. The agent draws it (`GET /api/restarts/{id}/chart`);
//! the page asks again whenever the record may have changed and as the
//! operation's timeline grows.

use leptos::prelude::*;
use shared::restart::{DRAIN_CHART_BOX, DrainChartView};

use crate::api;
use crate::fetch::SingleFlight;
use crate::state::AppState;

const W: f64 = DRAIN_CHART_BOX.0;
const H: f64 = DRAIN_CHART_BOX.1;

/// Calls `refetch` now and whenever restart `id`'s record may have changed
/// (its summary in the history; the phase, with its start, its operation
/// enters while it runs), and once more 400 ms after each: the store commits
/// within a quarter second of the news, so the second look finds the
/// transition, marker and points that came with it.
pub(crate) fn on_record_news(state: AppState, id: i64, refetch: impl Fn() + Copy + 'static) {
    let news = Memo::new(move |_| {
        let summary = state
            .restarts
            .with(|r| r.iter().find(|s| s.id == id).cloned());
        let phase = state.server.with(|s| {
            s.as_ref()
                .filter(|s| s.operation.as_ref().is_some_and(|o| o.id == id))
                .map(|s| (s.phase, s.phase_since_ms))
        });
        (summary, phase)
    });
    Effect::new(move |_| {
        // Read, not only tracked: a memo recomputes when read, and only then
        // tells this effect that it changed.
        let _ = news.get();
        refetch();
        set_timeout(refetch, std::time::Duration::from_millis(400));
    });
}

/// The drain chart of restart `id`.
#[component]
pub(crate) fn DrainChart(
    /// The restart whose chart this is.
    id: i64,
) -> impl IntoView {
    let state = AppState::get();
    let chart = RwSignal::new(None::<DrainChartView>);
    let flight = SingleFlight::new();
    let refetch = move || {
        flight.run(move || async move {
            match api::restart_chart(id).await {
                Ok(v) => chart.try_set(Some(v)).is_none(),
                // The record's own fetch says why it could not be read.
                Err(_) => chart.try_get_untracked().is_some(),
            }
        });
    };
    on_record_news(state, id, refetch);
    // Between those, each `timeline` message for it.
    Effect::new(move |_| {
        if state.timeline.with(|t| t.0 == id) {
            refetch();
        }
    });
    let part = move |f: fn(&DrainChartView) -> &String| {
        move || chart.with(|c| c.as_ref().map(|c| f(c).clone()).unwrap_or_default())
    };

    view! {
        <div class="chart-wrap">
            <svg
                class="drain-chart"
                data-testid="drain-chart"
                data-points=move || chart.with(|c| c.as_ref().map_or(0, |c| c.points).to_string())
                width=W.to_string()
                height=H.to_string()
                viewBox=format!("0 0 {W} {H}")
                role="img"
                aria-label="GPU memory during the operation"
                inner_html=part(|c| &c.svg)
            ></svg>
            <div class="chart-legend" data-testid="chart-legend" inner_html=part(|c| &c.legend)></div>
        </div>
    }
}
