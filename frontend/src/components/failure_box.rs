//! Why an operation failed or the server died: the failure's kind and one-line
//! summary, the processes that held GPU memory (ours or foreign), and the log
//! lines it carries.

use leptos::prelude::*;
use shared::restart::Failure;
use shared::units::fmt_bytes;

use crate::components::log_tail::LogTail;
use crate::ops::{MISSING, failure_holders, failure_key, failure_log, truncate};

/// How many log lines the box shows.
const LOG_LINES: usize = 20;

/// The box of one failure.
#[component]
pub(crate) fn FailureBox(
    /// The failure to explain.
    failure: Failure,
    /// The box's `data-testid`.
    testid: &'static str,
) -> impl IntoView {
    let summary = failure.summary();
    let holders = failure_holders(&failure).to_vec();
    let log = failure_log(&failure).to_vec();
    let kind = failure_key(&failure);
    let holder_rows = holders
        .into_iter()
        .map(|h| {
            let command = if h.cmdline.is_empty() {
                MISSING.to_owned()
            } else {
                h.cmdline.join(" ")
            };
            let who = if h.ours { "ours" } else { "foreign" };
            view! {
                <tr data-testid="holder-row" data-pid=h.pid.to_string() data-ours=h.ours.to_string()>
                    <td class="num">{h.pid}</td>
                    <td class="ellipsis">{h.user.clone().unwrap_or_else(|| MISSING.to_owned())}</td>
                    <td class="cmd" title=command.clone()>{truncate(&command, 120)}</td>
                    <td class="num">{format!("GPU {}", h.gpu_index)}</td>
                    <td class="num">{h.used_bytes.map_or_else(|| MISSING.to_owned(), fmt_bytes)}</td>
                    <td>
                        <span class=format!("role role-{}", if h.ours { "server" } else { "foreign" })>
                            {who}
                        </span>
                    </td>
                </tr>
            }
        })
        .collect::<Vec<_>>();
    let has_holders = !holder_rows.is_empty();
    let has_log = !log.is_empty();

    view! {
        <div class="failure-box" data-testid=testid data-kind=kind>
            <div class="failure-head">
                <span class="failure-kind">{kind.replace('_', " ")}</span>
                <span class="failure-summary" data-testid="failure-summary" title=summary.clone()>
                    {summary.clone()}
                </span>
            </div>
            {has_holders
                .then(|| {
                    view! {
                        <table class="holders-table" data-testid="holders-table">
                            <colgroup>
                                <col class="h-pid" />
                                <col class="h-user" />
                                <col class="h-cmd" />
                                <col class="h-gpu" />
                                <col class="h-mem" />
                                <col class="h-who" />
                            </colgroup>
                            <thead>
                                <tr>
                                    <th class="num">"PID"</th>
                                    <th>"user"</th>
                                    <th>"command"</th>
                                    <th class="num">"GPU"</th>
                                    <th class="num">"memory"</th>
                                    <th>"ours / foreign"</th>
                                </tr>
                            </thead>
                            <tbody>{holder_rows}</tbody>
                        </table>
                    }
                })}
            {has_log
                .then(|| {
                    view! { <LogTail lines=log.clone() max=LOG_LINES testid="failure-log" rows=10 /> }
                })}
        </div>
    }
}
