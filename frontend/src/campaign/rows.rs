//! The campaign's step rows as HTML text: number, state, the flags that
//! differ from the baseline, the metric with its spread, Δ against the
//! baseline, p99 TTFT, time taken, and the restart record. One fixed-height
//! row per step, so rows that change in place never move the others.

use std::fmt::Write as _;

use shared::campaign::{Campaign, StepState, analysis};
use shared::units::{ms_num, tok_num};

use super::{duration, step_key};
use crate::flags::diff;
use crate::ledger::fmt_delta;
use crate::markup::escape;

/// Every step's row, in the order they run. `now_ms` times the running one.
pub(crate) fn step_rows(c: &Campaign, now_ms: u64) -> String {
    let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
    let deltas = analysis::deltas(c);
    let best = analysis::best(c).map(|s| s.index);
    let mut out = String::with_capacity(c.steps.len() * 600);
    for (s, d) in c.steps.iter().zip(deltas) {
        let current = c.info.current == Some(s.index) && !s.state.is_final();
        let _ = write!(
            out,
            r#"<tr class="cpg-step{}{}" data-testid="campaign-step" data-step="{}" data-state="{}">"#,
            if current { " current" } else { "" },
            if best == Some(s.index) { " best" } else { "" },
            s.index,
            step_key(s.state)
        );
        let _ = write!(out, r#"<td class="num">{}</td>"#, s.index + 1);
        let _ = write!(
            out,
            r#"<td><span class="step-state" data-state="{}">{}</span>{}</td>"#,
            step_key(s.state),
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
        // The flags against the baseline, as compact chips; all of them on hover.
        let changes: Vec<String> = diff(&base, &s.flags)
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
                    r#"<td class="cpg-fail" title="{}">{}</td>"#,
                    escape(&f.message),
                    f.kind.label()
                );
            }
            _ => out.push_str(r#"<td class="num cpg-muted">—</td>"#),
        }
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
            match (s.state, s.took_ms(now_ms)) {
                (StepState::Pending | StepState::Skipped, _) | (_, None) => "—".to_owned(),
                (_, Some(ms)) => duration(ms),
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
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::test_data::campaign;

    #[test]
    fn rows_show_state_diff_metric_delta_and_failures() {
        let c = campaign();
        let html = step_rows(&c, 10_000);
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
        assert!(html.contains(">out of memory at launch</td>"), "{html}");
        assert!(html.contains(r#"class="cpg-step current""#), "{html}");
        assert!(
            html.contains(r#"data-act="restart" data-id="40""#),
            "{html}"
        );
        assert!(html.contains("±0.0 %"), "the baseline's own Δ: {html}");
    }
}
