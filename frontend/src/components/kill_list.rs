//! What an operation will kill, from the latest sample: every process of the
//! server with its command and GPU memory, and the total. Start and adopt kill
//! nothing and say so.

use leptos::prelude::*;
use shared::restart::OpKind;
use shared::units::fmt_bytes;

use crate::ops::{self, MISSING, truncate};
use crate::state::AppState;

/// Longest command shown before it is cut (the full one is in the tooltip).
const COMMAND_CHARS: usize = 72;

/// The processes `kind` will stop.
#[component]
pub(crate) fn KillList(
    /// The operation the dialog performs.
    kind: OpKind,
) -> impl IntoView {
    let state = AppState::get();
    let list = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .map(|s| ops::KillList::of(&s.processes))
                .unwrap_or_default()
        })
    });
    let kills = matches!(kind, OpKind::Restart | OpKind::Stop);
    let nothing = match kind {
        OpKind::Start => "starting kills nothing: no process will be stopped",
        _ => "adopting kills nothing: the running server is taken over as it is",
    };

    view! {
        <div class="kill-list" data-testid="kill-list" data-kills=kills.to_string()>
            {if kills {
                view! {
                    <div class="kill-total" data-testid="kill-total" data-count=move || list.with(|k| k.victims.len().to_string())>
                        {move || list.with(ops::KillList::summary)}
                    </div>
                    <div class="kill-scroll">
                        <table class="kill-table">
                            <colgroup>
                                <col class="k-pid" />
                                <col class="k-cmd" />
                                <col class="k-mem" />
                            </colgroup>
                            <tbody>
                                <For
                                    each=move || list.get().victims
                                    key=|v| v.clone()
                                    let:v
                                >
                                    <tr data-testid="kill-row" data-pid=v.pid.to_string()>
                                        <td class="num">{v.pid}</td>
                                        <td class="cmd" title=v.command.clone()>
                                            {truncate(&v.command, COMMAND_CHARS)}
                                        </td>
                                        <td class="num">
                                            {v.gpu_bytes.map_or_else(|| MISSING.to_owned(), fmt_bytes)}
                                        </td>
                                    </tr>
                                </For>
                            </tbody>
                        </table>
                    </div>
                }
                    .into_any()
            } else {
                view! { <div class="kill-total kill-none" data-testid="kill-total" data-count="0">{nothing}</div> }
                    .into_any()
            }}
        </div>
    }
}
