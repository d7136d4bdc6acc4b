//! The comparison chart: one point per measured step, its metric (output
//! tok/s, or good req/s in open loop) against its p99 TTFT, the spread over
//! repeats as a bar, the Pareto frontier drawn through the points no other
//! beats on both, the target as a dashed line. A point is a button
//! (`data-act="point"`).

use std::fmt::Write as _;

use shared::campaign::{Campaign, analysis};
use shared::units::tok_num;

use shared::html::axis::{empty_note, nice_step, tick_label, y_grid};
use shared::html::scale_max;

/// The chart's drawing box, in user units.
pub(super) const PW: f64 = 560.0;
pub(super) const PH: f64 = 300.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = PW - 20.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = PH - 40.0;

/// The chart's `<svg>` content; `selected` is the step whose point is ringed.
pub(super) fn pareto_markup(c: &Campaign, selected: Option<u32>) -> String {
    let mut out = format!(
        r#"<rect class="plot-bg" x="{LEFT}" y="{TOP}" width="{}" height="{}"/>"#,
        RIGHT - LEFT,
        BOTTOM - TOP
    );
    let pts = analysis::pareto(c);
    let unit = c
        .steps
        .iter()
        .find_map(|s| s.result.as_ref().map(|r| r.metric_unit()))
        .unwrap_or("tok/s");
    let target = c.info.target.unwrap_or(0.0);
    if pts.is_empty() {
        y_grid(
            &mut out,
            (LEFT, RIGHT),
            scale_max(1.0, target),
            5,
            unit,
            |v| BOTTOM - v / scale_max(1.0, target) * (BOTTOM - TOP),
        );
        empty_note(
            &mut out,
            (LEFT + RIGHT) / 2.0,
            (TOP + BOTTOM) / 2.0,
            "points appear as steps are measured",
        );
        return out;
    }
    let y_max = scale_max(pts.iter().map(|p| p.y_max).fold(0.0, f64::max), target);
    // The x axis spans the points (TTFTs of one server sit close together),
    // with room either side, on whole ticks.
    let (lo, hi) = pts
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), p| (lo.min(p.x), hi.max(p.x)));
    let pad = ((hi - lo) * 0.15).max(hi * 0.05).max(1.0);
    let x_step = nice_step(hi - lo + 2.0 * pad, 6);
    let x_min = ((lo - pad) / x_step).floor().max(0.0) * x_step;
    let x_max = ((hi + pad) / x_step).ceil() * x_step;
    let y_of = |v: f64| BOTTOM - v / y_max * (BOTTOM - TOP);
    let x_of = |v: f64| LEFT + (v - x_min) / (x_max - x_min).max(1e-9) * (RIGHT - LEFT);
    y_grid(&mut out, (LEFT, RIGHT), y_max, 5, unit, y_of);
    x_axis(&mut out, (x_min, x_max), x_step, x_of);
    if target > 0.0 {
        let y = y_of(target);
        let _ = write!(
            out,
            r#"<line class="target" data-testid="pareto-target" x1="{LEFT}" x2="{RIGHT}" y1="{y:.1}" y2="{y:.1}"/><text class="target-label" x="{}" y="{:.1}" text-anchor="end">target {} {unit}</text>"#,
            RIGHT - 4.0,
            y - 5.0,
            tok_num(target)
        );
    }
    // Where each point is drawn, and the frontier through those places.
    let at = dodged(pts.iter().map(|p| (x_of(p.x), y_of(p.y))).collect());
    let frontier: Vec<String> = pts
        .iter()
        .zip(&at)
        .filter(|(p, _)| p.on_frontier)
        .map(|(_, (x, y))| format!("{x:.1},{y:.1}"))
        .collect();
    if frontier.len() >= 2 {
        let _ = write!(
            out,
            r#"<polyline class="frontier" data-testid="pareto-frontier" points="{}"/>"#,
            frontier.join(" ")
        );
    }
    for (p, &(x, y)) in pts.iter().zip(&at) {
        let _ = write!(
            out,
            r#"<g class="pt{}{}" data-testid="pareto-point" data-act="point" data-step="{}" role="button" tabindex="0"><title>step {}: {} {unit}, p99 TTFT {:.0} ms</title><line class="spread" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}"/><circle cx="{x:.1}" cy="{y:.1}" r="5"/><text class="pt-label" x="{:.1}" y="{:.1}">{}</text><rect class="hit" x="{:.1}" y="{:.1}" width="{HIT}" height="{HIT}"/></g>"#,
            if p.on_frontier { " on-frontier" } else { "" },
            if selected == Some(p.step) {
                " selected"
            } else {
                ""
            },
            p.step,
            p.step + 1,
            tok_num(p.y),
            p.x,
            y_of(p.y_min),
            y_of(p.y_max),
            x + 8.0,
            y - 6.0,
            p.step + 1,
            x - HIT / 2.0,
            y - HIT / 2.0
        );
    }
    out
}

