//! The fleet page's coordinated restarts, rendered by the hub as one HTML
//! fragment (`GET /api/coordinated/panel`): each group (a server that spans
//! nodes) and deployment the config declares, with a restart guarded by
//! typing its name (for an operator), and the newest records, each with a
//! timeline per node. The page sets it as it comes and delegates the clicks
//! (`data-act`): the records' readers stay out of the UI's bundle.

use std::fmt::Write as _;

use shared::fleet::{CoordKind, CoordRecord, CoordTarget};
use shared::html::escape;
use shared::restart::Outcome;

/// Where the records begin in the panel.
pub(super) const RECORDS_MARK: &str = "<!--records-->";

/// The whole panel: the targets, then the newest records.
pub(super) fn panel(
    targets: &[CoordTarget],
    records: &[CoordRecord],
    may: bool,
    now_ms: u64,
) -> String {
    let busy = records
        .first()
        .is_some_and(|r| r.outcome == Outcome::Running);
    let mut out = targets_markup(targets, may, busy);
    // The page swaps the two halves apart, so that what is typed in the
    // first is not lost when the records change.
    out.push_str(RECORDS_MARK);
    out.push_str(&records_markup(records, now_ms));
    out
}

/// The targets, each with its restart control (for an operator).
fn targets_markup(targets: &[CoordTarget], may: bool, busy: bool) -> String {
    if targets.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        r#"<h2 class="coord-title">Coordinated restarts</h2><div class="coord-targets">"#,
    );
    for t in targets {
        let (kind, members) = match t.kind {
            CoordKind::Group => (
                "group",
                t.members
                    .iter()
                    .enumerate()
                    .map(|(r, m)| format!("{} (rank {r})", escape(m)))
                    .collect::<Vec<_>>()
                    .join(" · "),
            ),
            CoordKind::Deployment => (
                "deployment",
                t.members
                    .iter()
                    .map(|m| escape(m))
                    .collect::<Vec<_>>()
                    .join(" → "),
            ),
        };
        let name = escape(&t.name);
        let _ = write!(
            out,
            r#"<div class="coord-target" data-testid="coord-target" data-target="{name}"><span class="coord-name">{name}</span><span class="coord-kind">{kind}</span><span class="coord-members">{members}</span>"#
        );
        if may {
            if t.kind == CoordKind::Group {
                let _ = write!(
                    out,
                    r#"<input class="coord-flags" data-testid="coord-flags" data-target="{name}" placeholder="flag changes: --tp=8 NAME=value" autocomplete="off" spellcheck="false"/>"#
                );
            }
            let _ = write!(
                out,
                r#"<span class="coord-go"><input class="coord-confirm" data-testid="coord-confirm" data-target="{name}" placeholder="type {name}" autocomplete="off" spellcheck="false"/><button type="button" class="btn btn-danger" data-act="coord-restart" data-target="{name}" data-testid="coord-restart"{}>Restart</button></span>"#,
                if busy { " disabled" } else { "" }
            );
        }
        out.push_str("</div>");
    }
    out.push_str("</div>");
    out
}

