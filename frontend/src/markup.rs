//! Read-only parts of the restart UI as HTML text: failure boxes, the kill
//! list, flag chips and diffs, the history's rows, a restart's facts and
//! transitions. Components set these as an element's content (`inner_html`).
//!
//! Why text and not components: these parts only display data and are redrawn
//! whole when it changes, and every distinct component tree costs the bundle
//! several kilobytes of generated code; as text they cost one function each,
//! and host tests can read exactly what the page will show. Everything that
//! comes from outside (commands, users, log lines, notes, flag names and
//! values) goes through [`escape`].

use std::fmt::Write as _;

use shared::flags::Flags;
use shared::restart::{Failure, RestartDetail, RestartSummary};
use shared::units::fmt_bytes;

use crate::flags::{compact, diff};
use crate::ops::{
    self, MISSING, failure_holders, failure_log, fmt_offset, fmt_secs, last_lines, truncate,
};

/// How many log lines a failure box shows.
pub(crate) const FAILURE_LOG_LINES: usize = 20;
/// Longest command a kill list shows before it is cut.
const KILL_COMMAND_CHARS: usize = 72;
/// Longest command a holders table shows before it is cut.
const HOLDER_COMMAND_CHARS: usize = 120;

pub(crate) use shared::html::{diff_lines, escape, phase_pill};

/// Lines of a log in a fixed-height box pinned to its newest line.
pub(crate) fn log_box(out: &mut String, lines: &[String], max: usize, testid: &str, rows: u32) {
    let text = if lines.is_empty() {
        "(no log lines)".to_owned()
    } else {
        escape(&last_lines(lines, max).join("\n"))
    };
    let _ = write!(
        out,
        r#"<div class="log-tail" data-testid="{testid}" style="height:calc({rows} * 1.35em + 0.9rem)"><pre class="log-text">{text}</pre></div>"#
    );
}

/// The box of one failure, with its `data-testid`; nothing without one.
pub(crate) fn failure_box(f: Option<&Failure>, testid: &str) -> String {
    f.map_or_else(String::new, |f| {
        format!(
            r#"<div class="failure-box" data-testid="{testid}" data-kind="{}">{}</div>"#,
            f.kind(),
            failure_content(f)
        )
    })
}

/// The content of a failure box: kind and one-line summary, the processes
/// holding GPU memory (ours or foreign), and the log lines it carries.
pub(crate) fn failure_content(f: &Failure) -> String {
    let mut out = String::new();
    let summary = escape(&f.summary());
    let _ = write!(
        out,
        r#"<div class="failure-head"><span class="failure-kind">{}</span><span class="failure-summary" data-testid="failure-summary" title="{summary}">{summary}</span></div>"#,
        f.kind().replace('_', " ")
    );
    if let Some(next) = f.needs_person() {
        let _ = write!(
            out,
            r#"<div class="failure-next" data-testid="failure-next"><span class="failure-next-label">needs a person</span> {}</div>"#,
            escape(&next)
        );
    }
    if let Some(said) = f.server_said() {
        let _ = write!(
            out,
            r#"<div class="failure-said" data-testid="failure-said"><span class="failure-said-label">the server said</span> <code>{}</code></div>"#,
            escape(&said)
        );
    }
    let holders = failure_holders(f);
    if !holders.is_empty() {
        out.push_str(
            r#"<table class="holders-table" data-testid="holders-table"><colgroup><col class="h-pid"><col class="h-user"><col class="h-cmd"><col class="h-gpu"><col class="h-mem"><col class="h-who"></colgroup><thead><tr><th class="num">PID</th><th>user</th><th>command</th><th class="num">GPU</th><th class="num">memory</th><th>ours / foreign</th></tr></thead><tbody>"#,
        );
        for h in holders {
            let command = if h.cmdline.is_empty() {
                MISSING.to_owned()
            } else {
                h.cmdline.join(" ")
            };
            let (role, who) = if h.ours {
                ("server", "ours")
            } else {
                ("foreign", "foreign")
            };
            let _ = write!(
                out,
                r#"<tr data-testid="holder-row" data-pid="{pid}" data-ours="{ours}"><td class="num">{pid}</td><td class="ellipsis">{user}</td><td class="cmd" title="{full}">{cut}</td><td class="num">GPU {gpu}</td><td class="num">{mem}</td><td><span class="role role-{role}">{who}</span></td></tr>"#,
                pid = h.pid,
                ours = h.ours,
                user = escape(h.user.as_deref().unwrap_or(MISSING)),
                full = escape(&command),
                cut = escape(&truncate(&command, HOLDER_COMMAND_CHARS)),
                gpu = h.gpu_index,
                mem = h.used_bytes.map_or_else(|| MISSING.to_owned(), fmt_bytes),
            );
        }
        out.push_str("</tbody></table>");
    }
    let log = failure_log(f);
    if !log.is_empty() {
        log_box(&mut out, log, FAILURE_LOG_LINES, "failure-log", 10);
    }
    out
}

