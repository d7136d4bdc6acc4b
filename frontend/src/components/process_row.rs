//! One row of the process table: PID, start time, user, command line, GPUs,
//! GPU memory, SM use, RSS and role, following the latest sample.

use std::fmt::Write as _;

use leptos::prelude::*;
use shared::units::{fmt_bytes, fmt_percent};
use shared::{ProcessInfo, ProcessRole};

use crate::localtime;
use crate::markup::escape;
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

/// "0,1,2": the GPUs the process holds memory on.
fn gpu_list(p: &ProcessInfo) -> String {
    let mut indices: Vec<u32> = p.gpu_mem.iter().map(|g| g.gpu_index).collect();
    crate::sort::sort_dedup(&mut indices);
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
        .map(|g| {
            let mem = match g.used_bytes {
                Some(b) => format!("GPU {}: {}", g.gpu_index, fmt_bytes(b)),
                None => format!("GPU {}: not attributed by NVML", g.gpu_index),
            };
            match g.sm_percent {
                Some(sm) => format!("{mem}, SM {sm} %"),
                None => mem,
            }
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

/// A tooltip attribute, or nothing.
fn title(text: Option<String>) -> String {
    text.map(|t| format!(r#" title="{}""#, escape(&t)))
        .unwrap_or_default()
}

/// A byte count's `data-bytes` attribute, or nothing.
fn bytes_attr(bytes: Option<u64>) -> String {
    bytes
        .map(|b| format!(r#" data-bytes="{b}""#))
        .unwrap_or_default()
}

/// The row's cells as HTML text, for process `p` (all empty while it is not in
/// the sample); `hms` and `full` format a start time for the cell and its
/// tooltip.
fn cells_markup(
    key: RowKey,
    p: Option<&ProcessInfo>,
    hms: fn(u64) -> String,
    full: fn(u64) -> String,
) -> String {
    let cell = |f: &dyn Fn(&ProcessInfo) -> String| p.map_or_else(String::new, f);
    let tip = |f: &dyn Fn(&ProcessInfo) -> Option<String>| title(p.and_then(f));
    let started = tip(&|p| Some(p.started_at_ms.map_or_else(|| proc_reason(p), full)));
    let started_text = cell(&|p| p.started_at_ms.map_or_else(|| MISSING.to_owned(), hms));
    let user = tip(&|p| {
        Some(match (&p.user, p.uid) {
            (Some(u), Some(uid)) => format!("{u} (uid {uid})"),
            (None, Some(uid)) => format!("uid {uid}"),
            (Some(u), None) => u.clone(),
            (None, None) => proc_reason(p),
        })
    });
    let user_text = cell(&|p| match (&p.user, p.uid) {
        (Some(u), _) => u.clone(),
        (None, Some(uid)) => uid.to_string(),
        (None, None) => MISSING.to_owned(),
    });
    let cmd = tip(&|p| {
        Some(if p.cmdline.is_empty() {
            proc_reason(p)
        } else {
            p.cmdline.join(" ")
        })
    });
    let cmd_text = cell(&|p| {
        if p.role == ProcessRole::Outside {
            // Not a blank: a PID this drainwatch cannot look up.
            "host PID, outside this PID namespace".to_owned()
        } else if p.cmdline.is_empty() {
            MISSING.to_owned()
        } else {
            p.cmdline.join(" ")
        }
    });
    let mark = if key.depth > 0 { "└ " } else { "" };
    let mem = p.and_then(gpu_mem);
    let mem_text = cell(&|_| mem.map_or_else(|| MISSING.to_owned(), fmt_bytes));
    let rss = p.and_then(|p| p.rss_bytes);
    let rss_tip = tip(&|p| p.rss_bytes.is_none().then(|| proc_reason(p)));
    let rss_text = cell(&|_| rss.map_or_else(|| MISSING.to_owned(), fmt_bytes));
    let role = p.map_or("foreign", |p| p.role.as_str());
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<td class="num" data-testid="proc-pid">{}</td><td data-testid="proc-started"{started}>{}</td>"#,
        key.pid,
        escape(&started_text)
    );
    let _ = write!(
        out,
        r#"<td class="ellipsis" data-testid="proc-user"{user}>{}</td>"#,
        escape(&user_text)
    );
    let _ = write!(
        out,
        r#"<td class="cmd" data-testid="proc-cmd" style="padding-left: calc(0.5rem + {}ch);"{cmd}><span class="tree-mark">{mark}</span><span class="cmd-text">{}</span></td>"#,
        key.depth * 2,
        escape(&cmd_text)
    );
    let _ = write!(
        out,
        r#"<td data-testid="proc-gpus">{}</td><td class="num" data-testid="proc-gpu-mem"{}{}>{}</td>"#,
        cell(&gpu_list),
        bytes_attr(mem),
        tip(&|p| Some(gpu_mem_title(p))),
        mem_text
    );
    let sm = p.and_then(|p| p.gpu_mem.iter().filter_map(|g| g.sm_percent).max());
    let _ = write!(
        out,
        r#"<td class="num" data-testid="proc-sm"{}{}>{}</td>"#,
        sm.map(|v| format!(r#" data-percent="{v}""#))
            .unwrap_or_default(),
        tip(&|p| (!p.gpu_mem.is_empty()).then(|| gpu_mem_title(p))),
        cell(&|_| sm.map_or_else(|| MISSING.to_owned(), fmt_percent))
    );
    let _ = write!(
        out,
        r#"<td class="num" data-testid="proc-rss"{}{rss_tip}>{rss_text}</td><td><span class="role role-{role}" data-testid="proc-role">{role}</span></td>"#,
        bytes_attr(rss)
    );
    out
}

/// The row of one process.
#[component]
pub(crate) fn ProcessRow(
    /// The process (PID + start time) and its depth in the tree.
    key: RowKey,
) -> impl IntoView {
    let state = AppState::get();
    // The process in the latest sample.
    let with = move |f: &dyn Fn(Option<&ProcessInfo>) -> String| {
        state.latest.with(|l| {
            let p = l.as_ref().and_then(|s| {
                s.processes
                    .iter()
                    .find(|p| p.pid == key.pid && p.start_ticks == key.start_ticks)
            });
            f(p)
        })
    };
    let role = move || with(&|p| p.map_or("foreign", |p| p.role.as_str()).to_owned());

    view! {
        <tr
            class="proc-row"
            class:proc-server=move || role() == "server"
            class:proc-foreign=move || role() == "foreign"
            data-testid="process-row"
            data-pid=key.pid.to_string()
            data-role=role
            data-depth=key.depth.to_string()
            inner_html=move || with(&|p| cells_markup(key, p, localtime::hms, localtime::full))
        ></tr>
    }
}

#[cfg(test)]
mod tests {
    use shared::GpuMemUse;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn key(depth: u32) -> RowKey {
        RowKey {
            pid: 42,
            start_ticks: Some(7),
            depth,
        }
    }

    fn at(ms: u64) -> String {
        format!("t{ms}")
    }

    #[test]
    fn cells_of_a_full_process() {
        let mut p = ProcessInfo::without_proc(
            42,
            vec![
                GpuMemUse {
                    gpu_index: 1,
                    used_bytes: Some(512 * MIB),
                    sm_percent: Some(85),
                },
                GpuMemUse {
                    gpu_index: 0,
                    used_bytes: None,
                    sm_percent: None,
                },
            ],
            ProcessRole::Server,
            String::new(),
        );
        p.started_at_ms = Some(5);
        p.user = Some("ann".to_owned());
        p.uid = Some(1000);
        p.cmdline = vec!["python3".to_owned(), "<x>".to_owned()];
        p.rss_bytes = Some(5 * MIB);
        assert_eq!(
            cells_markup(key(1), Some(&p), at, at),
            concat!(
                r#"<td class="num" data-testid="proc-pid">42</td><td data-testid="proc-started" title="t5">t5</td>"#,
                r#"<td class="ellipsis" data-testid="proc-user" title="ann (uid 1000)">ann</td>"#,
                r#"<td class="cmd" data-testid="proc-cmd" style="padding-left: calc(0.5rem + 2ch);" title="python3 &lt;x&gt;"><span class="tree-mark">└ </span><span class="cmd-text">python3 &lt;x&gt;</span></td>"#,
                r#"<td data-testid="proc-gpus">0,1</td><td class="num" data-testid="proc-gpu-mem" data-bytes="536870912" title="GPU 1: 512 MiB, SM 85 %"#,
                "\nGPU 0: not attributed by NVML\">512 MiB</td>",
                r#"<td class="num" data-testid="proc-sm" data-percent="85" title="GPU 1: 512 MiB, SM 85 %"#,
                "\nGPU 0: not attributed by NVML\">85 %</td>",
                r#"<td class="num" data-testid="proc-rss" data-bytes="5242880">5 MiB</td><td><span class="role role-server" data-testid="proc-role">server</span></td>"#,
            )
        );
    }

    #[test]
    fn cells_say_why_proc_details_are_missing() {
        let p = ProcessInfo::without_proc(42, Vec::new(), ProcessRole::Foreign, "gone".to_owned());
        let html = cells_markup(key(0), Some(&p), at, at);
        assert!(html.contains(r#"data-testid="proc-started" title="gone">—</td>"#));
        assert!(html.contains(r#"data-testid="proc-user" title="gone">—</td>"#));
        assert!(html.contains(r#"<span class="tree-mark"></span><span class="cmd-text">—</span>"#));
        assert!(html.contains(r#"data-testid="proc-gpus">—</td>"#));
        assert!(html.contains(r#"data-testid="proc-gpu-mem" title="holds no GPU memory">—</td>"#));
        assert!(html.contains(r#"data-testid="proc-sm">—</td>"#));
        assert!(html.contains(r#"data-testid="proc-rss" title="gone">—</td>"#));
        assert!(html.contains("role role-foreign"));
        // A host PID from outside the namespace says what it is.
        let reason = shared::process::OUTSIDE_REASON.to_owned();
        let p = ProcessInfo::without_proc(4242, Vec::new(), ProcessRole::Outside, reason);
        let html = cells_markup(key(0), Some(&p), at, at);
        assert!(
            html.contains(r#"<span class="cmd-text">host PID, outside this PID namespace</span>"#),
            "{html}"
        );
        assert!(html.contains("role role-outside"), "{html}");
        // Not in the sample: empty cells, no tooltips.
        let none = cells_markup(key(0), None, at, at);
        assert!(!none.contains("title=") && !none.contains("data-bytes"));
        assert!(none.contains(r#"data-testid="proc-pid">42</td>"#));
    }
}
