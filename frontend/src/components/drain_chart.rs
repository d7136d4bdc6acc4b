//! A restart's per-GPU memory over time as a fixed-size inline SVG: one line per
//! GPU from 0 to the GPUs' total memory, a vertical line per marker (SIGTERM,
//! SIGKILL, verified, launch, ready, failed), and the running requests as a step
//! line in a track underneath. The arithmetic is in [`crate::chart`].

use leptos::prelude::*;
use shared::restart::RestartDetail;

use crate::chart::{
    self, Frame, H, MARKER_ROWS, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, TRACK_BOTTOM,
    TRACK_TOP, W, X_LABEL_Y,
};
use crate::state::AppState;

/// Ticks on each axis, at most.
const X_TICKS: usize = 8;
const Y_TICKS: usize = 5;

/// Everything the SVG draws, computed at once.
#[derive(Debug, Clone, PartialEq)]
struct Drawing {
    /// `(x or y, label)`.
    x_ticks: Vec<(f64, String)>,
    y_ticks: Vec<(f64, String)>,
    /// `(GPU index, colour, points)`.
    lines: Vec<(u32, &'static str, String)>,
    requests: Option<(String, u32)>,
    /// `(data-kind, label, x, label row's y)`.
    markers: Vec<(&'static str, &'static str, f64, f64)>,
}

fn draw(detail: &RestartDetail, totals: &[Option<u64>], indices: &[u32]) -> Option<Drawing> {
    let frame = Frame::new(
        Some(detail.summary.started_at_ms),
        &detail.timeline,
        &detail.markers,
        chart::y_max(totals, &detail.timeline),
    )?;
    let x_step = chart::nice_step(frame.span_s(), X_TICKS);
    let x_ticks = chart::ticks(frame.span_s(), X_TICKS)
        .into_iter()
        .map(|s| (frame.x_of_s(s), chart::tick_label(s, x_step, "s")))
        .collect();
    let y_step = chart::nice_step(frame.y_max_gib(), Y_TICKS);
    let y_ticks = chart::ticks(frame.y_max_gib(), Y_TICKS)
        .into_iter()
        .map(|g| (frame.y_of_gib(g), chart::tick_label(g, y_step, "GiB")))
        .collect();
    let lines = chart::gpu_lines(&detail.timeline, &frame)
        .into_iter()
        .map(|(pos, pts)| {
            let index = indices.get(pos).copied().unwrap_or(pos as u32);
            (index, chart::gpu_colour(pos), pts)
        })
        .collect();
    let mut markers = detail.markers.clone();
    markers.sort_by_key(|m| m.at_ms);
    let xs: Vec<f64> = markers.iter().map(|m| frame.x(m.at_ms)).collect();
    let rows = chart::label_rows(&xs);
    let markers = markers
        .iter()
        .zip(xs)
        .zip(rows)
        .map(|((m, x), row)| {
            (
                chart::marker_kind(m.kind),
                chart::marker_label(m.kind),
                x,
                MARKER_ROWS[row],
            )
        })
        .collect();
    Some(Drawing {
        x_ticks,
        y_ticks,
        lines,
        requests: chart::requests_path(&detail.timeline, &frame),
        markers,
    })
}

/// The drain chart of one restart.
#[component]
pub(crate) fn DrainChart(
    /// The restart's record, refetched while it runs.
    #[prop(into)]
    detail: Signal<RestartDetail>,
) -> impl IntoView {
    let state = AppState::get();
    // GPU totals and indices from the latest sample (timeline entries are in
    // the same index order).
    let gpus = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref().map_or_else(
                || (Vec::new(), Vec::new()),
                |s| {
                    (
                        s.gpus.iter().map(|g| g.mem_total_bytes).collect::<Vec<_>>(),
                        s.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
                    )
                },
            )
        })
    });
    // A GPU's total does not change: keep the last known scale.
    let totals = Memo::new(move |prev: Option<&Vec<Option<u64>>>| {
        let now = gpus.with(|g| g.0.clone());
        if now.iter().any(Option::is_some) {
            now
        } else {
            prev.cloned().unwrap_or_default()
        }
    });
    let drawing =
        Memo::new(move |_| detail.with(|d| totals.with(|t| gpus.with(|g| draw(d, t, &g.1)))));
    let points = move || detail.with(|d| d.timeline.len());

    view! {
        <div class="chart-wrap">
            <svg
                class="drain-chart"
                data-testid="drain-chart"
                data-points=move || points().to_string()
                width=W.to_string()
                height=H.to_string()
                viewBox=format!("0 0 {W} {H}")
                role="img"
                aria-label="GPU memory during the operation"
            >
                <rect
                    class="plot-bg"
                    x=PLOT_LEFT.to_string()
                    y=PLOT_TOP.to_string()
                    width=(PLOT_RIGHT - PLOT_LEFT).to_string()
                    height=(PLOT_BOTTOM - PLOT_TOP).to_string()
                ></rect>
                <rect
                    class="plot-bg"
                    x=PLOT_LEFT.to_string()
                    y=TRACK_TOP.to_string()
                    width=(PLOT_RIGHT - PLOT_LEFT).to_string()
                    height=(TRACK_BOTTOM - TRACK_TOP).to_string()
                ></rect>
                {move || {
                    drawing
                        .get()
                        .map_or_else(
                            || {
                                view! {
                                    <text
                                        class="chart-empty"
                                        x=((PLOT_LEFT + PLOT_RIGHT) / 2.0).to_string()
                                        y=((PLOT_TOP + PLOT_BOTTOM) / 2.0).to_string()
                                        text-anchor="middle"
                                    >
                                        "no samples recorded yet"
                                    </text>
                                }
                                    .into_any()
                            },
                            |d| chart_body(d).into_any(),
                        )
                }}
            </svg>
            <div class="chart-legend" data-testid="chart-legend">
                {move || {
                    drawing
                        .with(|d| {
                            d.as_ref()
                                .map(|d| {
                                    d.lines
                                        .iter()
                                        .map(|(index, colour, _)| {
                                            view! {
                                                <span class="legend-item">
                                                    <span class="legend-swatch" style:background=*colour></span>
                                                    {format!("GPU {index}")}
                                                </span>
                                            }
                                        })
                                        .collect::<Vec<_>>()
                                })
                        })
                }}
            </div>
        </div>
    }
}

