//! The campaign view as the page shows it, drawn here from the campaign as
//! stored and served whole by `GET /api/campaigns/{id}/view`
//! ([`CampaignView`]): the summary (progress, time left, the best set against
//! the target, the step running now; [`panel`]), a window of step rows
//! ([`rows`]), the Pareto chart ([`pareto`]), the chosen step and each flag's
//! effect. The page keeps no campaign of its own and pays for none of this:
//! it sets the blocks' HTML, patches the rows that changed and ticks the
//! times that follow the clock. Everything from outside goes through
//! [`escape`].

mod panel;
mod pareto;
mod rows;

use std::fmt::Write as _;
use std::ops::Range;

use shared::campaign::{Campaign, CampaignView, ChosenSet, analysis};
use shared::html::{duration, escape, fmt_delta};
use shared::restart::Phase;
use shared::units::tok_num;

/// The most rows one view draws: the page asks for what its box shows and
/// some more.
pub const MAX_ROWS: usize = 400;

/// What the page asks to be drawn, and what only the agent knows.
#[derive(Debug, Clone)]
pub struct ViewAsk {
    /// The chosen step (its point ringed, its set shown).
    pub selected: Option<u32>,
    /// The steps whose rows to draw (at most [`MAX_ROWS`]).
    pub rows: Range<usize>,
    /// The caller may operate: the buttons that change something.
    pub may: bool,
    /// Nothing holds the server (no campaign, lease or operation).
    pub free: bool,
    /// The managed server's phase now.
    pub phase: Phase,
    pub now_ms: u64,
}

/// The campaign drawn for the page.
pub fn view(c: &Campaign, ask: &ViewAsk) -> CampaignView {
    let current = c
        .info
        .current
        .filter(|&i| c.steps.get(i as usize).is_some_and(|s| !s.state.is_final()));
    let running = current
        .and_then(|i| c.steps.get(i as usize))
        .and_then(|s| s.restart_id);
    let live_restart = running.or_else(|| {
        c.steps
            .iter()
            .filter(|s| s.restart_id.is_some())
            .max_by_key(|s| s.started_at_ms)
            .and_then(|s| s.restart_id)
    });
    let chosen = ask
        .selected
        .and_then(|i| c.steps.iter().find(|s| s.index == i))
        .map(|s| ChosenSet {
            flagset: s.flagset.clone(),
            name: s
                .label
                .clone()
                .unwrap_or_else(|| format!("step {}", s.index + 1)),
            flags: s.flags.clone(),
        });
    let first = ask.rows.start.min(c.steps.len());
    CampaignView {
        id: c.info.id,
        steps: c.steps.len() as u32,
        current,
        live_restart,
        summary: panel::summary(c, ask.now_ms, ask.phase),
        side: panel::side(c, ask.selected, ask.may, ask.free),
        first: first as u32,
        rows: rows::rows(c, first..ask.rows.end.min(first + MAX_ROWS)),
        chosen,
    }
}

/// "3 of 8 steps · 2 failed"; the share finished (0–100) for the bar.
fn progress(c: &Campaign) -> (String, f64) {
    let i = &c.info;
    let finished = i.done + i.reused + i.failed + i.skipped;
    let total = i.steps.max(1);
    let mut text = format!("{finished} of {} steps", i.steps);
    for (n, what) in [
        (i.reused, "reused"),
        (i.failed, "failed"),
        (i.skipped, "skipped"),
    ] {
        if n > 0 {
            let _ = write!(text, " · {n} {what}");
        }
    }
    (text, f64::from(finished) / f64::from(total) * 100.0)
}

/// "≈ 4 min 10 s left", "done", or "" when nothing can be said yet, as the
/// summary's `campaign-eta` span: a time left carries when it ends
/// (`data-end`) and the part the steps not started yet make (`data-floor`),
/// so the page counts it down between views (`tick` marks what it counts).
fn time_left(c: &Campaign, now_ms: u64) -> String {
    const SPAN: &str = r#"<span class="num cpg-eta tick" data-testid="campaign-eta""#;
    if c.info.state.is_over() {
        return format!("{SPAN}>{}</span>", c.info.state.label());
    }
    match analysis::eta(c, c.info.step_estimate_ms, now_ms) {
        Some(e) => format!(
            r#"{SPAN} data-end="{}" data-floor="{}">≈ {} left</span>"#,
            now_ms + e.left_ms,
            e.pending_ms,
            duration(e.left_ms)
        ),
        None => format!("{SPAN}>time left: after the first step</span>"),
    }
}