/// The newest records; the newest with its timelines open.
fn records_markup(records: &[CoordRecord], now_ms: u64) -> String {
    let mut out = String::new();
    for (i, r) in records.iter().enumerate() {
        let took = r
            .finished_at_ms
            .unwrap_or(now_ms)
            .saturating_sub(r.started_at_ms);
        let _ = write!(
            out,
            r#"<details class="coord-record" data-testid="coord-record" data-id="{}" data-outcome="{}"{}><summary><span class="num">#{}</span> <b>{}</b> <span class="phase" data-phase="{}">{}</span> <span class="fleet-muted">by {} · {} ago · took {:.1} s</span>"#,
            r.id,
            crate::store::name(&r.outcome),
            if i == 0 { " open" } else { "" },
            r.id,
            escape(&r.target),
            match r.outcome {
                Outcome::Succeeded => "ready",
                Outcome::Running => "warming_up",
                _ => "failed",
            },
            crate::store::name(&r.outcome),
            escape(&r.requested_by),
            shared::units::fmt_age_ms(now_ms.saturating_sub(r.started_at_ms)),
            took as f64 / 1e3,
        );
        if !r.flags.is_empty() {
            let changes: Vec<String> = (r.flags.iter())
                .map(|(k, v)| match v {
                    Some(v) => format!("{k}={v}"),
                    None => format!("{k} reset"),
                })
                .collect();
            let _ = write!(
                out,
                r#" <span class="coord-flagset" data-testid="coord-flagset">{}</span>"#,
                escape(&changes.join(" "))
            );
        }
        if let Some(f) = &r.failure {
            let _ = write!(
                out,
                r#" <span class="coord-failure" data-testid="coord-failure">on {}: {}</span>"#,
                escape(&f.member),
                escape(&f.reason)
            );
        }
        out.push_str(r#"</summary><div class="coord-nodes">"#);
        for m in &r.members {
            let rank = m.rank.map_or_else(String::new, |r| format!(" · rank {r}"));
            let _ = write!(
                out,
                r#"<div class="coord-node" data-testid="coord-node" data-member="{}"><div class="coord-node-name">{}{rank}</div>"#,
                escape(&m.name),
                escape(&m.name)
            );
            for e in &m.events {
                let _ = write!(
                    out,
                    r#"<div class="coord-event coord-{}"><span class="num">+{:.1} s</span> <span class="coord-step">{}</span> {}</div>"#,
                    e.step.word(),
                    e.at_ms.saturating_sub(r.started_at_ms) as f64 / 1e3,
                    e.step.word(),
                    escape(&e.note)
                );
            }
            out.push_str("</div>");
        }
        out.push_str("</div></details>");
    }
    out
}

#[cfg(test)]
mod tests {
    use shared::fleet::{CoordEvent, CoordFailure, CoordStep, MemberTimeline};

    use super::*;

    #[test]
    fn targets_offer_a_restart_to_an_operator_only() {
        let t = vec![CoordTarget {
            name: "dsv3".into(),
            kind: CoordKind::Group,
            members: vec!["a".into(), "<b>".into()],
            dist_init_addr: Some("10.0.0.1:5000".into()),
        }];
        let op = targets_markup(&t, true, false);
        assert!(op.contains("a (rank 0) · &lt;b&gt; (rank 1)"), "{op}");
        assert!(op.contains(r#"data-act="coord-restart" data-target="dsv3""#));
        assert!(op.contains(r#"placeholder="type dsv3""#));
        assert!(op.contains(r#"class="coord-flags" data-testid="coord-flags" data-target="dsv3""#));
        assert!(targets_markup(&t, true, true).contains(" disabled>"));
        assert!(!targets_markup(&t, false, false).contains("coord-restart"));
        assert!(targets_markup(&[], true, false).is_empty());
    }

    #[test]
    fn a_record_names_the_failed_node_and_shows_each_node_s_timeline() {
        let r = CoordRecord {
            id: 4,
            target: "dsv3".into(),
            kind: CoordKind::Group,
            requested_by: "olga".into(),
            started_at_ms: 10_000,
            finished_at_ms: Some(12_500),
            outcome: Outcome::Failed,
            failure: Some(CoordFailure {
                member: "b".into(),
                reason: "verify: pid 9 (not ours) holds 2.0 GiB on GPU 0".into(),
            }),
            flags: [("--tp".to_owned(), Some("8".to_owned()))].into(),
            members: vec![MemberTimeline {
                name: "b".into(),
                rank: Some(1),
                agent_ops: vec![7],
                events: vec![CoordEvent {
                    at_ms: 10_300,
                    step: CoordStep::Drain,
                    note: "stop #7 on its agent".into(),
                }],
            }],
        };
        let html = records_markup(&[r], 20_000);
        assert!(html.contains(r#"data-outcome="failed" open"#), "{html}");
        assert!(html.contains("on b: verify: pid 9 (not ours)"), "{html}");
        assert!(html.contains("2.5 s"), "{html}");
        assert!(html.contains("b · rank 1"), "{html}");
        assert!(
            html.contains(r#"data-testid="coord-flagset">--tp=8<"#),
            "{html}"
        );
        assert!(
            html.contains("+0.3 s</span> <span class=\"coord-step\">drain</span> stop #7"),
            "{html}"
        );
    }
}
