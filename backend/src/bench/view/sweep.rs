//! The sweep chart: output tok/s (median across repeats) against concurrency
//! on a log₂ axis, one line per flag set measured at two concurrencies or
//! more, the target as a dashed line; and its legend. Colours follow the
//! set's position in the ledger.

use std::fmt::Write as _;

use shared::bench::FlagSetResults;
use shared::html::axis::{empty_note, gpu_colour, y_grid};
use shared::html::{escape, scale_max};
use shared::units::fmt_tok_s;

use super::{pct, set_name};

/// The sweep chart's drawing box, in user units.
const SW: f64 = shared::bench::SWEEP_BOX.0;
const SH: f64 = shared::bench::SWEEP_BOX.1;
const S_LEFT: f64 = 78.0;
const S_RIGHT: f64 = SW - 24.0;
const S_TOP: f64 = 14.0;
const S_BOTTOM: f64 = SH - 36.0;

/// Whether a set gets a line: it has results at two concurrencies or more.
fn swept(r: &FlagSetResults) -> bool {
    r.levels.len() >= 2
}

/// The x of concurrency `c` on a log₂ axis from `c_lo` to `c_hi`, inset from
/// the plot's edges.
fn x_of(c: u32, c_lo: u32, c_hi: u32) -> f64 {
    let (l0, l1) = (f64::from(c_lo.max(1)).log2(), f64::from(c_hi.max(1)).log2());
    if l1 > l0 {
        S_LEFT + 12.0 + (f64::from(c.max(1)).log2() - l0) / (l1 - l0) * (S_RIGHT - S_LEFT - 24.0)
    } else {
        (S_LEFT + S_RIGHT) / 2.0
    }
}

/// The sweep chart's `<svg>` content: one `<g data-testid="sweep-line"
/// data-flagset=…>` per set in `shown` (positions in `ledger`) with a
/// result at two concurrencies or more, and the target.
pub(crate) fn sweep_markup(ledger: &[FlagSetResults], shown: &[usize], target: f64) -> String {
    let mut out = format!(
        r#"<rect class="plot-bg" x="{S_LEFT}" y="{S_TOP}" width="{}" height="{}"/>"#,
        S_RIGHT - S_LEFT,
        S_BOTTOM - S_TOP
    );
    let sets: Vec<usize> = shown
        .iter()
        .copied()
        .filter(|&i| ledger.get(i).is_some_and(swept))
        .collect();
    let mut cs: Vec<u32> = sets
        .iter()
        .flat_map(|&i| ledger[i].levels.keys().copied())
        .collect();
    cs.sort_unstable();
    cs.dedup();
    let (Some(&c_lo), Some(&c_hi)) = (cs.first(), cs.last()) else {
        empty_note(
            &mut out,
            (S_LEFT + S_RIGHT) / 2.0,
            (S_TOP + S_BOTTOM) / 2.0,
            "no sweep yet: benchmark a set at two concurrencies or more (e.g. 1,4,16,64)",
        );
        return out;
    };
    let x = |c: u32| x_of(c, c_lo, c_hi);
    let data_max = sets
        .iter()
        .flat_map(|&i| ledger[i].levels.values().map(|l| l.output_tok_s.median))
        .fold(0.0f64, f64::max);
    let y_max = scale_max(data_max, target);
    let y = |v: f64| S_BOTTOM - pct(v, y_max) / 100.0 * (S_BOTTOM - S_TOP);

    y_grid(&mut out, (S_LEFT, S_RIGHT), y_max, 5, "tok/s", y);
    for &c in &cs {
        let xx = x(c);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{xx:.1}" x2="{xx:.1}" y1="{S_TOP}" y2="{S_BOTTOM}"/><text class="axis" x="{xx:.1}" y="{}" text-anchor="middle">c={c}</text>"#,
            S_BOTTOM + 16.0
        );
    }
    let _ = write!(
        out,
        r#"<text class="axis" x="{}" y="{}" text-anchor="middle">concurrency (requests in flight, log₂ scale)</text>"#,
        (S_LEFT + S_RIGHT) / 2.0,
        SH - 4.0
    );
    if target > 0.0 && target.is_finite() {
        let ty = y(target);
        let _ = write!(
            out,
            r#"<line class="sweep-target" data-testid="sweep-target" x1="{S_LEFT}" x2="{S_RIGHT}" y1="{ty:.1}" y2="{ty:.1}"/><text class="sweep-target-label" x="{}" y="{:.1}" text-anchor="end">target {}</text>"#,
            S_RIGHT - 4.0,
            ty - 4.0,
            fmt_tok_s(Some(target))
        );
    }
    for &i in &sets {
        line(&mut out, &ledger[i], gpu_colour(i), x, y);
    }
    out
}

/// One set's line, with a dot and a tooltip per concurrency.
fn line(
    out: &mut String,
    r: &FlagSetResults,
    colour: &str,
    x: impl Fn(u32) -> f64,
    y: impl Fn(f64) -> f64,
) {
    let name = escape(set_name(&r.set));
    let mut pts = String::new();
    let mut dots = String::new();
    for (c, l) in &r.levels {
        let (xx, yy) = (x(*c), y(l.output_tok_s.median));
        if !pts.is_empty() {
            pts.push(' ');
        }
        let _ = write!(pts, "{xx:.1},{yy:.1}");
        let _ = write!(
            dots,
            r#"<circle cx="{xx:.1}" cy="{yy:.1}" r="3" fill="{colour}"><title>{name} · c={c} · {}</title></circle>"#,
            fmt_tok_s(Some(l.output_tok_s.median))
        );
    }
    let _ = write!(
        out,
        r#"<g data-testid="sweep-line" data-flagset="{}"><polyline class="sweep-line" stroke="{colour}" points="{pts}"/>{dots}</g>"#,
        escape(&r.set.id)
    );
}

/// The sweep chart's legend: a swatch and the set's name per line.
pub(crate) fn sweep_legend(ledger: &[FlagSetResults], shown: &[usize]) -> String {
    let mut out = String::new();
    for &i in shown {
        let Some(r) = ledger.get(i).filter(|r| swept(r)) else {
            continue;
        };
        let _ = write!(
            out,
            r#"<span class="legend-item" data-flagset="{}"><span class="legend-swatch" style="background:{}"></span>{}</span>"#,
            escape(&r.set.id),
            gpu_colour(i),
            escape(set_name(&r.set))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::view::test_data::ledger;

    #[test]
    fn sweep_draws_sets_with_two_levels() {
        let l = ledger();
        let shown = [0, 1, 2];
        let svg = sweep_markup(&l, &shown, 1000.0);
        assert_eq!(svg.matches(r#"data-testid="sweep-line""#).count(), 2);
        assert!(svg.contains(">c=1<") && svg.contains(">c=64<"));
        assert!(svg.contains("target 1000 tok/s"));
        assert!(!svg.contains("NaN"));
        // The first concurrency sits at the left, the last at the right.
        assert!(svg.contains(&format!(r#"x1="{:.1}""#, S_LEFT + 12.0)));
        assert!(svg.contains(&format!(r#"x1="{:.1}""#, S_RIGHT - 12.0)));
        let legend = sweep_legend(&l, &shown);
        assert!(legend.contains(">base<") && legend.contains(">bbb<"));
        assert!(!legend.contains("new"), "a set without a sweep has no line");
        assert!(sweep_markup(&l, &[2], 1000.0).contains("no sweep yet"));
    }
}
