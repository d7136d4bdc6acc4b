//! One operation of the history: when it started and who asked, what it was,
//! the flag change, how it ended, and how long each part took.

use leptos::prelude::*;
use shared::restart::{Outcome, RestartSummary};

use crate::flags::compact;
use crate::localtime;
use crate::ops::{fmt_secs, kind_key, outcome_key};
use crate::state::AppState;

/// The outcome badge's tooltip: the failure, or when it finished.
fn outcome_title(s: &RestartSummary) -> String {
    if let Some(f) = &s.failure {
        return f.summary();
    }
    match (s.outcome, s.finished_at_ms) {
        (Outcome::Running, _) => "still running".to_owned(),
        (_, Some(t)) => format!("finished {}", localtime::full(t)),
        (_, None) => String::new(),
    }
}

/// The row of restart `id`.
#[component]
pub(crate) fn HistoryRow(
    /// The restart record's id.
    id: i64,
) -> impl IntoView {
    let state = AppState::get();
    let summary = Memo::new(move |_| {
        state
            .restarts
            .with(|r| r.iter().find(|s| s.id == id).cloned())
    });
    let cell = move |f: fn(&RestartSummary) -> String| {
        move || summary.with(|s| s.as_ref().map_or_else(String::new, f))
    };
    let outcome =
        move || summary.with(|s| s.as_ref().map_or("running", |s| outcome_key(s.outcome)));
    let open = move || state.detail.set(Some(id));

    view! {
        <tr
            class="history-row"
            data-testid="history-row"
            data-id=id.to_string()
            data-outcome=outcome
            tabindex="0"
            title="open this operation's timeline"
            on:click=move |_| open()
            on:keydown=move |ev| {
                if ev.key() == "Enter" {
                    open();
                }
            }
        >
            <td data-testid="history-started" title=cell(|s| localtime::full(s.started_at_ms))>
                {cell(|s| localtime::hms(s.started_at_ms))}
            </td>
            <td class="ellipsis" data-testid="history-who" title=cell(|s| s.requested_by.clone())>
                {cell(|s| s.requested_by.clone())}
            </td>
            <td data-testid="history-kind">{cell(|s| kind_key(s.kind).to_owned())}</td>
            <td class="cmd" data-testid="history-change" title=cell(|s| compact(&s.from_flags, &s.to_flags))>
                {cell(|s| compact(&s.from_flags, &s.to_flags))}
            </td>
            <td>
                <span class="outcome" data-testid="history-outcome" data-outcome=outcome title=cell(outcome_title)>
                    {outcome}
                </span>
            </td>
            <td class="num" data-testid="history-drain">{cell(|s| fmt_secs(s.durations.drain_ms))}</td>
            <td class="num" data-testid="history-kill">{cell(|s| fmt_secs(s.durations.kill_ms))}</td>
            <td class="num" data-testid="history-verify">{cell(|s| fmt_secs(s.durations.verify_ms))}</td>
            <td class="num" data-testid="history-warmup">{cell(|s| fmt_secs(s.durations.warmup_ms))}</td>
            <td class="num" data-testid="history-total">{cell(|s| fmt_secs(s.durations.total_ms))}</td>
        </tr>
    }
}
