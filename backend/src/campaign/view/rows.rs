//! The campaign's step rows as HTML text: number, state, the flags that
//! differ from the baseline, the metric with its spread, Δ against the
//! baseline, p99 TTFT, time taken, and the restart record. One fixed-height
//! row per step, so rows that change in place never move the others.

use std::fmt::Write as _;

use shared::campaign::{Campaign, Step, StepState, analysis};
use shared::flags::{Flags, diff_by_name};
use shared::html::{duration, escape, fmt_delta};
use shared::units::{ms_num, tok_num};

/// Steps `range` of the campaign drawn, a row each in the order they run:
/// a plan of hundreds of steps draws a few dozen rows, and the page replaces
/// only the rows whose markup changed. Nothing here follows the clock (the
/// running step's time is in the summary's "now" line): a row changes only
/// when its step does.
pub(super) fn rows(c: &Campaign, range: std::ops::Range<usize>) -> Vec<String> {
    let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
    let deltas = analysis::deltas(c);
    let best = analysis::best(c).map(|s| s.index);
    let n = c.steps.len();
    let range = range.start.min(n)..range.end.min(n);
    c.steps[range.clone()]
        .iter()
        .zip(&deltas[range])
        .map(|(s, d)| step_row(c, s, *d, &base, best))
        .collect()
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
    let changes: Vec<String> = diff_by_name(base, &s.flags)
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
    use crate::campaign::view::test_data::campaign;

    #[test]
    fn rows_show_state_diff_metric_delta_and_failures() {
        let c = campaign();
        let html = rows(&c, 0..4).concat();
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
        // A window: only its rows; one past the end draws nothing.
        let part = rows(&c, 1..3);
        assert_eq!(part.len(), 2);
        assert!(part[0].contains(r#"data-step="1""#), "{part:?}");
        assert!(rows(&c, 3..99).len() == 1 && rows(&c, 9..12).is_empty());
    }
}
