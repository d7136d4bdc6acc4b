//! The campaign view as the page shows it, decided away from the DOM and
//! pinned down by host tests: the header's facts (progress, time left, the
//! best set against the target), the step rows ([`rows`]), the Pareto chart
//! ([`pareto`]), each flag's effect, and the plan builder's model ([`plan`]).
//! Read-only parts are HTML or SVG text; everything from outside goes through
//! [`crate::markup::escape`].

pub(crate) mod panel;
pub(crate) mod pareto;
pub(crate) mod plan;
pub(crate) mod rows;

use std::fmt::Write as _;

use shared::campaign::{Campaign, analysis};
use shared::units::tok_num;

use crate::ledger::fmt_delta;
use crate::markup::escape;

/// "3 of 8 steps · 2 failed"; the share finished (0–100) for the bar.
pub(crate) fn progress(c: &Campaign) -> (String, f64) {
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

/// "≈ 4 min 10 s left", "done", or "" when nothing can be said yet.
pub(crate) fn time_left(c: &Campaign, now_ms: u64) -> String {
    if c.info.state.is_over() {
        return c.info.state.label().to_owned();
    }
    match analysis::eta_ms(c, c.info.step_estimate_ms, now_ms) {
        Some(ms) => format!("≈ {} left", duration(ms)),
        None => "time left: after the first step".to_owned(),
    }
}

/// "1 h 05 min", "4 min 10 s", "12 s".
pub(crate) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

/// The best set so far against the target, as HTML: its metric with its
/// unit, Δ against the baseline, and whether it reached the target.
pub(crate) fn best_markup(c: &Campaign) -> String {
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
pub(crate) fn effects_markup(c: &Campaign) -> String {
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
pub(crate) mod test_data {
    use shared::bench::{BenchSettings, Spread};
    use shared::campaign::{
        Campaign, CampaignInfo, CampaignState, FailureKind, FailurePolicy, PlanOrder, Step,
        StepFailure, StepResult, StepState,
    };

    pub(crate) fn step(i: u32, idx: &str, state: StepState, tok_s: Option<f64>) -> Step {
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

    pub(crate) fn campaign() -> Campaign {
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
        assert_eq!(time_left(&c, 0), "≈ 1 min 00 s left");
        let best = best_markup(&c);
        assert!(best.contains("<b>800 tok/s</b>"), "{best}");
        assert!(best.contains("“base &lt;line&gt;”"), "{best}");
        assert!(best.contains("target 1000 tok/s — 80 % of it"), "{best}");
        assert_eq!(duration(3_725_000), "1 h 02 min");
        assert_eq!(duration(12_400), "12 s");
    }
}