/// The best set so far against the target, as HTML: its metric with its
/// unit, Δ against the baseline, and whether it reached the target.
fn best_markup(c: &Campaign) -> String {
    let Some(best) = analysis::best(c) else {
        return r#"<span class="cpg-muted">no step measured yet</span>"#.to_owned();
    };
    let Some(r) = &best.result else {
        return String::new();
    };
    let m = r.metric().median;
    let mut out = format!(
        r#"<span class="cpg-best" data-testid="campaign-best" data-step="{}">best: step {}{} — <b>{} {}</b>"#,
        best.index,
        best.index + 1,
        best.label
            .as_deref()
            .map(|l| format!(" “{}”", escape(l)))
            .unwrap_or_default(),
        tok_num(m),
        r.metric_unit()
    );
    if let Some(d) = c.baseline().and_then(|b| analysis::delta_pct(best, b)) {
        let _ = write!(out, " ({} vs baseline)", fmt_delta(d));
    }
    out.push_str("</span>");
    if let Some(t) = c.info.target {
        let reached = m >= t;
        let _ = write!(
            out,
            r#" <span class="cpg-target" data-reached="{reached}">target {} {} — {}</span>"#,
            tok_num(t),
            r.metric_unit(),
            if reached {
                "reached".to_owned()
            } else {
                format!("{:.0} % of it", m / t * 100.0)
            }
        );
    }
    out
}

/// Each flag value's effect, one line each.
fn effects_markup(c: &Campaign) -> String {
    let effects = analysis::attribution(c);
    if effects.is_empty() {
        return r#"<li class="cpg-muted">no flag varies</li>"#.to_owned();
    }
    let mut out = String::new();
    for e in effects {
        let class = match e.median_pct {
            Some(p) if e.note.is_none() && p >= 0.0 => "eff-up",
            Some(_) if e.note.is_none() => "eff-down",
            _ => "eff-thin",
        };
        let _ = write!(
            out,
            r#"<li class="{class}" data-testid="campaign-effect" data-flag="{}">{}</li>"#,
            escape(&e.flag),
            escape(&e.line())
        );
    }
    out
}

#[cfg(test)]
pub(super) mod test_data {
    use shared::bench::{BenchSettings, Spread};
    use shared::campaign::{
        Campaign, CampaignInfo, CampaignState, FailureKind, FailurePolicy, PlanOrder, Step,
        StepFailure, StepResult, StepState,
    };

    pub(super) fn step(i: u32, idx: &str, state: StepState, tok_s: Option<f64>) -> Step {
        Step {
            index: i,
            plan_index: i,
            label: (i == 0).then(|| "base <line>".to_owned()),
            flags: [
                ("IDX".to_owned(), idx.to_owned()),
                ("--tp".to_owned(), "8".to_owned()),
            ]
            .into_iter()
            .collect(),
            flagset: format!("set{i}"),
            settings: None,
            state,
            attempts: 1,
            restart_id: Some(40 + i64::from(i)),
            run_id: None,
            failure: (state == StepState::Failed).then(|| StepFailure {
                kind: FailureKind::Oom,
                message: "launch failed: out of GPU memory".into(),
            }),
            result: tok_s.map(|t| StepResult {
                run_id: 7,
                concurrency: 16,
                request_rate: None,
                output_tok_s: Spread {
                    min: t - 2.0,
                    median: t,
                    max: t + 1.0,
                },
                ttft_p99_ms: Spread {
                    min: 80.0,
                    median: 90.0 - f64::from(i),
                    max: 95.0,
                },
                goodput_req_s: None,
                achieved_rate: None,
                client_saturated: false,
            }),
            started_at_ms: Some(0),
            finished_at_ms: state.is_final().then_some(30_000),
        }
    }

    pub(super) fn campaign() -> Campaign {
        let mut c = Campaign {
            info: CampaignInfo {
                id: 3,
                name: "idx <sweep>".into(),
                state: CampaignState::Running,
                reason: None,
                requested_by: "olga".into(),
                created_at_ms: 0,
                finished_at_ms: None,
                order: PlanOrder::Given,
                on_failure: FailurePolicy::Continue,
                reuse: true,
                target: Some(1000.0),
                baseline: 0,
                current: Some(2),
                steps: 0,
                done: 0,
                reused: 0,
                failed: 0,
                skipped: 0,
                varied: vec!["IDX".into()],
                step_estimate_ms: Some(60_000),
            },
            bench: BenchSettings::default(),
            steps: vec![
                step(0, "0", StepState::Done, Some(800.0)),
                step(1, "1", StepState::Failed, None),
                step(2, "2", StepState::Restarting, None),
                step(3, "1", StepState::Pending, None),
            ],
        };
        c.recount();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_says_how_far_how_long_and_how_good() {
        let c = test_data::campaign();
        let (text, pct) = progress(&c);
        assert_eq!(text, "2 of 4 steps · 1 failed");
        assert_eq!(pct, 50.0);
        // Two steps ran, 30 s each: the restarting one has 30 s left (it
        // started at 0), the pending one 30 s.
        let eta = time_left(&c, 0);
        assert!(
            eta.contains(r#"data-end="60000" data-floor="30000">≈ 1 min 00 s left<"#),
            "{eta}"
        );
        let best = best_markup(&c);
        assert!(best.contains("<b>800 tok/s</b>"), "{best}");
        assert!(best.contains("“base &lt;line&gt;”"), "{best}");
        assert!(best.contains("target 1000 tok/s — 80 % of it"), "{best}");
    }
}
