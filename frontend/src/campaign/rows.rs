//! The campaign's step rows as HTML text: number, state, the flags that
//! differ from the baseline, the metric with its spread, Δ against the
//! baseline, p99 TTFT, time taken, and the restart record. One fixed-height
//! row per step, so rows that change in place never move the others.

use std::fmt::Write as _;

use shared::campaign::{Campaign, Step, StepState, analysis};
use shared::flags::Flags;
use shared::units::{ms_num, tok_num};

use super::duration;
use crate::flags::diff;
use crate::ledger::fmt_delta;
use crate::markup::escape;

/// A row's height in CSS pixels (`.cpg-table td`): the window of rows drawn
/// is worked out from it.
pub(crate) const ROW_PX: f64 = 28.0;
/// Rows drawn beyond those in view, above and below.
const OVERSCAN: usize = 10;

/// The rows to draw for a box scrolled to `scroll_px` showing `view_px`, of
/// `n`: a window around what is in view, whatever the plan's length.
pub(crate) fn window(n: usize, scroll_px: f64, view_px: f64) -> std::ops::Range<usize> {
    let first = (scroll_px.max(0.0) / ROW_PX) as usize;
    let shown = (view_px.max(0.0) / ROW_PX).ceil() as usize;
    let start = first.saturating_sub(OVERSCAN).min(n);
    let end = (first + shown + OVERSCAN).min(n);
    start..end.max(start)
}

/// The window of rows drawn: the spacer heights above and below it (px),
/// and each row's markup, in the order the steps run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Drawn {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) above_px: f64,
    pub(crate) below_px: f64,
    pub(crate) rows: Vec<String>,
}

impl Drawn {
    /// The whole tbody: a spacer row standing for the rows above, the rows,
    /// a spacer for those below.
    pub(crate) fn html(&self) -> String {
        let mut out = spacer(self.above_px);
        for r in &self.rows {
            out.push_str(r);
        }
        out.push_str(&spacer(self.below_px));
        out
    }
}

