//! The campaign panel's blocks as HTML text, each drawn whole by one pure
//! function: the summary (progress, time left, the best set against the
//! target, the step running now) and the side (the chart, the chosen point,
//! each flag's effect). Their buttons carry a `data-act` the page reads from
//! the click.

use std::fmt::Write as _;

use shared::campaign::Campaign;
use shared::flags::diff_by_name;
use shared::html::{diff_lines, duration, escape, phase_pill};
use shared::restart::Phase;
use shared::units::tok_num;

use super::pareto::{PH, PW, pareto_markup};
use super::{best_markup, effects_markup, progress, time_left};

/// The summary: how far (text and bar), how long is left, the best set
/// against the target, and the step running now with the server's `phase`
/// and how long it has run — or how long the ended campaign took, and why it
/// paused or stopped.
pub(super) fn summary(c: &Campaign, now_ms: u64, phase: Phase) -> String {
    let (text, pct) = progress(c);
    let mut out = format!(
        r#"<div class="cpg-progress"><span class="num" data-testid="campaign-progress">{text}</span><div class="cpg-bar"><div class="cpg-bar-fill" style="transform:scaleX({:.4})"></div></div>{}</div><div class="cpg-best-line">{}</div><div class="cpg-now">"#,
        pct / 100.0,
        time_left(c, now_ms),
        best_markup(c)
    );
    let i = &c.info;
    if let Some(s) = i
        .current
        .and_then(|n| c.steps.get(n as usize))
        .filter(|s| !s.state.is_final())
    {
        let _ = write!(
            out,
            r#"<span data-testid="campaign-current">step {} of {}: {}</span>"#,
            s.index + 1,
            i.steps,
            s.state.label()
        );
        phase_pill(&mut out, phase);
        if let Some(t) = s.started_at_ms {
            let _ = write!(
                out,
                r#"<span class="num cpg-muted tick" data-since="{t}">{}</span>"#,
                duration(now_ms.saturating_sub(t))
            );
        }
    }
    if let Some(end) = i.finished_at_ms {
        let _ = write!(
            out,
            r#"<span class="cpg-muted num" data-testid="campaign-took">ended after {}</span>"#,
            duration(end.saturating_sub(i.created_at_ms))
        );
    }
    if let Some(r) = &i.reason {
        let _ = write!(
            out,
            r#"<span class="cpg-reason" data-testid="campaign-reason">{}</span>"#,
            escape(r)
        );
    }
    out.push_str("</div>");
    out
}

/// The side: the chart (the `selected` step's point ringed), that step's
/// flags against the baseline with its restart record and — for an operator,
/// when nothing holds the server (`free`) — "restart with this set", and each
/// flag's effect.
pub(super) fn side(c: &Campaign, selected: Option<u32>, may: bool, free: bool) -> String {
    let mut out = format!(
        r#"<svg class="chart pareto" data-testid="pareto-chart" viewBox="0 0 {PW} {PH}" preserveAspectRatio="xMidYMid meet" role="group" aria-label="throughput against p99 time to first token">{}</svg>"#,
        pareto_markup(c, selected)
    );
    if let Some(s) = selected.and_then(|i| c.steps.iter().find(|s| s.index == i)) {
        let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
        let _ = write!(
            out,
            r#"<div class="cpg-point" data-testid="campaign-point" data-step="{}"><div class="cpg-point-head"><b>step {}</b><span class="num">{}</span><span class="cpg-muted num">{}</span></div><div class="diff-lines">{}</div><div class="cpg-point-actions">"#,
            s.index,
            s.index + 1,
            s.result
                .as_ref()
                .map(|r| format!("{} {}", tok_num(r.metric().median), r.metric_unit()))
                .unwrap_or_default(),
            escape(&s.flagset),
            diff_lines(&diff_by_name(&base, &s.flags), "the baseline's flags")
        );
        if let Some(id) = s.restart_id {
            let _ = write!(
                out,
                r#"<button type="button" class="btn" data-act="restart" data-id="{id}" data-testid="campaign-point-record">Restart record</button>"#
            );
        }
        if may {
            let _ = write!(
                out,
                r#"<button type="button" class="btn" data-act="restart-with" data-step="{}" data-testid="campaign-point-restart"{}>Restart with this set…</button>"#,
                s.index,
                if free {
                    r#" title="open the restart dialog with this set's flags""#
                } else {
                    r#" disabled title="the server is busy: a campaign or an operation holds it""#
                }
            );
        }
        out.push_str("</div></div>");
    }
    let _ = write!(
        out,
        r#"<h3 class="cpg-h">effect of each flag</h3><ul class="cpg-effects" data-testid="campaign-effects">{}</ul>"#,
        effects_markup(c)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::view::test_data::campaign;

    #[test]
    fn the_summary_and_the_side_say_what_runs_and_what_was_chosen() {
        let c = campaign();
        let s = summary(&c, 10_000, Phase::Draining);
        assert!(
            s.contains(r#"data-testid="campaign-progress">2 of 4 steps · 1 failed<"#),
            "{s}"
        );
        assert!(s.contains("step 3 of 4: restarting"), "{s}");
        assert!(s.contains(r#"data-phase="draining""#), "{s}");
        assert!(s.contains("scaleX(0.5000)"), "{s}");
        assert!(s.contains(r#"data-since="0">10 s<"#), "{s}");
        let side_none = side(&c, None, true, true);
        assert!(side_none.contains(r#"data-testid="pareto-chart""#));
        assert!(!side_none.contains("campaign-point"));
        let chosen = side(&c, Some(0), true, false);
        assert!(
            chosen.contains(r#"data-testid="campaign-point" data-step="0""#),
            "{chosen}"
        );
        assert!(
            chosen.contains(r#"data-act="restart" data-id="40""#),
            "{chosen}"
        );
        assert!(chosen.contains(r#"data-act="restart-with" data-step="0" data-testid="campaign-point-restart" disabled"#), "{chosen}");
        assert!(!side(&c, Some(0), false, true).contains("restart-with"));
    }
}