/// The rows of a kill list.
pub(crate) fn kill_rows(list: &ops::KillList) -> String {
    let mut out = String::new();
    for v in &list.victims {
        let _ = write!(
            out,
            r#"<tr data-testid="kill-row" data-pid="{pid}"><td class="num">{pid}</td><td class="cmd" title="{full}">{cut}</td><td class="num">{mem}</td></tr>"#,
            pid = v.pid,
            full = escape(&v.command),
            cut = escape(&truncate(&v.command, KILL_COMMAND_CHARS)),
            mem = v.gpu_bytes.map_or_else(|| MISSING.to_owned(), fmt_bytes),
        );
    }
    out
}

/// Flag chips: "name = value" each.
pub(crate) fn flag_chips(flags: &Flags) -> String {
    if flags.is_empty() {
        return r#"<span class="srv-none">none set</span>"#.to_owned();
    }
    let mut out = String::new();
    for (name, value) in flags {
        let (n, v) = (escape(name), escape(value));
        let _ = write!(
            out,
            r#"<span class="flag-chip" data-testid="flag-chip" data-flag="{n}" title="{n} = {v}"><span class="chip-name">{n}</span> = <span class="chip-value">{v}</span></span>"#
        );
    }
    out
}

/// One row per operation, newest first: started (HH:MM:SS, the full date on
/// hover), who, kind, flag change, outcome (the failure on hover), durations.
/// `hms` and `full` write local times.
pub(crate) fn history_rows(
    list: &[RestartSummary],
    hms: impl Fn(u64) -> String,
    full: impl Fn(u64) -> String,
) -> String {
    if list.is_empty() {
        return r#"<tr class="proc-empty" data-testid="history-empty"><td colspan="10">no operation yet</td></tr>"#.to_owned();
    }
    let mut out = String::new();
    for s in list {
        let outcome = s.outcome.as_str();
        let tip = match (&s.failure, s.outcome, s.finished_at_ms) {
            (Some(f), _, _) => f.summary(),
            (None, shared::restart::Outcome::Running, _) => "still running".to_owned(),
            (None, _, Some(t)) => format!("finished {}", full(t)),
            (None, _, None) => String::new(),
        };
        let change = escape(&compact(&s.from_flags, &s.to_flags));
        let who = escape(&s.requested_by);
        let d = &s.durations;
        let _ = write!(
            out,
            r#"<tr class="history-row" data-testid="history-row" data-id="{id}" data-outcome="{outcome}" tabindex="0" title="open this operation's timeline"><td data-testid="history-started" title="{full}">{hms}</td><td class="ellipsis" data-testid="history-who" title="{who}">{who}</td><td data-testid="history-kind">{kind}</td><td class="cmd" data-testid="history-change" title="{change}">{change}</td><td><span class="outcome" data-testid="history-outcome" data-outcome="{outcome}" title="{tip}">{outcome}</span></td><td class="num" data-testid="history-drain">{drain}</td><td class="num" data-testid="history-kill">{kill}</td><td class="num" data-testid="history-verify">{verify}</td><td class="num" data-testid="history-warmup">{warmup}</td><td class="num" data-testid="history-total">{total}</td></tr>"#,
            id = s.id,
            full = escape(&full(s.started_at_ms)),
            hms = escape(&hms(s.started_at_ms)),
            kind = s.kind.as_str(),
            tip = escape(&tip),
            drain = fmt_secs(d.drain_ms),
            kill = fmt_secs(d.kill_ms),
            verify = fmt_secs(d.verify_ms),
            warmup = fmt_secs(d.warmup_ms),
            total = fmt_secs(d.total_ms),
        );
    }
    out
}