/// The axes, lines and markers of a drawing.
fn chart_body(d: Drawing) -> impl IntoView {
    let y_grid = d
        .y_ticks
        .into_iter()
        .map(|(y, label)| {
            view! {
                <line class="grid" x1=PLOT_LEFT.to_string() x2=PLOT_RIGHT.to_string() y1=format!("{y:.1}") y2=format!("{y:.1}")></line>
                <text class="axis" x=(PLOT_LEFT - 6.0).to_string() y=format!("{:.1}", y + 4.0) text-anchor="end">
                    {label}
                </text>
            }
        })
        .collect::<Vec<_>>();
    let x_grid = d
        .x_ticks
        .into_iter()
        .map(|(x, label)| {
            view! {
                <line class="grid" x1=format!("{x:.1}") x2=format!("{x:.1}") y1=PLOT_TOP.to_string() y2=TRACK_BOTTOM.to_string()></line>
                <text class="axis" x=format!("{x:.1}") y=X_LABEL_Y.to_string() text-anchor="middle">
                    {label}
                </text>
            }
        })
        .collect::<Vec<_>>();
    let lines = d
        .lines
        .into_iter()
        .map(|(index, colour, pts)| {
            view! {
                <polyline class="gpu-line" data-testid="gpu-line" data-gpu=index.to_string() points=pts stroke=colour></polyline>
            }
        })
        .collect::<Vec<_>>();
    let requests = match d.requests {
        Some((path, max)) => view! {
            <path class="req-line" data-testid="requests-line" d=path></path>
            <text class="axis" x=(PLOT_LEFT - 6.0).to_string() y=(TRACK_TOP + 9.0).to_string() text-anchor="end">
                {format!("{} req", max.max(1))}
            </text>
            <text class="axis" x=(PLOT_LEFT - 6.0).to_string() y=TRACK_BOTTOM.to_string() text-anchor="end">
                "0 req"
            </text>
            <text class="track-title" x=(PLOT_LEFT + 6.0).to_string() y=(TRACK_TOP + 12.0).to_string()>
                "running requests"
            </text>
        }
        .into_any(),
        None => view! {
            <text class="track-title" x=(PLOT_LEFT + 6.0).to_string() y=(TRACK_TOP + 24.0).to_string()>
                "running requests: not reported"
            </text>
        }
        .into_any(),
    };
    let markers = d
        .markers
        .into_iter()
        .map(|(kind, label, x, label_y)| {
            // A label near the right edge reads leftwards, so it stays inside.
            let (anchor, tx) = if x > PLOT_RIGHT - 70.0 { ("end", x - 3.0) } else { ("start", x + 3.0) };
            view! {
                <g class="marker" data-testid="chart-marker" data-kind=kind>
                    <line x1=format!("{x:.1}") x2=format!("{x:.1}") y1=(label_y + 3.0).to_string() y2=TRACK_BOTTOM.to_string()></line>
                    <text x=format!("{tx:.1}") y=label_y.to_string() text-anchor=anchor>{label}</text>
                </g>
            }
        })
        .collect::<Vec<_>>();

    view! {
        <g class="grid-layer">{y_grid}{x_grid}</g>
        <g class="lines-layer">{lines}</g>
        <g class="track-layer">{requests}</g>
        <g class="marker-layer">{markers}</g>
    }
}
