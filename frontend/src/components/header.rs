//! The top bar: product name, host, drainwatch's version, NVML's status, the
//! managed server, the "simulated host" pill when the numbers are not from a
//! real GPU, and the connection badge.

use leptos::prelude::*;
use shared::restart::EngineIdentity;
use shared::{HostInfo, NvmlStatus, ProcessRole, Sample};

use crate::components::conn_badge::ConnBadge;
use crate::markup::escape;
use crate::state::AppState;

/// "12.8" from NVML's CUDA driver version encoding (12080).
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// What the NVML status shows: text, tooltip, `data-state`.
fn nvml_text(nvml: Option<&NvmlStatus>) -> (String, String, &'static str) {
    match nvml {
        None => (
            "NVML …".to_owned(),
            "waiting for the server".to_owned(),
            "unknown",
        ),
        Some(NvmlStatus::Ok {
            library,
            driver_version,
            nvml_version,
            cuda_driver_version,
            ..
        }) => {
            let mut parts = Vec::new();
            if let Some(d) = driver_version {
                parts.push(format!("driver {d}"));
            }
            if let Some(c) = cuda_driver_version {
                parts.push(format!("CUDA {}", cuda_version(*c)));
            }
            if parts.is_empty() {
                parts.push("NVML ok".to_owned());
            }
            // The NVML version and library are for the curious: in the tooltip,
            // so the bar fits one line next to presence and the user.
            let nvml = nvml_version.as_deref().unwrap_or("?");
            (
                parts.join(" · "),
                format!("NVML {nvml}, library: {library}"),
                "ok",
            )
        }
        Some(NvmlStatus::Unavailable { library, reason }) => (
            format!("NVML unavailable: {reason}"),
            format!("NVML library: {library}\n{reason}"),
            "unavailable",
        ),
    }
}

/// What the server status shows: text, tooltip, `data-state`, and the root's
/// PID when a server is found.
fn server_text(
    host: Option<&HostInfo>,
    latest: Option<&Sample>,
) -> (String, String, &'static str, Option<u32>) {
    let Some(host) = host else {
        return (
            "server …".to_owned(),
            "waiting for the server".to_owned(),
            "unknown",
            None,
        );
    };
    if let Some(server) = latest.and_then(|s| s.server) {
        let pid = server.root.pid;
        let port = server.port;
        let members = latest.map_or(0, |s| {
            s.processes
                .iter()
                .filter(|p| p.role == ProcessRole::Server)
                .count()
        });
        let tip = format!(
            "managed server: pid {pid} listens on :{port}; it and its descendants \
             ({members} listed) are the server's processes"
        );
        return (
            format!("server :{port} · pid {pid}"),
            tip,
            "running",
            Some(pid),
        );
    }
    match host.server_port {
        Some(port) if latest.is_none() => (
            format!("server :{port} …"),
            "waiting for the first sample".to_owned(),
            "unknown",
            None,
        ),
        Some(port) => (
            format!("no server on :{port}"),
            format!("no process listens on :{port}: every process is foreign"),
            "absent",
            None,
        ),
        None => (
            "no server port configured".to_owned(),
            "drainwatch was started without --server-port: every process is foreign".to_owned(),
            "unconfigured",
            None,
        ),
    }
}

/// The bar's facts about the host, as HTML text: name, host, drainwatch's
/// version, NVML's status (see [`nvml_text`]).
fn facts_markup(host: Option<&HostInfo>) -> String {
    let hostname = host.map_or("…", |h| h.hostname.as_str());
    let version = host.map_or_else(String::new, |h| format!("v{}", h.version));
    let (text, tip, state) = nvml_text(host.map(|h| &h.nvml));
    let error = if state == "unavailable" {
        " nvml-error"
    } else {
        ""
    };
    // In a container without the host's PIDs, NVML's PIDs name no process
    // here: said where every page shows it.
    let pidns = if host.is_some_and(|h| h.own_pid_namespace) {
        format!(
            r#"<span class="pidns-warning" data-testid="pid-namespace" title="{}">no host PIDs</span>"#,
            escape(shared::process::OUTSIDE_NOTE)
        )
    } else {
        String::new()
    };
    format!(
        concat!(
            r#"<span class="brand">drainwatch</span>"#,
            r#"<span class="host" data-testid="hostname" title="host">{}</span>"#,
            r#"<span class="version" data-testid="version" title="drainwatch version">{}</span>"#,
            r#"<span class="nvml{}" data-testid="nvml-status" data-state="{}" title="{}">{}</span>"#,
            "{}",
        ),
        escape(hostname),
        escape(&version),
        error,
        state,
        escape(&tip),
        escape(&text),
        pidns
    )
}