/// A restart's facts: when, by whom, the flag change and the durations.
pub(crate) fn detail_facts(
    d: &RestartDetail,
    hms: impl Fn(u64) -> String,
    full: impl Fn(u64) -> String,
) -> String {
    let s = &d.summary;
    let finished = s.finished_at_ms.map_or_else(
        || "still running".to_owned(),
        |t| format!("finished {}", hms(t)),
    );
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<div class="detail-facts" data-testid="detail-facts"><span title="{}">started {}</span><span>{}</span><span class="ellipsis">by {}</span></div><div class="flag-diff"><span class="dlg-label">change</span>{}</div><div class="detail-durations" data-testid="detail-durations">"#,
        escape(&full(s.started_at_ms)),
        escape(&hms(s.started_at_ms)),
        escape(&finished),
        escape(&s.requested_by),
        diff_lines(&diff(&s.from_flags, &s.to_flags), "no flag change"),
    );
    if let Some(c) = &d.containment {
        let _ = write!(
            out,
            r#"<div class="flag-diff" data-testid="detail-containment"><span class="dlg-label">containment</span><span class="ellipsis" title="{c}">{c}</span></div>"#,
            c = escape(c)
        );
    }
    let dur = &s.durations;
    for (label, ms) in [
        ("drain", dur.drain_ms),
        ("kill", dur.kill_ms),
        ("verify", dur.verify_ms),
        ("warm-up", dur.warmup_ms),
        ("total", dur.total_ms),
    ] {
        let _ = write!(
            out,
            r#"<span class="stat"><span class="stat-label">{label}</span><span class="stat-value num">{}</span></span>"#,
            fmt_secs(ms)
        );
    }
    out.push_str("</div>");
    out
}

