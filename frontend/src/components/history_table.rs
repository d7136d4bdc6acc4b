//! The restart history below the processes: one row per operation, newest
//! first, following `Restart` events live. A click on a row opens its detail.

use leptos::prelude::*;

use crate::components::history_row::HistoryRow;
use crate::state::AppState;

/// Recent restarts, stops, starts and adoptions.
#[component]
pub(crate) fn HistoryTable() -> impl IntoView {
    let state = AppState::get();
    let ids = Memo::new(move |_| {
        state
            .restarts
            .with(|r| r.iter().map(|s| s.id).collect::<Vec<_>>())
    });

    view! {
        <div class="proc-head">
            <h2 class="proc-title">"history"</h2>
            <span class="proc-counts num">
                {move || {
                    let n = ids.with(Vec::len);
                    if n == 1 { "1 operation".to_owned() } else { format!("{n} operations") }
                }}
            </span>
            <span class="dlg-muted">"click a row for its timeline"</span>
        </div>
        <table class="proc-table history-table" data-testid="history-table">
            <colgroup>
                <col class="c-hstart" />
                <col class="c-who" />
                <col class="c-kind" />
                <col class="c-change" />
                <col class="c-outcome" />
                <col class="c-dur" />
                <col class="c-dur" />
                <col class="c-dur" />
                <col class="c-dur" />
                <col class="c-dur" />
            </colgroup>
            <thead>
                <tr>
                    <th>"started"</th>
                    <th>"who"</th>
                    <th>"kind"</th>
                    <th>"flag change"</th>
                    <th>"outcome"</th>
                    <th class="num">"drain"</th>
                    <th class="num">"kill"</th>
                    <th class="num">"verify"</th>
                    <th class="num">"warm-up"</th>
                    <th class="num">"total"</th>
                </tr>
            </thead>
            <tbody>
                <For each=move || ids.get() key=|id| *id let:id>
                    <HistoryRow id=id />
                </For>
                <Show when=move || ids.with(Vec::is_empty)>
                    <tr class="proc-empty" data-testid="history-empty">
                        <td colspan="10">"no operation yet"</td>
                    </tr>
                </Show>
            </tbody>
        </table>
    }
}
