//! The campaign panel's blocks as HTML text, each drawn whole by one pure
//! function: the head (name, state, the operator's buttons), the summary
//! (progress, time left, the best set against the target, the step running
//! now) and the side (the chart, the chosen point, each flag's effect). Their
//! buttons carry a `data-act` the panel reads from the click; the page's
//! bundle pays for one function each, not for a view tree of many parts.

use std::fmt::Write as _;

use shared::campaign::{Campaign, CampaignState};
use shared::restart::Phase;
use shared::units::tok_num;

use super::pareto::{PH, PW, pareto_markup};
use super::{best_markup, duration, effects_markup, progress, time_left};
use crate::flags::diff;
use crate::markup::{diff_lines, escape, phase_pill};

/// A button that says what it does in `data-act`.
fn button(out: &mut String, act: &str, testid: &str, class: &str, text: &str) {
    let _ = write!(
        out,
        r#"<button type="button" class="btn{class}" data-act="{act}" data-testid="{testid}">{text}</button>"#
    );
}

/// The head: the campaign's number, name and state (none yet: nothing),
/// pause, resume and cancel as its state allows, the exports, and for an
/// operator the webhook test and a new campaign.
/// `base`: where the API is (see `crate::base`).
pub(crate) fn head(c: Option<(i64, &str, CampaignState)>, may: bool, base: &str) -> String {
    let mut out = String::from(r#"<h2 class="proc-title">campaign</h2>"#);
    if let Some((id, name, st)) = c {
        let _ = write!(
            out,
            r#"<span class="cpg-name" data-testid="campaign-name">#{id} {}</span><span class="cpg-state" data-testid="campaign-state" data-state="{}">{}</span>"#,
            escape(name),
            st.as_str(),
            st.label()
        );
        if may {
            out.push_str(r#"<span class="cpg-actions">"#);
            if st == CampaignState::Running {
                button(&mut out, "pause", "campaign-pause", "", "Pause");
            }
            if matches!(st, CampaignState::Paused | CampaignState::Pausing) {
                button(&mut out, "resume", "campaign-resume", "", "Resume");
            }
            if !st.is_over() {
                button(
                    &mut out,
                    "cancel",
                    "campaign-cancel",
                    " btn-danger",
                    "Cancel",
                );
            }
            out.push_str("</span>");
        }
        let _ = write!(
            out,
            r#"<span class="proc-spacer"></span><a class="link" href="{base}/api/campaigns/{id}/export.csv" download="">CSV</a><a class="link" href="{base}/api/campaigns/{id}/export.json" download="">JSON</a>"#
        );
    } else {
        out.push_str(r#"<span class="proc-spacer"></span>"#);
    }
    if may {
        button(&mut out, "hooks", "test-webhooks", "", "Test webhooks");
        button(
            &mut out,
            "new",
            "new-campaign",
            " btn-primary",
            "New campaign…",
        );
    }
    out
}

/// The summary: how far (text and bar), how long is left, the best set
/// against the target, and the step running now with the server's `phase`
/// and how long it has run — or how long the ended campaign took, and why it
/// paused or stopped.
pub(crate) fn summary(c: &Campaign, now_ms: u64, phase: Phase) -> String {
    let (text, pct) = progress(c);
    let mut out = format!(
        r#"<div class="cpg-progress"><span class="num" data-testid="campaign-progress">{text}</span><div class="cpg-bar"><div class="cpg-bar-fill" style="transform:scaleX({:.4})"></div></div><span class="num cpg-eta" data-testid="campaign-eta">{}</span></div><div class="cpg-best-line">{}</div><div class="cpg-now">"#,
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
                r#"<span class="num cpg-muted">{}</span>"#,
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
pub(crate) fn side(c: &Campaign, selected: Option<u32>, may: bool, free: bool) -> String {
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
            diff_lines(&diff(&base, &s.flags), "the baseline's flags")
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
    use crate::campaign::test_data::campaign;

    #[test]
    fn the_head_offers_what_the_state_allows_to_whoever_may() {
        let h = head(Some((3, "a <b>", CampaignState::Running)), true, "");
        assert!(h.contains("#3 a &lt;b&gt;"), "{h}");
        assert!(h.contains(r#"data-act="pause""#) && h.contains(r#"data-act="cancel""#));
        assert!(!h.contains(r#"data-act="resume""#));
        assert!(h.contains(r#"href="/api/campaigns/3/export.csv""#));
        let hub = head(Some((3, "x", CampaignState::Done)), true, "/agents/gpu-01");
        assert!(hub.contains(r#"href="/agents/gpu-01/api/campaigns/3/export.json""#));
        let paused = head(Some((3, "x", CampaignState::Paused)), true, "");
        assert!(paused.contains(r#"data-act="resume""#) && !paused.contains(r#"data-act="pause""#));
        let done = head(Some((3, "x", CampaignState::Done)), true, "");
        assert!(!done.contains(r#"data-act="cancel""#));
        let viewer = head(Some((3, "x", CampaignState::Running)), false, "");
        assert!(!viewer.contains("data-act"), "{viewer}");
        let none = head(None, true, "");
        assert!(none.contains(r#"data-act="new""#) && !none.contains("campaign-state"));
    }

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
