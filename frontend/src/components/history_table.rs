//! The restart history below the processes: one row per operation, newest
//! first, following the socket live (see [`crate::markup::history_rows`]). A
//! click on a row, or Enter on a focused one, opens its detail.

use leptos::prelude::*;
use leptos::wasm_bindgen::JsCast;

use crate::localtime;
use crate::markup::history_rows;
use crate::state::AppState;

/// The `data-id` of the history row an event happened in.
fn row_id(ev: &web_sys::Event) -> Option<i64> {
    let target = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    let row = target.closest("tr[data-id]").ok()??;
    row.get_attribute("data-id")?.parse().ok()
}

/// Recent restarts, stops, starts and adoptions.
#[component]
pub(crate) fn HistoryTable() -> impl IntoView {
    let state = AppState::get();
    let rows = Memo::new(move |_| {
        state
            .restarts
            .with(|r| history_rows(r, localtime::hms, localtime::full))
    });
    let count = move || {
        let n = state.restarts.with(Vec::len);
        if n == 1 {
            "1 operation".to_owned()
        } else {
            format!("{n} operations")
        }
    };
    let open = move |ev: &web_sys::Event| {
        if let Some(id) = row_id(ev) {
            state.detail.set(Some(id));
        }
    };

    view! {
        <div class="proc-head">
            <h2 class="proc-title">"history"</h2>
            <span class="proc-counts num">{count}</span>
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
            <tbody
                inner_html=move || rows.get()
                on:click=move |ev| open(&ev)
                on:keydown=move |ev| {
                    if ev.key() == "Enter" {
                        open(&ev);
                    }
                }
            ></tbody>
        </table>
    }
}
