//! The pieces both SVG charts (the drain chart, the ledger's sweep chart) draw
//! with: "nice" steps and ticks, tick labels with their unit, a horizontal
//! grid with its labels, a note where there is nothing to draw, and the line
//! colours. Pure text; what is drawn where is each chart's own.

use std::fmt::Write as _;

/// A 1, 2 or 5 × 10ⁿ step that cuts `0..=max` into at most `max_ticks` parts.
pub fn nice_step(max: f64, max_ticks: usize) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let rough = max / max_ticks.max(1) as f64;
    // The power of ten at or below `rough` (by steps: `powf` costs the bundle).
    let mut mag = 1.0;
    while mag * 10.0 <= rough {
        mag *= 10.0;
    }
    while mag > rough {
        mag /= 10.0;
    }
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= rough * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// 0, step, 2·step, … up to `max`.
pub fn ticks(max: f64, max_ticks: usize) -> Vec<f64> {
    let step = nice_step(max, max_ticks);
    let mut out = Vec::new();
    let mut i = 0u32;
    loop {
        let v = f64::from(i) * step;
        if v > max * (1.0 + 1e-9) || out.len() > max_ticks + 1 {
            break;
        }
        out.push(v);
        i += 1;
    }
    out
}

/// A tick's text with its unit: "0 s", "2.5 s", "96 GiB"; as many decimals as
/// the step needs.
pub fn tick_label(v: f64, step: f64, unit: &str) -> String {
    // One decimal per power of ten the step is below 1.
    let mut decimals = 0;
    let mut place = 1.0;
    while step < place * (1.0 - 1e-9) && decimals < 6 {
        place /= 10.0;
        decimals += 1;
    }
    format!("{v:.decimals$} {unit}")
}

/// A chart's horizontal grid from 0 to `max` (at most `n` steps), each line
/// from `left` to `right` at `y_of(value)`, labelled in `unit` left of it.
pub fn y_grid(
    out: &mut String,
    (left, right): (f64, f64),
    max: f64,
    n: usize,
    unit: &str,
    y_of: impl Fn(f64) -> f64,
) {
    let step = nice_step(max, n);
    for v in ticks(max, n) {
        let y = y_of(v);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{left}" x2="{right}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 4.0,
            tick_label(v, step, unit)
        );
    }
}

/// A chart's message where there is nothing to draw, centred at `(x, y)`.
pub fn empty_note(out: &mut String, x: f64, y: f64, text: &str) {
    let _ = write!(
        out,
        r#"<text class="chart-empty" x="{x}" y="{y}" text-anchor="middle">{text}</text>"#
    );
}

/// A line colour per position (a GPU, a flag set), distinct for eight and
/// repeating after.
pub fn gpu_colour(position: usize) -> &'static str {
    const PALETTE: [&str; 8] = [
        "#4f9dff", "#3fb950", "#e0a526", "#f4645c", "#b26cff", "#2ec4c4", "#ff8fd0", "#c7cdd8",
    ];
    PALETTE[position % PALETTE.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ticks() {
        assert_eq!(nice_step(96.0, 5), 20.0);
        assert_eq!(ticks(96.0, 5), [0.0, 20.0, 40.0, 60.0, 80.0]);
        assert_eq!(nice_step(8.0, 8), 1.0);
        assert_eq!(nice_step(8.1, 8), 2.0);
        assert_eq!(nice_step(1.0, 6), 0.2);
        assert_eq!(nice_step(0.0, 6), 1.0);
        assert_eq!(ticks(10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(tick_label(2.0, 2.0, "s"), "2 s");
        assert_eq!(tick_label(0.4, 0.2, "s"), "0.4 s");
        assert_eq!(tick_label(80.0, 20.0, "GiB"), "80 GiB");
    }

    #[test]
    fn colours_repeat_after_eight() {
        assert_ne!(gpu_colour(0), gpu_colour(7));
        assert_eq!(gpu_colour(8), gpu_colour(0));
    }
}
