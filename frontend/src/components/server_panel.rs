//! The managed server at the top of the page: name, phase, generation, uptime,
//! root PID, port and flags; the running operation's progress; the last
//! failure; a server waiting to be adopted; the buttons that open the
//! operation dialog; live throughput and benchmarks (see
//! [`crate::components::bench_bar`]); and the newest log lines behind a
//! disclosure.

use leptos::prelude::*;
use shared::restart::{Containment, OpKind, Phase, ServerStatus};
use shared::units::fmt_age_ms;

use crate::components::bench_bar::BenchBar;
use crate::components::log_tail::LogTail;
use crate::components::phase_badge::PhaseBadge;
use crate::components::stage_progress::StageProgress;
use crate::markup::{escape, failure_box, flag_chips};
use crate::ops::{MISSING, can_adopt, can_restart, can_start, can_stop, last_lines};
use crate::state::{AppState, DialogOpen};

/// How many log lines the disclosure shows.
const LOG_LINES: usize = 8;

/// The facts of the head line that change rarely (not the clock-driven uptime).
#[derive(Debug, Clone, PartialEq)]
struct Head {
    name: String,
    phase: Phase,
    generation: u64,
    pid: Option<u32>,
    port: u16,
    started_at_ms: Option<u64>,
    restart: bool,
    stop: bool,
    start: bool,
    adopt: Option<(u16, u32)>,
}

fn head(s: &ServerStatus) -> Head {
    Head {
        name: s.name.clone(),
        phase: s.phase,
        generation: s.generation,
        pid: s.root.map(|r| r.pid),
        port: s.port,
        started_at_ms: s.started_at_ms,
        restart: can_restart(s),
        stop: can_stop(s),
        start: can_start(s),
        adopt: can_adopt(s)
            .then(|| s.adoptable.map(|a| (s.port, a.pid)))
            .flatten(),
    }
}

/// Whether the server counts as up (its uptime is shown).
fn is_up(phase: Phase) -> bool {
    !matches!(phase, Phase::Stopped | Phase::Failed | Phase::Crashed)
}

/// How the server is kept apart from everything else, as HTML text; the
/// line is "degraded" when containment is weaker than the newest kernels give
/// (no cgroup leaves, no pidfds, a fallback for what the kernel lacks) or an
/// adopted server is left outside drainwatch's cgroup.
fn containment_markup(s: Option<&ServerStatus>) -> String {
    let Some((s, line)) = s.and_then(|s| Some((s, s.containment_line()?))) else {
        return String::new();
    };
    let fallback = s.containment.as_ref().is_some_and(Containment::degraded);
    let degraded = fallback || (s.origin.is_some() && !s.server_contained);
    let line = escape(&line);
    format!(
        r#"<div class="srv-contain" data-testid="server-containment" data-degraded="{degraded}"><span class="srv-label">containment</span><span class="srv-contain-text" title="{line}">{line}</span></div>"#
    )
}

/// A button that opens the operation dialog for `kind`, pressable while
/// `enabled` says so.
fn open_button(
    kind: OpKind,
    testid: &'static str,
    text: &'static str,
    enabled: impl Fn() -> bool + Send + Sync + 'static,
) -> impl IntoView {
    let state = AppState::get();
    view! {
        <button
            class="btn"
            data-testid=testid
            disabled=move || !enabled()
            on:click=move |_| {
                if let Some(status) = state.server.get_untracked() {
                    state.dialog.set(Some(DialogOpen::new(kind, status)));
                }
            }
        >
            {text}
        </button>
    }
}

