//! The hub's page (`/fleet`): every agent as a row of fixed height — its
//! name and host, whether the hub reaches it (and, when not, since when it was
//! last heard from), its GPUs compact, its server's phase and flags, its live
//! tok/s. Polls the hub's `/api/fleet` once a second. An agent the hub cannot
//! reach keeps its last known state, greyed and said to be old: never shown
//! as idle.

use std::fmt::Write as _;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos_use::use_interval_fn;
use shared::fleet::{AgentView, Fleet};
use shared::units::{fmt_age_ms, fmt_bytes, fmt_bytes_of, fmt_tok_s, fraction};

use crate::localtime;
use crate::markup::escape;

/// How often the page asks the hub.
const POLL_MS: u64 = 1_000;

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
pub(crate) fn fleet_markup(f: &Fleet, now_ms: u64) -> String {
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

/// Reads the hub's fleet into `fleet`, or says in `error` why it could not.
fn fetch_fleet(fleet: RwSignal<Option<Fleet>>, error: RwSignal<Option<String>>) {
    spawn_local(async move {
        let got = async {
            let resp = gloo_net::http::Request::get("/api/fleet")
                .send()
                .await
                .map_err(|e| format!("could not reach the hub: {e}"))?;
            let text = resp.text().await.map_err(|e| e.to_string())?;
            crate::json::from_str::<Fleet>(&text).map_err(|e| e.to_string())
        }
        .await;
        match got {
            Ok(f) => {
                fleet.try_set(Some(f));
                error.try_set(None);
            }
            Err(e) => {
                error.try_set(Some(e));
            }
        }
    });
}

/// A restart: the typed name and flag changes beside the button that was
/// clicked go to the hub; what it answered is said in `said`.
fn restart_clicked(
    ev: &web_sys::MouseEvent,
    said: RwSignal<String>,
    ask_records: impl Fn() + Copy + 'static,
) {
    use wasm_bindgen::JsCast;
    let Some(el) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .and_then(|t| t.closest("[data-act=coord-restart]").ok().flatten())
    else {
        return;
    };
    let target = el.get_attribute("data-target").unwrap_or_default();
    let typed = document()
        .query_selector(&format!(".coord-confirm[data-target='{target}']"))
        .ok()
        .flatten()
        .and_then(|i| i.dyn_into::<web_sys::HtmlInputElement>().ok());
    let confirm = typed.as_ref().map(|i| i.value()).unwrap_or_default();
    let flags_input = document()
        .query_selector(&format!(".coord-flags[data-target='{target}']"))
        .ok()
        .flatten()
        .and_then(|i| i.dyn_into::<web_sys::HtmlInputElement>().ok());
    let flags = flags_input.as_ref().map(|i| i.value()).unwrap_or_default();
    spawn_local(async move {
        match crate::api::coord_restart(&target, &confirm, &flags).await {
            Ok(()) => {
                said.set(format!("{target}: restart begun"));
                // Typed for this restart: the next one starts afresh.
                for i in [typed, flags_input].into_iter().flatten() {
                    i.set_value("");
                }
            }
            Err(e) => said.set(format!("{target}: {e}")),
        }
        ask_records();
    });
}

/// The hub's whole page.
#[component]
pub(crate) fn FleetApp() -> impl IntoView {
    let fleet = RwSignal::new(None::<Fleet>);
    let error = RwSignal::new(None::<String>);
    let now = RwSignal::new(localtime::now_ms());
    let ask = move || fetch_fleet(fleet, error);
    // The coordinated restarts' panel, as the hub renders it: its controls
    // and its records apart, each replaced only when it changed (what is
    // typed in the controls stays while the records move).
    let controls = RwSignal::new(String::new());
    let history = RwSignal::new(String::new());
    let said = RwSignal::new(String::new());
    spawn_local(async move {
        match crate::api::session().await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let _ = window().location().replace("/login");
            }
            Err(e) => said.set(e),
        }
    });
    let ask_records = move || {
        spawn_local(async move {
            if let Ok(html) = crate::api::coord_panel().await {
                let (c, h) = html.split_once("<!--records-->").unwrap_or((&html, ""));
                for (signal, new) in [(controls, c), (history, h)] {
                    if signal.with_untracked(|old| old != new) {
                        signal.try_set(new.to_owned());
                    }
                }
            }
        });
    };
    let ask = move || {
        ask();
        ask_records();
    };
    ask();
    use_interval_fn(
        move || {
            now.set(localtime::now_ms());
            ask();
        },
        POLL_MS,
    );
    document().set_title("fleet · drainwatch");
    let on_click = move |ev: web_sys::MouseEvent| restart_clicked(&ev, said, ask_records);
    view! {
        <header class="fleet-head">
            <span class="brand">"drainwatch"</span>
            <span class="fleet-title">"fleet"</span>
            <span class="fleet-error" data-testid="fleet-error">{move || error.get().unwrap_or_default()}</span>
        </header>
        <main
            class="fleet"
            data-testid="fleet"
            inner_html=move || {
                fleet.with(|f| f.as_ref().map(|f| fleet_markup(f, now.get() as u64)).unwrap_or_default())
            }
        ></main>
        <section class="coord" data-testid="coord" on:click=on_click>
            <div inner_html=move || controls.get()></div>
            <div class="coord-said" data-testid="coord-said">{move || said.get()}</div>
            <div inner_html=move || history.get()></div>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use shared::fleet::{GpuBrief, ServerBrief};
    use shared::restart::Phase;

    use super::*;

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