/// What is real and what is simulated, as HTML text: the GPUs (NVML is
/// the simulated host) and the model server (it says it is drainwatch's
/// simulated one, or it is a real engine that named itself). A real engine
/// beside simulated GPUs has real tok/s, latencies and logs, and the page
/// says so rather than calling the whole host simulated.
fn reality_markup(gpus_simulated: bool, engine: Option<&EngineIdentity>) -> String {
    let mut out = String::new();
    let real = engine.filter(|e| !e.simulated);
    if gpus_simulated {
        let (text, tip) = if real.is_some() {
            (
                "simulated GPUs",
                "NVML is drainwatch's simulated host: the GPUs, their memory and their processes are made up; the model server is real",
            )
        } else {
            (
                "simulated host",
                "NVML is drainwatch's simulated host: GPUs, memory and processes are made up",
            )
        };
        out.push_str(&format!(
            r#"<span class="simulated" data-testid="simulated-banner" title="{}">{}</span>"#,
            escape(tip),
            escape(text)
        ));
    }
    match engine {
        Some(e) if e.simulated => out.push_str(
            r#"<span class="simulated" data-testid="engine-pill" data-real="false" title="the model server is drainwatch's simulated server: its tok/s, latencies and answers are made up">simulated server</span>"#,
        ),
        Some(e) => {
            let version = e
                .version
                .as_deref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            out.push_str(&format!(
                r#"<span class="engine-real" data-testid="engine-pill" data-real="true" title="{}">real {}</span>"#,
                escape(&format!(
                    "the model server is a real {}{version}: its tok/s, latencies, answers and log lines are its own",
                    e.engine
                )),
                escape(&e.engine)
            ));
        }
        None => {}
    }
    out
}

