//! What an operation will kill, from the latest sample: every process of the
//! server with its command and GPU memory, and the total. Start and adopt kill
//! nothing and say so.

use leptos::prelude::*;
use shared::restart::OpKind;

use crate::markup::kill_rows;
use crate::ops;
use crate::state::AppState;

/// The processes `kind` will stop.
#[component]
pub(crate) fn KillList(
    /// The operation the dialog performs.
    kind: OpKind,
) -> impl IntoView {
    let state = AppState::get();
    let kills = matches!(kind, OpKind::Restart | OpKind::Stop);
    let list = Memo::new(move |_| {
        if !kills {
            return ops::KillList::default();
        }
        state.latest.with(|l| {
            l.as_ref()
                .map(|s| ops::KillList::of(&s.processes))
                .unwrap_or_default()
        })
    });
    let summary = move || {
        if kills {
            list.with(ops::KillList::summary)
        } else if kind == OpKind::Start {
            "starting kills nothing: no process will be stopped".to_owned()
        } else {
            "adopting kills nothing: the running server is taken over as it is".to_owned()
        }
    };

    view! {
        <div class="kill-list" data-testid="kill-list" data-kills=kills.to_string()>
            <div
                class="kill-total"
                class:kill-none=!kills
                data-testid="kill-total"
                data-count=move || list.with(|k| k.victims.len().to_string())
            >
                {summary}
            </div>
            <div class="kill-scroll" class:kill-empty=move || list.with(|k| k.victims.is_empty())>
                <table class="kill-table">
                    <colgroup>
                        <col class="k-pid" />
                        <col class="k-cmd" />
                        <col class="k-mem" />
                    </colgroup>
                    <tbody inner_html=move || list.with(kill_rows)></tbody>
                </table>
            </div>
        </div>
    }
}