/// A row that holds the place of `px` of rows not drawn (nothing for 0).
fn spacer(px: f64) -> String {
    if px > 0.0 {
        format!(r#"<tr class="cpg-spacer" style="height:{px}px"></tr>"#)
    } else {
        String::new()
    }
}

/// The rows of steps `range`, in the order they run, as [`Drawn::html`]
/// writes them.
#[cfg(test)]
pub(crate) fn step_rows(c: &Campaign, range: std::ops::Range<usize>) -> String {
    drawn(c, range).html()
}

/// Steps `range` of the campaign drawn: a plan of hundreds of steps draws a
/// few dozen rows, and the page replaces only the rows whose markup changed.
/// Nothing here follows the clock (the running step's time is in the
/// panel's "now" line): a row changes only when its step does.
pub(crate) fn drawn(c: &Campaign, range: std::ops::Range<usize>) -> Drawn {
    let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
    let deltas = analysis::deltas(c);
    let best = analysis::best(c).map(|s| s.index);
    let n = c.steps.len();
    let range = range.start.min(n)..range.end.min(n);
    let mut rows = Vec::with_capacity(range.len());
    for (s, d) in c.steps[range.clone()].iter().zip(&deltas[range.clone()]) {
        rows.push(step_row(c, s, *d, &base, best));
    }
    Drawn {
        above_px: range.start as f64 * ROW_PX,
        below_px: (n - range.end) as f64 * ROW_PX,
        range,
        rows,
    }
}

/// Step `s`'s row: its number and state, its flags against `base`, its
/// result or failure, `d` (its change against the baseline), its p99 TTFT,
/// its time and its restart record.
fn step_row(c: &Campaign, s: &Step, d: Option<f64>, base: &Flags, best: Option<u32>) -> String {
    let mut out = String::with_capacity(600);
    let current = c.info.current == Some(s.index) && !s.state.is_final();
    let _ = write!(
        out,
        r#"<tr class="cpg-step{}{}" data-testid="campaign-step" data-step="{}" data-state="{}">"#,
        if current { " current" } else { "" },
        if best == Some(s.index) { " best" } else { "" },
        s.index,
        s.state.as_str()
    );
    let _ = write!(out, r#"<td class="num">{}</td>"#, s.index + 1);
    let _ = write!(
        out,
        r#"<td><span class="step-state" data-state="{}">{}</span>{}</td>"#,
        s.state.as_str(),
        s.state.label(),
        if s.attempts > 1 {
            format!(
                r#" <span class="cpg-muted" title="attempts">×{}</span>"#,
                s.attempts
            )
        } else {
            String::new()
        }
    );
    flags_cell(&mut out, c, s, base);
    result_cell(&mut out, s);
    let _ = write!(
        out,
        r#"<td class="num{}">{}</td>"#,
        match d {
            Some(d) if d > 0.05 => " up",
            Some(d) if d < -0.05 => " down",
            _ => "",
        },
        d.map(fmt_delta).unwrap_or_else(|| "—".to_owned())
    );
    let _ = write!(
        out,
        r#"<td class="num">{}</td>"#,
        s.result
            .as_ref()
            .filter(|_| s.measured())
            .map(|r| format!(
                "{} <span class=\"unit\">ms</span>",
                ms_num(r.ttft_p99_ms.median)
            ))
            .unwrap_or_else(|| "—".to_owned())
    );
    let _ = write!(
        out,
        r#"<td class="num">{}</td>"#,
        match (s.state, s.started_at_ms, s.finished_at_ms) {
            (StepState::Restarting | StepState::Benchmarking, _, _) => "…".to_owned(),
            (StepState::Pending | StepState::Skipped, _, _) => "—".to_owned(),
            (_, Some(a), Some(b)) => duration(b.saturating_sub(a)),
            _ => "—".to_owned(),
        }
    );
    match s.restart_id {
        Some(id) => {
            let _ = write!(
                out,
                r##"<td><button type="button" class="link" data-act="restart" data-id="{id}" data-testid="campaign-restart-link">#{id}</button></td>"##
            );
        }
        None => out.push_str("<td></td>"),
    }
    out.push_str("</tr>");
    out
}

/// The flags against the baseline, as compact chips; all of them on hover.
fn flags_cell(out: &mut String, c: &Campaign, s: &Step, base: &Flags) {
    let changes: Vec<String> = diff(base, &s.flags)
        .iter()
        .map(ToString::to_string)
        .collect();
    let _ = write!(
        out,
        r#"<td class="cpg-flags" title="{}">"#,
        escape(&changes.join("\n"))
    );
    if let Some(l) = &s.label {
        let _ = write!(out, r#"<span class="cpg-label">{}</span> "#, escape(l));
    }
    if s.plan_index == c.info.baseline {
        out.push_str(r#"<span class="cpg-muted">baseline</span>"#);
    } else {
        for text in &changes {
            let _ = write!(out, r#"<span class="cpg-chip">{}</span>"#, escape(text));
        }
    }
    out.push_str("</td>");
}

/// The step's measured metric with its spread, or why it failed.
fn result_cell(out: &mut String, s: &Step) {
    match (&s.result, &s.failure) {
        (Some(r), _) if s.measured() => {
            let m = r.metric();
            let _ = write!(
                out,
                r#"<td class="num" title="min {} · max {} over repeats">{} <span class="unit">{}</span>{}</td>"#,
                tok_num(m.min),
                tok_num(m.max),
                tok_num(m.median),
                r.metric_unit(),
                if r.client_saturated {
                    r#" <span class="cpg-warn" title="the load generator was saturated: this measures it, not the server">client saturated</span>"#
                } else {
                    ""
                }
            );
        }
        (_, Some(f)) => {
            let _ = write!(
                out,
                r#"<td class="cpg-fail" title="{}: {}">{}</td>"#,
                f.kind.label(),
                escape(&f.message),
                f.kind.short()
            );
        }
        _ => out.push_str(r#"<td class="num cpg-muted">—</td>"#),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::test_data::campaign;

    #[test]
    fn rows_show_state_diff_metric_delta_and_failures() {
        let c = campaign();
        let html = step_rows(&c, 0..4);
        assert_eq!(html.matches(r#"data-testid="campaign-step""#).count(), 4);
        assert!(html.contains(r#"data-state="done""#));
        assert!(
            html.contains("<span class=\"cpg-label\">base &lt;line&gt;</span>"),
            "{html}"
        );
        assert!(
            html.contains(">800 <span class=\"unit\">tok/s</span>"),
            "{html}"
        );
        assert!(html.contains("IDX: 0 → 2"), "{html}");
        assert!(html.contains(">OOM at launch</td>"), "{html}");
        assert!(html.contains(r#"class="cpg-step current""#), "{html}");
        assert!(
            html.contains(r#"data-act="restart" data-id="40""#),
            "{html}"
        );
        assert!(html.contains("±0.0 %"), "the baseline's own Δ: {html}");
        assert!(!html.contains("cpg-spacer"));
        // A window: the rows before and after it are spacers of their height.
        let part = step_rows(&c, 1..3);
        assert_eq!(part.matches(r#"data-testid="campaign-step""#).count(), 2);
        assert!(
            part.starts_with(r#"<tr class="cpg-spacer" style="height:28px"></tr>"#),
            "{part}"
        );
        assert!(
            part.ends_with(r#"<tr class="cpg-spacer" style="height:28px"></tr>"#),
            "{part}"
        );
    }

    #[test]
    fn the_window_covers_what_is_in_view_and_some_more() {
        assert_eq!(window(4, 0.0, 420.0), 0..4);
        assert_eq!(window(500, 0.0, 420.0), 0..25);
        // Scrolled to row 100: rows 90 to 125.
        assert_eq!(window(500, 2800.0, 420.0), 90..125);
        assert_eq!(window(500, 1e9, 420.0), 500..500);
        assert_eq!(window(0, 0.0, 420.0), 0..0);
    }
}