/// The server status as HTML text, from [`server_text`]'s answer.
fn status_markup((text, tip, state, pid): &(String, String, &'static str, Option<u32>)) -> String {
    let pid = pid
        .map(|p| format!(r#" data-pid="{p}""#))
        .unwrap_or_default();
    format!(
        r#"<span class="server-status" data-testid="server-status" data-state="{state}"{pid} title="{}"><span class="server-dot"></span><span class="server-text">{}</span></span>"#,
        escape(tip),
        escape(text)
    )
}

/// The page's top bar.
#[component]
pub(crate) fn Header() -> impl IntoView {
    let state = AppState::get();
    let server = Memo::new(move |_| {
        state
            .host
            .with(|h| state.latest.with(|l| server_text(h.as_ref(), l.as_ref())))
    });
    // Who this page is (with authentication) and who else is here.
    let me = Memo::new(move |_| {
        state.session.with(|s| {
            s.as_ref()
                .filter(|s| s.auth)
                .map(|s| (s.name.clone().unwrap_or_default(), s.role.as_str()))
        })
    });
    let presence = Memo::new(move |_| {
        state.presence.with(|p| {
            let tip = p
                .iter()
                .map(|c| {
                    let tabs = if c.sockets == 1 { "tab" } else { "tabs" };
                    format!("{} · {} · {} {tabs}", c.who, c.role.as_str(), c.sockets)
                })
                .collect::<Vec<_>>()
                .join("\n");
            (format!("{} connected", p.len()), tip)
        })
    });
    let reality = Memo::new(move |_| {
        let gpus = state
            .host
            .with(|h| h.as_ref().is_some_and(|h| h.nvml.is_simulated()));
        state
            .server
            .with(|s| reality_markup(gpus, s.as_ref().and_then(|s| s.engine.as_ref())))
    });
    let logout = move |_| {
        leptos::task::spawn_local(async move {
            let _ = crate::api::logout().await;
            let _ = window().location().replace("/login");
        });
    };

    view! {
        <header class="topbar" data-testid="header">
            {crate::base::agent().map(|name| view! {
                <a class="via-hub" data-testid="via-hub" href="/fleet" title="this host's dashboard, through the fleet hub">
                    "‹ fleet / " {name}
                </a>
            })}
            // Both wrappers are `display: contents`: their spans are the bar's items.
            <span class="topbar-facts" inner_html=move || state.host.with(|h| facts_markup(h.as_ref()))></span>
            <span class="topbar-facts" inner_html=move || server.with(status_markup)></span>
            <span class="topbar-right">
                <span class="simulated-slot" inner_html=move || reality.get()></span>
                <span class="presence num" data-testid="presence" title=move || presence.with(|p| p.1.clone())>
                    {move || presence.with(|p| p.0.clone())}
                </span>
                {move || {
                    me.get()
                        .map(|(name, role)| {
                            view! {
                                <span class="user" data-testid="user" data-role=role title="logged in as">
                                    {format!("{name} · {role}")}
                                </span>
                                <button class="btn btn-small" data-testid="logout" on:click=logout>
                                    "Log out"
                                </button>
                            }
                        })
                }}
                <ConnBadge />
            </span>
        </header>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ProcId, ServerIdentity};

    #[test]
    fn the_bar_says_which_part_is_simulated_and_which_is_real() {
        let engine = |simulated| EngineIdentity {
            engine: "llama.cpp".into(),
            version: Some("b11434-x".into()),
            simulated,
        };
        // A real engine on simulated GPUs: the GPUs are simulated, the engine real.
        let m = reality_markup(true, Some(&engine(false)));
        assert!(
            m.contains(">simulated GPUs<") && m.contains(">real llama.cpp<"),
            "{m}"
        );
        assert!(m.contains("real llama.cpp b11434-x: its tok/s"), "{m}");
        // The simulated server on the simulated host: all of it is made up.
        let m = reality_markup(true, Some(&engine(true)));
        assert!(
            m.contains(">simulated host<") && m.contains(">simulated server<"),
            "{m}"
        );
        assert!(!m.contains(">real "), "{m}");
        // Real GPUs and a real engine: nothing to warn of, the engine named.
        let m = reality_markup(false, Some(&engine(false)));
        assert!(
            !m.contains("simulated") && m.contains(">real llama.cpp<"),
            "{m}"
        );
        // No server answering: only the GPUs are spoken of.
        assert_eq!(reality_markup(false, None), "");
    }

    fn host(server_port: Option<u16>) -> HostInfo {
        HostInfo {
            hostname: "h".to_owned(),
            version: "0".to_owned(),
            nvml: NvmlStatus::Unavailable {
                library: "x".to_owned(),
                reason: "y".to_owned(),
            },
            sample_interval_ms: 1000,
            history_ms: 0,
            server_port,
            own_pid_namespace: false,
        }
    }

    fn sample(server: Option<ServerIdentity>) -> Sample {
        Sample {
            seq: 1,
            at_ms: 0,
            took_us: 0,
            gpus: Vec::new(),
            processes: Vec::new(),
            server,
            processes_error: None,
        }
    }

    #[test]
    fn facts_and_status_as_markup() {
        assert_eq!(
            facts_markup(None),
            concat!(
                r#"<span class="brand">drainwatch</span>"#,
                r#"<span class="host" data-testid="hostname" title="host">…</span>"#,
                r#"<span class="version" data-testid="version" title="drainwatch version"></span>"#,
                r#"<span class="nvml" data-testid="nvml-status" data-state="unknown" title="waiting for the server">NVML …</span>"#,
            )
        );
        let mut h = host(None);
        h.hostname = "<h>".to_owned();
        let html = facts_markup(Some(&h));
        assert!(html.contains(r#"title="host">&lt;h&gt;</span>"#));
        assert!(html.contains(r#"title="drainwatch version">v0</span>"#));
        assert!(html.contains(
            r#"<span class="nvml nvml-error" data-testid="nvml-status" data-state="unavailable" title="NVML library: x
y">NVML unavailable: y</span>"#
        ));
        let status = (
            "server :1 · pid 2".to_owned(),
            "tip".to_owned(),
            "running",
            Some(2),
        );
        assert_eq!(
            status_markup(&status),
            r#"<span class="server-status" data-testid="server-status" data-state="running" data-pid="2" title="tip"><span class="server-dot"></span><span class="server-text">server :1 · pid 2</span></span>"#
        );
        assert!(
            !status_markup(&(String::new(), String::new(), "absent", None)).contains("data-pid")
        );
    }

    #[test]
    fn server_status_in_every_case() {
        let text = |h: Option<&HostInfo>, s: Option<&Sample>| {
            let (text, _, state, pid) = server_text(h, s);
            (text, state, pid)
        };
        assert_eq!(text(None, None), ("server …".to_owned(), "unknown", None));
        let found = sample(Some(ServerIdentity {
            root: ProcId {
                pid: 27159,
                start_ticks: 5,
            },
            port: 30000,
        }));
        assert_eq!(
            text(Some(&host(Some(30000))), Some(&found)),
            (
                "server :30000 · pid 27159".to_owned(),
                "running",
                Some(27159)
            )
        );
        assert_eq!(
            text(Some(&host(Some(30000))), Some(&sample(None))),
            ("no server on :30000".to_owned(), "absent", None)
        );
        assert_eq!(
            text(Some(&host(Some(30000))), None),
            ("server :30000 …".to_owned(), "unknown", None)
        );
        assert_eq!(
            text(Some(&host(None)), Some(&sample(None))),
            ("no server port configured".to_owned(), "unconfigured", None)
        );
    }
}