/// The time axis's ticks from `x_min` to `x_max`, every `x_step` ms, and its title.
fn x_axis(out: &mut String, (x_min, x_max): (f64, f64), x_step: f64, x_of: impl Fn(f64) -> f64) {
    let mut v = x_min;
    while v <= x_max * (1.0 + 1e-9) {
        let x = x_of(v);
        let _ = write!(
            out,
            r#"<text class="axis" x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
            BOTTOM + 16.0,
            tick_label(v, x_step, "ms")
        );
        v += x_step;
    }
    let _ = write!(
        out,
        r#"<text class="axis-title" x="{}" y="{}" text-anchor="middle">p99 time to first token →  lower is better</text>"#,
        (LEFT + RIGHT) / 2.0,
        PH - 4.0
    );
}

/// A point's clickable box is this wide; points drawn closer than this
/// would hide one another.
const HIT: f64 = 22.0;

/// The points' drawn places: where one would cover one drawn before it
/// (steps that measured alike), it moves to the nearest clear place inside
/// the plot, sideways first (along the time axis) and only then up or down,
/// so every point stays visible and clickable. Its title keeps its values.
fn dodged(at: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut placed: Vec<(f64, f64)> = Vec::with_capacity(at.len());
    for (x, y) in at {
        let clear = |c: (f64, f64)| {
            placed
                .iter()
                .all(|q| (q.0 - c.0).abs() >= HIT || (q.1 - c.1).abs() >= HIT)
        };
        let inside = |c: (f64, f64)| (LEFT..=RIGHT).contains(&c.0) && (TOP..=BOTTOM).contains(&c.1);
        let spot = (0..24u32)
            .flat_map(|r| {
                let d = f64::from(r) * HIT;
                [(d, 0.0), (-d, 0.0), (0.0, -d), (0.0, d)]
            })
            .map(|(dx, dy)| (x + dx, y + dy))
            .find(|&c| (c == (x, y) || inside(c)) && clear(c))
            .unwrap_or((x, y));
        placed.push(spot);
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::view::test_data::{campaign, step};
    use shared::campaign::StepState;

    #[test]
    fn points_frontier_and_target_are_drawn() {
        let mut c = campaign();
        let empty = pareto_markup(
            &Campaign {
                steps: vec![],
                ..c.clone()
            },
            None,
        );
        assert!(empty.contains("points appear as steps are measured"));
        c.steps.push(step(4, "3", StepState::Done, Some(900.0)));
        let svg = pareto_markup(&c, Some(4));
        assert_eq!(svg.matches(r#"data-testid="pareto-point""#).count(), 2);
        assert!(svg.contains(r#"data-testid="pareto-target""#));
        assert!(svg.contains("target 1000 tok/s"));
        // Step 5 is faster and answers sooner: alone on the frontier.
        assert!(!svg.contains("pareto-frontier"), "{svg}");
        assert!(svg.contains(r#"class="pt on-frontier selected" data-testid="pareto-point" data-act="point" data-step="4""#), "{svg}");
        assert!(
            svg.contains(r#"class="pt" data-testid="pareto-point" data-act="point" data-step="0""#),
            "{svg}"
        );
    }

    /// The centres of the drawn points, in drawing order.
    fn centres(svg: &str) -> Vec<(f64, f64)> {
        svg.split("<circle cx=\"")
            .skip(1)
            .map(|rest| {
                let num = |s: &str| {
                    s.split('"')
                        .next()
                        .and_then(|n| n.parse::<f64>().ok())
                        .expect("a number")
                };
                let cy = rest.split("cy=\"").nth(1).expect("a cy");
                (num(rest), num(cy))
            })
            .collect()
    }

    #[test]
    fn points_that_measured_alike_are_drawn_apart() {
        let mut c = campaign();
        // Each a little faster to answer and a little slower to generate
        // than the one before: none beats another, all on the frontier, all
        // but drawn in one place.
        c.steps = (0..8)
            .map(|i| step(i, "1", StepState::Done, Some(900.0 - f64::from(i))))
            .collect();
        let svg = pareto_markup(&c, None);
        let at = centres(&svg);
        assert_eq!(at.len(), 8, "{svg}");
        // All of them inside the plot, where a click reaches them.
        for p in &at {
            assert!(
                (LEFT..=RIGHT).contains(&p.0) && (TOP..=BOTTOM).contains(&p.1),
                "{p:?} outside the plot"
            );
        }
        for (i, a) in at.iter().enumerate() {
            for b in &at[i + 1..] {
                assert!(
                    (a.0 - b.0).abs() >= HIT || (a.1 - b.1).abs() >= HIT,
                    "two points cover each other: {at:?}"
                );
            }
        }
        // The frontier runs through the points as drawn.
        let line = svg
            .split(r#"data-testid="pareto-frontier" points=""#)
            .nth(1)
            .expect("a frontier: no point beats another");
        let drawn: Vec<String> = at.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        for vertex in line.split('"').next().unwrap_or_default().split(' ') {
            assert!(drawn.iter().any(|d| d == vertex), "{vertex} is no point");
        }
        // Each keeps its own values in its title.
        assert_eq!(svg.matches(" tok/s, p99 TTFT").count(), 8, "{svg}");
        assert!(svg.contains("step 8: 893 tok/s, p99 TTFT 83 ms"), "{svg}");
        // Apart points stay where their values put them.
        assert_eq!(
            dodged(vec![(0.0, 0.0), (40.0, 0.0)]),
            vec![(0.0, 0.0), (40.0, 0.0)]
        );
    }
}