/// The phase changes of a restart as offsets from its start.
pub(crate) fn transitions(d: &RestartDetail, full: impl Fn(u64) -> String) -> String {
    let start = d.summary.started_at_ms;
    let mut out = String::from(
        r#"<h3 class="dlg-h">transitions</h3><table class="proc-table transitions" data-testid="transitions"><colgroup><col class="t-at"><col class="t-phase"><col></colgroup><tbody>"#,
    );
    for t in &d.transitions {
        let _ = write!(
            out,
            r#"<tr data-testid="transition-row"><td class="num" title="{}">{}</td><td>"#,
            escape(&full(t.at_ms)),
            fmt_offset(t.at_ms, start)
        );
        phase_pill(&mut out, t.phase);
        let note = escape(&t.note);
        let _ = write!(
            out,
            r#"</td><td class="cmd" title="{note}">{note}</td></tr>"#
        );
    }
    if d.transitions.is_empty() {
        out.push_str(r#"<tr class="proc-empty"><td colspan="3">no transition yet</td></tr>"#);
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::{Durations, Holder, LaunchCause, OpKind, Outcome, Phase, Transition};

    use crate::flags::of_pairs as flags;

    fn summary(id: i64, outcome: Outcome, failure: Option<Failure>) -> RestartSummary {
        RestartSummary {
            id,
            kind: OpKind::Restart,
            requested_by: "127.0.0.1:5<1>".to_owned(),
            started_at_ms: 1_000,
            finished_at_ms: Some(9_100),
            from_flags: flags(&[("--tp", "8")]),
            to_flags: flags(&[("--tp", "4")]),
            outcome,
            failure,
            durations: Durations {
                drain_ms: Some(4_100),
                kill_ms: None,
                verify_ms: Some(60),
                warmup_ms: None,
                total_ms: Some(8_100),
            },
        }
    }

    fn clock(ms: u64) -> String {
        format!("t{ms}")
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn failure_with_holders_and_hostile_command() {
        let f = Failure::VerifyFailed {
            reason: "GPU 3 at 1.5 GiB".to_owned(),
            holders: vec![Holder {
                pid: 999,
                user: None,
                cmdline: vec![
                    "python3".to_owned(),
                    "<img src=x onerror=alert(1)>".to_owned(),
                ],
                gpu_index: 3,
                used_bytes: Some(1_610_612_736),
                ours: false,
            }],
        };
        let html = failure_content(&f);
        assert!(html.contains("verify failed: GPU 3 at 1.5 GiB"));
        assert!(html.contains(r#"data-testid="holder-row" data-pid="999" data-ours="false""#));
        assert!(html.contains("1.5 GiB"));
        assert!(html.contains(">foreign</span>"));
        assert!(!html.contains("<img"));
        assert!(html.contains("&lt;img"));
        assert!(!html.contains("failure-log"));
    }

    #[test]
    fn failure_with_a_log_keeps_its_last_lines() {
        let lines: Vec<String> = (0..30).map(|i| format!("line {i} <x>")).collect();
        let f = Failure::LaunchFailed {
            cause: LaunchCause::Oom,
            log_tail: lines,
        };
        let html = failure_content(&f);
        assert!(html.contains("launch failed: out of GPU memory"));
        assert!(html.contains(r#"data-testid="failure-log""#));
        assert!(html.contains("line 29 &lt;x&gt;") && html.contains("line 10 "));
        assert!(!html.contains("line 9 "));
        assert!(!html.contains("holders-table"));
    }

    #[test]
    fn failure_box_wraps_the_content_with_its_kind() {
        let f = Failure::LaunchFailed {
            cause: LaunchCause::Oom,
            log_tail: Vec::new(),
        };
        assert_eq!(
            failure_box(Some(&f), "server-failure"),
            format!(
                r#"<div class="failure-box" data-testid="server-failure" data-kind="{}">{}</div>"#,
                f.kind(),
                failure_content(&f)
            )
        );
        assert_eq!(failure_box(None, "server-failure"), "");
    }

    #[test]
    fn kill_rows_and_chips() {
        let list = ops::KillList {
            victims: vec![ops::Victim {
                pid: 7,
                command: "a".repeat(100),
                gpu_bytes: None,
            }],
            total_bytes: 0,
            gpus: 0,
        };
        let rows = kill_rows(&list);
        assert!(rows.contains(r#"data-pid="7""#));
        assert!(rows.contains("…</td>"));
        assert!(rows.contains(">—</td>"));
        let chips = flag_chips(&flags(&[("--tp", "8"), ("X", "\"1\"")]));
        assert_eq!(chips.matches(r#"data-testid="flag-chip""#).count(), 2);
        assert!(chips.contains("&quot;1&quot;"));
        assert!(flag_chips(&Flags::new()).contains("none set"));
    }

    #[test]
    fn diff_lines_or_none() {
        let changes = diff(&flags(&[("--tp", "8")]), &flags(&[("--tp", "4")]));
        let html = diff_lines(&changes, "none");
        assert!(html.contains(r#"data-flag="--tp""#));
        assert!(html.contains("--tp: 8 → 4"));
        assert!(diff_lines(&[], "no <change>").contains("no &lt;change&gt;"));
    }

    #[test]
    fn history_rows_show_every_column() {
        let failed = summary(
            12,
            Outcome::Failed,
            Some(Failure::ForeignHolders {
                holders: vec![Holder {
                    pid: 4242,
                    user: None,
                    cmdline: Vec::new(),
                    gpu_index: 0,
                    used_bytes: None,
                    ours: false,
                }],
            }),
        );
        let html = history_rows(&[failed, summary(11, Outcome::Running, None)], clock, clock);
        assert_eq!(html.matches(r#"data-testid="history-row""#).count(), 2);
        assert!(html.contains(r#"data-id="12" data-outcome="failed""#));
        assert!(html.contains(r#"data-id="11" data-outcome="running""#));
        assert!(html.contains("foreign process holds GPU memory (pid 4242)"));
        assert!(html.contains("still running"));
        assert!(html.contains(">t1000</td>"));
        assert!(html.contains("127.0.0.1:5&lt;1&gt;"));
        assert!(html.contains("--tp: 8 → 4"));
        assert!(
            html.contains(">4.1 s</td>")
                && html.contains(">—</td>")
                && html.contains(">8.1 s</td>")
        );
        assert!(history_rows(&[], clock, clock).contains("history-empty"));
    }

    #[test]
    fn detail_facts_and_transitions() {
        let d = RestartDetail {
            summary: summary(3, Outcome::Succeeded, None),
            transitions: vec![
                Transition {
                    at_ms: 1_001,
                    phase: Phase::Draining,
                    note: "SIGTERM to <group>".to_owned(),
                },
                Transition {
                    at_ms: 5_200,
                    phase: Phase::WarmingUp,
                    note: "spawned".to_owned(),
                },
            ],
            markers: Vec::new(),
            timeline: Vec::new(),
            log_tail: Vec::new(),
            containment: Some("cgroup /dw/<server-3>".to_owned()),
        };
        let facts = detail_facts(&d, clock, clock);
        assert!(
            facts.contains(">cgroup /dw/&lt;server-3&gt;</span>"),
            "{facts}"
        );
        assert!(facts.contains("started t1000") && facts.contains("finished t9100"));
        assert!(facts.contains("--tp: 8 → 4"));
        assert!(facts.contains(">4.1 s</span>"));
        let t = transitions(&d, clock);
        assert_eq!(t.matches(r#"data-testid="transition-row""#).count(), 2);
        assert!(t.contains("+4.2 s"));
        assert!(t.contains(r#"data-phase="warming_up">warming up</span>"#));
        assert!(t.contains("SIGTERM to &lt;group&gt;"));
        let mut empty = d.clone();
        empty.transitions.clear();
        assert!(transitions(&empty, clock).contains("no transition yet"));
    }

    #[test]
    fn log_boxes() {
        let mut out = String::new();
        log_box(&mut out, &[], 8, "x", 4);
        assert!(out.contains("(no log lines)") && out.contains(r#"data-testid="x""#));
    }
}
