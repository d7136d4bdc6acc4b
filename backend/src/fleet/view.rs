//! The fleet page as the hub renders it. Its rows (`GET /api/fleet/panel`):
//! every agent, its GPUs compact, its server. Its coordinated restarts, one
//! HTML fragment (`GET /api/coordinated/panel`): each group (a server that spans
//! nodes) and deployment the config declares, with a restart guarded by
//! typing its name (for an operator), and the newest records, each with a
//! timeline per node. The page sets it as it comes and delegates the clicks
//! (`data-act`): the records' readers stay out of the UI's bundle.

use std::fmt::Write as _;

use shared::fleet::{AgentView, CoordKind, CoordRecord, CoordTarget, Fleet};
use shared::html::escape;
use shared::restart::Outcome;
use shared::units::{fmt_age_ms, fmt_bytes, fmt_bytes_of, fmt_tok_s, fraction};

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

/// One agent's row as HTML text.
fn row(a: &AgentView, now_ms: u64) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<div class="fleet-row{}" data-testid="fleet-row" data-agent="{}" data-reachable="{}">"#,
        if a.reachable { "" } else { " fleet-gone" },
        escape(&a.name),
        a.reachable
    );
    let _ = write!(
        out,
        r#"<div class="fleet-name"><a class="fleet-link" data-testid="fleet-link" href="/agents/{}/" title="open its dashboard through the hub">{}</a><span class="fleet-host">{}</span>{}</div>"#,
        escape(&a.name),
        escape(&a.name),
        escape(a.hostname.as_deref().unwrap_or("—")),
        if a.simulated == Some(true) {
            r#"<span class="fleet-sim" title="this agent reads a simulated host, not real GPUs">simulated host</span>"#
        } else {
            ""
        }
    );
    let seen = a
        .last_seen_ms
        .map(|t| format!("last seen {} ago", fmt_age_ms(now_ms.saturating_sub(t))));
    if a.reachable {
        out.push_str(r#"<div class="fleet-state" data-testid="fleet-state" data-state="live"><span class="fleet-dot"></span>live</div>"#);
    } else {
        let _ = write!(
            out,
            r#"<div class="fleet-state" data-testid="fleet-state" data-state="unreachable" title="{}">unreachable · {}</div>"#,
            escape(a.error.as_deref().unwrap_or("")),
            escape(seen.as_deref().unwrap_or("never seen"))
        );
    }
    out.push_str(r#"<div class="fleet-gpus">"#);
    for g in &a.gpus {
        let share = match (g.mem_used_bytes, g.mem_total_bytes) {
            (Some(u), Some(t)) => fraction(u, t),
            _ => 0.0,
        };
        let mem = match (g.mem_used_bytes, g.mem_total_bytes) {
            (Some(u), Some(t)) => fmt_bytes_of(u, t),
            (Some(u), None) => fmt_bytes(u),
            _ => "memory not read".to_owned(),
        };
        let mut title = format!("GPU {}: {mem}", g.index);
        if let Some(u) = g.util_gpu_percent {
            let _ = write!(title, ", util {u} %");
        }
        for i in &g.issues {
            let _ = write!(title, "\n{i}");
        }
        let _ = write!(
            out,
            r#"<span class="fleet-gpu{}" data-testid="fleet-gpu" title="{}"><span class="fleet-gpu-fill" style="height: {:.0}%"></span></span>"#,
            if g.issues.is_empty() {
                ""
            } else {
                " fleet-gpu-bad"
            },
            escape(&title),
            share * 100.0
        );
    }
    out.push_str("</div>");
    match &a.server {
        Some(s) => {
            let flags = s
                .flags
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = write!(
                out,
                r#"<div class="fleet-server">{}<span class="phase" data-phase="{}" data-testid="fleet-phase">{}</span><span class="fleet-flags" title="{}">{} · gen {}</span></div>"#,
                if a.reachable {
                    ""
                } else {
                    r#"<span class="fleet-muted">last known</span>"#
                },
                s.phase.as_str(),
                s.phase.as_str().replace('_', " "),
                escape(&flags),
                escape(&s.name),
                s.generation
            );
            let _ = write!(
                out,
                r#"<div class="fleet-tok num">{}</div>"#,
                escape(&fmt_tok_s(s.output_tok_s))
            );
        }
        None => out.push_str(
            r#"<div class="fleet-server"><span class="fleet-muted">no server</span></div><div class="fleet-tok num">—</div>"#,
        ),
    }
    out.push_str("</div>");
    out
}

/// The fleet's rows, and a line on how many agents answer.
pub(super) fn fleet_markup(f: &Fleet, now_ms: u64) -> String {
    let live = f.agents.iter().filter(|a| a.reachable).count();
    let mut out = format!(
        r#"<div class="fleet-count" data-testid="fleet-count">{live} of {} agents reachable</div>"#,
        f.agents.len()
    );
    for a in &f.agents {
        out.push_str(&row(a, now_ms));
    }
    out
}

#[cfg(test)]
mod tests {
    use shared::fleet::{
        CoordEvent, CoordFailure, CoordStep, GpuBrief, MemberTimeline, ServerBrief,
    };
    use shared::restart::Phase;

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

    fn agent(reachable: bool) -> AgentView {
        AgentView {
            name: "gpu-07".into(),
            url: "http://node7:7878/".into(),
            reachable,
            last_seen_ms: Some(1_000),
            sample_at_ms: Some(900),
            error: (!reachable).then(|| "connection refused".into()),
            hostname: Some("node7".into()),
            simulated: Some(true),
            version: Some("0.1.0".into()),
            gpus: vec![GpuBrief {
                index: 0,
                mem_used_bytes: Some(48 << 30),
                mem_total_bytes: Some(96 << 30),
                util_gpu_percent: Some(90),
                issues: vec!["GPU 0: XID error (XID 79)".into()],
            }],
            server: Some(ServerBrief {
                name: "sglang".into(),
                phase: Phase::Ready,
                generation: 3,
                flags: [("--tp".to_owned(), "8".to_owned())].into(),
                flagset: None,
                output_tok_s: Some(28.0),
            }),
        }
    }

    #[test]
    fn a_row_shows_the_agent_and_an_unreachable_one_says_since_when() {
        let live = row(&agent(true), 2_000);
        assert!(live.contains(r#"data-reachable="true""#), "{live}");
        assert!(live.contains(">simulated host<"), "{live}");
        assert!(live.contains(r#"href="/agents/gpu-07/""#), "{live}");
        assert!(live.contains(r#"style="height: 50%""#), "{live}");
        assert!(
            live.contains("GPU 0: 48.0 GiB / 96.0 GiB, util 90 %\nGPU 0: XID error"),
            "{live}"
        );
        assert!(live.contains(r#"data-phase="ready""#), "{live}");
        assert!(live.contains("sglang · gen 3"), "{live}");
        let gone = row(&agent(false), 13_000);
        assert!(gone.contains("fleet-gone"), "{gone}");
        assert!(gone.contains("unreachable · last seen 12 s ago"), "{gone}");
        assert!(gone.contains(r#"title="connection refused""#), "{gone}");
        assert!(gone.contains(">last known</span>"), "{gone}");
        let f = Fleet {
            at_ms: 0,
            agents: vec![agent(true), agent(false)],
        };
        assert!(fleet_markup(&f, 2_000).contains(">1 of 2 agents reachable<"));
    }
}
