//! A GPU's memory over the last five minutes, as a fixed-size inline SVG: the y
//! axis runs from 0 to the GPU's total memory, never scaled to the data, so a
//! full GPU looks full; a faint dashed line marks the idle baseline.

use leptos::prelude::*;
use shared::units::fmt_bytes;

use crate::markup::escape;
use crate::series::{STEP_MS, VIEW_H, VIEW_W, WINDOW_MS, y_of};
use crate::state::AppState;

/// The tooltip: the window, the scale and the idle baseline.
fn spark_title(scale: Option<u64>, baseline: Option<u64>) -> String {
    let minutes = WINDOW_MS / 60_000;
    let mut text = match scale {
        Some(t) => format!(
            "memory used, last {minutes} min, scale 0 – {}",
            fmt_bytes(t)
        ),
        None => format!("memory used, last {minutes} min: total memory not reported"),
    };
    if let Some(b) = baseline {
        text.push_str(&format!("\ndashed: idle baseline {}", fmt_bytes(b)));
    }
    text
}

/// The box's content as HTML text: the SVG with the `line` and the `area` under
/// it, the dashed baseline (hidden while it or the scale is unknown) and the
/// window's label.
fn spark_markup(
    scale: Option<u64>,
    baseline: Option<u64>,
    (line, area): &(String, String),
) -> String {
    let title = escape(&spark_title(scale, baseline));
    let scale_attr = scale
        .map(|t| format!(r#" data-scale-bytes="{t}""#))
        .unwrap_or_default();
    let base_attr = baseline
        .map(|b| format!(r#" data-bytes="{b}""#))
        .unwrap_or_default();
    // The baseline's height as a share of the box, from the top.
    let top = baseline.zip(scale).map(|(b, t)| y_of(b, t) / VIEW_H);
    let shown = if top.is_some() { "visible" } else { "hidden" };
    format!(
        concat!(
            r#"<svg class="sparkline" data-testid="gpu-sparkline"{scale_attr} viewBox="0 0 {w} {h}" preserveAspectRatio="none" role="img" aria-label="{title}">"#,
            r#"<path class="spark-area" d="{area}"></path><path class="spark-line" vector-effect="non-scaling-stroke" d="{line}"></path></svg>"#,
            r#"<div class="spark-baseline" data-testid="gpu-spark-baseline"{base_attr} style="top: {top:.2}%; visibility: {shown};"></div>"#,
            r#"<span class="spark-span">{minutes} min</span>"#,
        ),
        scale_attr = scale_attr,
        w = VIEW_W,
        h = VIEW_H,
        title = title,
        area = area,
        line = line,
        base_attr = base_attr,
        top = top.unwrap_or(1.0) * 100.0,
        shown = shown,
        minutes = WINDOW_MS / 60_000,
    )
}

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

    // The tooltip sits on the wrapper: a `<title>` child would come out as an
    // HTML element here, not SVG's. The dashed line and the label are HTML over
    // the SVG, which is stretched to its box and would stretch them too.
    view! {
        <div
            class="spark-wrap"
            title=move || spark_title(scale.get(), baseline.get())
            inner_html=move || paths.with(|p| spark_markup(scale.get(), baseline.get(), p))
        ></div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn box_with_scale_and_baseline() {
        let paths = ("M0 1".to_owned(), "M0 1Z".to_owned());
        let html = spark_markup(Some(80 * GIB), Some(0), &paths);
        let title = "memory used, last 5 min, scale 0 – 80.0 GiB\ndashed: idle baseline 0 MiB";
        assert_eq!(spark_title(Some(80 * GIB), Some(0)), title);
        assert_eq!(
            html,
            format!(
                concat!(
                    r#"<svg class="sparkline" data-testid="gpu-sparkline" data-scale-bytes="85899345920" viewBox="0 0 300 40" preserveAspectRatio="none" role="img" aria-label="{}">"#,
                    r#"<path class="spark-area" d="M0 1Z"></path><path class="spark-line" vector-effect="non-scaling-stroke" d="M0 1"></path></svg>"#,
                    r#"<div class="spark-baseline" data-testid="gpu-spark-baseline" data-bytes="0" style="top: 97.50%; visibility: visible;"></div>"#,
                    r#"<span class="spark-span">5 min</span>"#,
                ),
                title
            )
        );
    }

    #[test]
    fn baseline_hidden_without_a_scale() {
        let html = spark_markup(None, Some(GIB), &(String::new(), String::new()));
        assert!(!html.contains("data-scale-bytes"));
        assert!(
            html.contains(r#"data-bytes="1073741824" style="top: 100.00%; visibility: hidden;""#)
        );
        assert!(html.contains(r#"aria-label="memory used, last 5 min: total memory not reported"#));
        assert!(html.contains(r#"<path class="spark-area" d=""></path>"#));
    }
}
