//! The process table: every process of the latest sample, parents before their
//! children and children indented; the sample's process error above it; a line
//! when there is no process.

use std::collections::HashSet;

use leptos::prelude::*;
use shared::ProcessRole;
use shared::tree::tree_depths;

use crate::components::process_row::{ProcessRow, RowKey};
use crate::state::AppState;

/// Rows whose space the table keeps once it has shown them.
const MAX_RESERVED_ROWS: usize = 20;
/// A row's height (`.proc-table td`: 2rem of the 14 px root, and its border), in CSS pixels.
const ROW_PX: f64 = 29.0;

/// The table's title, how many processes of each role, and why the process
/// list could not be read, when it could not.
fn head(state: AppState) -> impl IntoView {
    let counts = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref().map_or((0, 0, 0), |s| {
                let of = |role| s.processes.iter().filter(|p| p.role == role).count();
                (
                    of(ProcessRole::Server),
                    of(ProcessRole::Foreign),
                    of(ProcessRole::Outside),
                )
            })
        })
    });
    let error = Memo::new(move |_| {
        state
            .latest
            .with(|l| l.as_ref().and_then(|s| s.processes_error.clone()))
    });
    view! {
    <div class="proc-head">
        <h2 class="proc-title">"processes"</h2>
        <span class="proc-counts num" data-testid="process-counts">
            {move || {
                let (server, foreign, outside) = counts.get();
                if outside == 0 {
                    format!("{server} server · {foreign} foreign")
                } else {
                    format!("{server} server · {foreign} foreign · {outside} host PIDs outside")
                }
            }}
        </span>
        <span class="proc-error-slot">
            {move || {
                error
                    .get()
                    .map(|text| {
                        view! {
                            <span
                                class="proc-error"
                                data-testid="processes-error"
                                title=text.clone()
                            >
                                {text.clone()}
                            </span>
                        }
                    })
            }}
        </span>
    </div>
    }
}

/// All processes of the latest sample.
#[component]
pub(crate) fn ProcessTable() -> impl IntoView {
    let state = AppState::get();
    let rows = Memo::new(move |_| {
        state.latest.with(|l| {
            let Some(sample) = l else {
                return Vec::new();
            };
            let depths = tree_depths(&sample.processes);
            let mut seen = HashSet::new();
            sample
                .processes
                .iter()
                .zip(depths)
                .map(|(p, depth)| RowKey {
                    pid: p.pid,
                    start_ticks: p.start_ticks,
                    depth,
                })
                // <For> needs unique keys; a repeated process is shown once.
                .filter(|k| seen.insert((k.pid, k.start_ticks)))
                .collect::<Vec<_>>()
        })
    });
    // The most rows seen (up to 20) keep their space: a server's processes
    // that go and come back with each restart never move what is below.
    let reserved = Memo::new(move |prev: Option<&usize>| {
        rows.with(Vec::len)
            .min(MAX_RESERVED_ROWS)
            .max(prev.copied().unwrap_or(0))
    });
    let empty_text = move || {
        if state.latest.with(Option::is_none) {
            "waiting for data…"
        } else {
            "no process holds GPU memory"
        }
    };

    view! {
        {head(state)}
        <div class="proc-reserve" style:min-height=move || format!("{}px", reserved.get().max(1) as f64 * ROW_PX + ROW_PX + 2.0)>
        <table class="proc-table" data-testid="process-table">
            <colgroup>
                <col class="c-pid" />
                <col class="c-started" />
                <col class="c-user" />
                <col class="c-cmd" />
                <col class="c-gpus" />
                <col class="c-gpumem" />
                <col class="c-sm" />
                <col class="c-rss" />
                <col class="c-role" />
            </colgroup>
            <thead>
                <tr>
                    <th class="num">"PID"</th>
                    <th>"started"</th>
                    <th>"user"</th>
                    <th>"command"</th>
                    <th>"GPUs"</th>
                    <th class="num">"GPU memory"</th>
                    <th class="num" title="the share of its GPU's SMs the process used over the last second (its busiest GPU)">"SM"</th>
                    <th class="num">"RSS"</th>
                    <th>"role"</th>
                </tr>
            </thead>
            <tbody>
                <For each=move || rows.get() key=|k| *k let:key>
                    <ProcessRow key=key />
                </For>
                <Show when=move || rows.with(Vec::is_empty)>
                    <tr class="proc-empty" data-testid="process-empty">
                        <td colspan="9">{empty_text}</td>
                    </tr>
                </Show>
            </tbody>
        </table>
        </div>
    }
}
