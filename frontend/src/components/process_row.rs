//! One row of the process table: PID, start time, user, command line, GPUs,
//! GPU memory, RSS and role, following the latest sample.

use leptos::prelude::*;
use shared::units::fmt_bytes;
use shared::{ProcessInfo, ProcessRole};

use crate::localtime;
use crate::state::AppState;

/// Shown for a value `/proc` or NVML did not give.
const MISSING: &str = "—";

/// Which process a row shows and how deep it sits in the tree. A process is its
/// PID and start time; the depth is part of the key so a row is redrawn when its
/// parent appears or leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RowKey {
    pub(crate) pid: u32,
    pub(crate) start_ticks: Option<u64>,
    pub(crate) depth: u32,
}

fn role_name(role: ProcessRole) -> &'static str {
    match role {
        ProcessRole::Server => "server",
        ProcessRole::Foreign => "foreign",
    }
}

/// "0,1,2": the GPUs the process holds memory on.
fn gpu_list(p: &ProcessInfo) -> String {
    let mut indices: Vec<u32> = p.gpu_mem.iter().map(|g| g.gpu_index).collect();
    indices.sort_unstable();
    indices.dedup();
    if indices.is_empty() {
        return MISSING.to_owned();
    }
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// GPU memory summed over GPUs, or `None` when NVML attributed none of it.
fn gpu_mem(p: &ProcessInfo) -> Option<u64> {
    p.gpu_mem
        .iter()
        .any(|g| g.used_bytes.is_some())
        .then(|| p.gpu_mem_total_bytes())
}

/// Per GPU, what the process holds, for the tooltip.
fn gpu_mem_title(p: &ProcessInfo) -> String {
    if p.gpu_mem.is_empty() {
        return "holds no GPU memory".to_owned();
    }
    p.gpu_mem
        .iter()
        .map(|g| match g.used_bytes {
            Some(b) => format!("GPU {}: {}", g.gpu_index, fmt_bytes(b)),
            None => format!("GPU {}: not attributed by NVML", g.gpu_index),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why `/proc` details are missing, for tooltips.
fn proc_reason(p: &ProcessInfo) -> String {
    p.proc_error
        .clone()
        .unwrap_or_else(|| "not reported".to_owned())
}

/// The row of one process.
#[component]
pub(crate) fn ProcessRow(
    /// The process (PID + start time) and its depth in the tree.
    key: RowKey,
) -> impl IntoView {
    let state = AppState::get();
    let process = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref().and_then(|s| {
                s.processes
                    .iter()
                    .find(|p| p.pid == key.pid && p.start_ticks == key.start_ticks)
                    .cloned()
            })
        })
    });
    // Each cell: text, and a tooltip.
    let cell = move |f: fn(&ProcessInfo) -> String| {
        move || process.with(|p| p.as_ref().map_or_else(String::new, f))
    };
    let tip = move |f: fn(&ProcessInfo) -> Option<String>| {
        move || process.with(|p| p.as_ref().and_then(f))
    };
    let role = move || process.with(|p| p.as_ref().map_or("foreign", |p| role_name(p.role)));

    view! {
        <tr
            class="proc-row"
            class:proc-server=move || role() == "server"
            class:proc-foreign=move || role() == "foreign"
            data-testid="process-row"
            data-pid=key.pid.to_string()
            data-role=role
            data-depth=key.depth.to_string()
        >
            <td class="num" data-testid="proc-pid">{key.pid}</td>
            <td
                data-testid="proc-started"
                title=tip(|p| match p.started_at_ms {
                    Some(ms) => Some(localtime::full(ms)),
                    None => Some(proc_reason(p)),
                })
            >
                {cell(|p| p.started_at_ms.map_or_else(|| MISSING.to_owned(), localtime::hms))}
            </td>
            <td
                class="ellipsis"
                data-testid="proc-user"
                title=tip(|p| match (&p.user, p.uid) {
                    (Some(u), Some(uid)) => Some(format!("{u} (uid {uid})")),
                    (None, Some(uid)) => Some(format!("uid {uid}")),
                    (Some(u), None) => Some(u.clone()),
                    (None, None) => Some(proc_reason(p)),
                })
            >
                {cell(|p| match (&p.user, p.uid) {
                    (Some(u), _) => u.clone(),
                    (None, Some(uid)) => uid.to_string(),
                    (None, None) => MISSING.to_owned(),
                })}
            </td>
            <td
                class="cmd"
                data-testid="proc-cmd"
                style:padding-left=format!("calc(0.5rem + {}ch)", key.depth * 2)
                title=tip(|p| {
                    Some(if p.cmdline.is_empty() { proc_reason(p) } else { p.cmdline.join(" ") })
                })
            >
                <span class="tree-mark">{if key.depth > 0 { "└ " } else { "" }}</span>
                <span class="cmd-text">
                    {cell(|p| {
                        if p.cmdline.is_empty() { MISSING.to_owned() } else { p.cmdline.join(" ") }
                    })}
                </span>
            </td>
            <td data-testid="proc-gpus">
                {cell(gpu_list)}
            </td>
            <td
                class="num"
                data-testid="proc-gpu-mem"
                data-bytes=tip(|p| gpu_mem(p).map(|b| b.to_string()))
                title=tip(|p| Some(gpu_mem_title(p)))
            >
                {cell(|p| gpu_mem(p).map_or_else(|| MISSING.to_owned(), fmt_bytes))}
            </td>
            <td
                class="num"
                data-testid="proc-rss"
                data-bytes=tip(|p| p.rss_bytes.map(|b| b.to_string()))
                title=tip(|p| p.rss_bytes.is_none().then(|| proc_reason(p)))
            >
                {cell(|p| p.rss_bytes.map_or_else(|| MISSING.to_owned(), fmt_bytes))}
            </td>
            <td>
                <span class=move || format!("role role-{}", role()) data-testid="proc-role">
                    {role}
                </span>
            </td>
        </tr>
    }
}