/// The managed server's panel. Rendered only when drainwatch manages a server.
#[component]
pub(crate) fn ServerPanel() -> impl IntoView {
    let state = AppState::get();
    let head = Memo::new(move |_| state.server.with(|s| s.as_ref().map(head)));
    let flags = Memo::new(move |_| {
        state
            .server
            .with(|s| s.as_ref().map(|s| s.flags.clone()).unwrap_or_default())
    });
    let log = Memo::new(move |_| {
        state.server.with(|s| {
            s.as_ref()
                .map(|s| last_lines(&s.log_tail, LOG_LINES).to_vec())
                .unwrap_or_default()
        })
    });
    let field =
        move |f: fn(&Head) -> String| move || head.with(|h| h.as_ref().map_or_else(String::new, f));
    let phase =
        Signal::derive(move || head.with(|h| h.as_ref().map_or(Phase::Stopped, |h| h.phase)));
    let uptime = move || {
        head.with(|h| match h {
            Some(Head {
                started_at_ms: Some(t),
                phase,
                ..
            }) if is_up(*phase) => {
                format!(
                    "up {}",
                    fmt_age_ms((state.now_ms.get() - *t as f64).max(0.0) as u64)
                )
            }
            _ => format!("up {MISSING}"),
        })
    };
    let enabled = move |f: fn(&Head) -> bool| move || head.with(|h| h.as_ref().is_some_and(f));

    view! {
        <section class="panel server-panel" data-testid="server-panel" aria-label="managed server">
            <div class="srv-head">
                <h2 class="srv-name" data-testid="server-name">{field(|h| h.name.clone())}</h2>
                <PhaseBadge phase=phase testid="server-phase" />
                <span class="srv-fact num" data-testid="server-generation" title="generation: one more with every launch or adoption">
                    {field(|h| format!("gen {}", h.generation))}
                </span>
                <span class="srv-fact num" data-testid="server-uptime" title="since the server was launched or adopted">
                    {uptime}
                </span>
                <span class="srv-fact num" data-testid="server-pid" title="the server's root process">
                    {field(|h| format!("pid {}", h.pid.map_or_else(|| MISSING.to_owned(), |p| p.to_string())))}
                </span>
                <span class="srv-fact num" data-testid="server-port" title="the port the server listens on">
                    {field(|h| format!("port :{}", h.port))}
                </span>
                {move || state.may_operate().then(|| view! {
                    <span class="srv-actions">
                        {open_button(OpKind::Restart, "open-restart", "Restart…", enabled(|h| h.restart))}
                        {open_button(OpKind::Stop, "open-stop", "Stop…", enabled(|h| h.stop))}
                        {open_button(OpKind::Start, "open-start", "Start…", enabled(|h| h.start))}
                    </span>
                })}
            </div>
            <div class="srv-flags" data-testid="server-flags">
                <span class="srv-label">"flags"</span>
                <span class="srv-chips" inner_html=move || flags.with(flag_chips)></span>
            </div>
            // `display: contents`: the line is the panel's item.
            <div class="srv-contain-slot" inner_html=move || state.server.with(|s| containment_markup(s.as_ref()))></div>
            <StageProgress />
            <BenchBar />
            {move || {
                head.with(|h| h.as_ref().and_then(|h| h.adopt))
                    .map(|(port, pid)| {
                        view! {
                            <div class="srv-adopt" data-testid="server-adoptable">
                                <span>
                                    {format!(
                                        "a server is running on :{port} (pid {pid}) that drainwatch does not manage",
                                    )}
                                </span>
                                {move || state.may_operate().then(|| open_button(OpKind::Adopt, "open-adopt", "Adopt…", || true))}
                            </div>
                        }
                    })
            }}
            <div
                class="failure-slot"
                inner_html=move || {
                    state.server.with(|s| {
                        failure_box(s.as_ref().and_then(|s| s.failure.as_ref()), "server-failure")
                    })
                }
            ></div>
            <details class="srv-log" data-testid="server-log">
                <summary>{move || format!("log · last {} lines", log.with(Vec::len))}</summary>
                <LogTail lines=log max=LOG_LINES testid="server-log-tail" rows=8 />
            </details>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use shared::ServerMsg;
    use shared::restart::ContainmentKind;

    use super::*;

    fn status() -> ServerStatus {
        let msg: ServerMsg =
            serde_json::from_str(include_str!("../../../shared/tests/fixtures/server.json"))
                .expect("fixture");
        match msg {
            ServerMsg::Server(s) => s,
            other => panic!("not a status: {other:?}"),
        }
    }

    #[test]
    fn containment_line_says_when_it_is_degraded() {
        let s = status();
        let line = escape(&s.containment_line().expect("a line"));
        assert_eq!(
            containment_markup(Some(&s)),
            format!(
                r#"<div class="srv-contain" data-testid="server-containment" data-degraded="false"><span class="srv-label">containment</span><span class="srv-contain-text" title="{line}">{line}</span></div>"#
            )
        );
        let mut fallback = s.clone();
        if let Some(c) = fallback.containment.as_mut() {
            c.kind = ContainmentKind::ProcessGroup;
        }
        assert!(containment_markup(Some(&fallback)).contains(r#"data-degraded="true""#));
        let mut outside = s.clone();
        outside.server_contained = false;
        assert!(containment_markup(Some(&outside)).contains(r#"data-degraded="true""#));
        let mut none = s;
        none.containment = None;
        assert_eq!(containment_markup(Some(&none)), "");
        assert_eq!(containment_markup(None), "");
    }
}
