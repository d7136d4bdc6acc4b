//! One operation in full, as a modal: fetched from `GET /api/restarts/{id}` and,
//! while it runs, fetched again every second and whenever a `Restart` event for
//! it arrives. The drain chart, the phase transitions, the failure and the log.

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use shared::restart::{Outcome, RestartDetail};

use crate::api;
use crate::components::drain_chart::DrainChart;
use crate::components::failure_box::FailureBox;
use crate::components::log_tail::LogTail;
use crate::localtime;
use crate::markup;
use crate::ops::outcome_key;
use crate::state::AppState;

/// How often a running operation's record is fetched again.
const REFETCH_MS: f64 = 1000.0;
/// Log lines shown.
const LOG_LINES: usize = 20;

/// The detail of the restart the page has open, if any.
#[component]
pub(crate) fn RestartDetailPanel() -> impl IntoView {
    let state = AppState::get();
    let handle = window_event_listener(ev::keydown, move |ev| {
        if ev.key() == "Escape"
            && state.dialog.get_untracked().is_none()
            && state.detail.get_untracked().is_some()
        {
            state.detail.set(None);
        }
    });
    on_cleanup(move || handle.remove());

    move || state.detail.get().map(|id| body(state, id))
}

/// The modal of restart `id`.
fn body(state: AppState, id: i64) -> impl IntoView {
    let data = RwSignal::new(None::<RestartDetail>);
    let error = RwSignal::new(None::<String>);
    // Fetch bookkeeping: one request at a time; one more after it when asked
    // for meanwhile.
    let in_flight = StoredValue::new(false);
    let again = StoredValue::new(false);
    let last_fetch = StoredValue::new(0.0f64);

    fn fetch(
        id: i64,
        now: f64,
        data: RwSignal<Option<RestartDetail>>,
        error: RwSignal<Option<String>>,
        in_flight: StoredValue<bool>,
        again: StoredValue<bool>,
        last_fetch: StoredValue<f64>,
    ) {
        if in_flight.try_get_value().unwrap_or(true) {
            again.try_set_value(true);
            return;
        }
        in_flight.set_value(true);
        last_fetch.set_value(now);
        spawn_local(async move {
            let result = api::restart_detail(id).await;
            let alive = match result {
                Ok(d) => {
                    let ok = data.try_set(Some(d)).is_none();
                    error.try_set(None);
                    ok
                }
                Err(e) => error.try_set(Some(e)).is_none(),
            };
            if !alive {
                return;
            }
            in_flight.try_set_value(false);
            if again.try_get_value().unwrap_or(false) {
                again.try_set_value(false);
                fetch(
                    id,
                    localtime::now_ms(),
                    data,
                    error,
                    in_flight,
                    again,
                    last_fetch,
                );
            }
        });
    }
    let refetch = move || {
        fetch(
            id,
            localtime::now_ms(),
            data,
            error,
            in_flight,
            again,
            last_fetch,
        )
    };

    // First fetch, and again on every `Restart` event for this id.
    let summary = Memo::new(move |_| {
        state
            .restarts
            .with(|r| r.iter().find(|s| s.id == id).cloned())
    });
    Effect::new(move |_| {
        summary.track();
        refetch();
    });
    let running = Memo::new(move |_| {
        let live = summary.with(|s| s.as_ref().map(|s| s.outcome));
        let fetched = data.with(|d| d.as_ref().map(|d| d.summary.outcome));
        // Either says running: keep reading until the stored record is final too.
        live == Some(Outcome::Running) || fetched == Some(Outcome::Running)
    });
    // Every second while it runs.
    Effect::new(move |_| {
        let now = state.now_ms.get();
        if running.get() && now - last_fetch.get_value() >= REFETCH_MS {
            refetch();
        }
    });

    let close = move || state.detail.set(None);
    let loaded = Memo::new(move |_| data.get());

    view! {
        <div class="modal-backdrop" on:click=move |_| close()>
            <div
                class="modal detail"
                role="dialog"
                aria-modal="true"
                aria-label=format!("operation #{id}")
                data-testid="restart-detail"
                data-id=id.to_string()
                data-outcome=move || loaded.with(|d| d.as_ref().map(|d| outcome_key(d.summary.outcome)))
                on:click=|ev| ev.stop_propagation()
            >
                <header class="modal-head">
                    <h2 class="modal-title">
                        {move || {
                            loaded
                                .with(|d| match d {
                                    Some(d) => format!("{} #{id}", d.summary.kind.as_str()),
                                    None => format!("operation #{id}"),
                                })
                        }}
                    </h2>
                    {move || {
                        loaded
                            .with(|d| {
                                d.as_ref()
                                    .map(|d| {
                                        let s = &d.summary;
                                        let o = outcome_key(s.outcome);
                                        let tip = s.failure.as_ref().map(|f| f.summary()).unwrap_or_default();
                                        view! {
                                            <span class="outcome" data-testid="detail-outcome" data-outcome=o title=tip>
                                                {o}
                                            </span>
                                        }
                                    })
                            })
                    }}
                    <button
                        type="button"
                        class="modal-x"
                        data-testid="close-detail"
                        aria-label="close"
                        on:click=move |_| close()
                    >
                        "×"
                    </button>
                </header>
                {move || {
                    error
                        .get()
                        .map(|e| view! { <div class="dialog-error" data-testid="detail-error" role="alert">{e}</div> })
                }}
                {move || {
                    if loaded.with(Option::is_none) && error.with(Option::is_none) {
                        Some(view! { <div class="detail-loading">{format!("loading operation #{id}…")}</div> })
                    } else {
                        None
                    }
                }}
                <Show when=move || loaded.with(Option::is_some)>
                    <div
                        class="detail-section"
                        inner_html=move || {
                            loaded
                                .with(|d| {
                                    d.as_ref()
                                        .map(|d| markup::detail_facts(d, localtime::hms, localtime::full))
                                        .unwrap_or_default()
                                })
                        }
                    ></div>
                    <DrainChart detail=Signal::derive(move || loaded.get().unwrap_or_else(|| empty(id))) />
                    <div
                        class="detail-section"
                        inner_html=move || {
                            loaded
                                .with(|d| {
                                    d.as_ref().map(|d| markup::transitions(d, localtime::full)).unwrap_or_default()
                                })
                        }
                    ></div>
                    {move || {
                        loaded
                            .with(|d| d.as_ref().and_then(|d| d.summary.failure.clone()))
                            .map(|f| view! { <FailureBox failure=f testid="detail-failure" /> })
                    }}
                    <h3 class="dlg-h">"log"</h3>
                    <LogTail
                        lines=Signal::derive(move || {
                            // The record gets its log when the operation ends; until
                            // then the running server's is the one to read.
                            let live = running.get()
                                && state
                                    .server
                                    .with(|s| {
                                        s.as_ref()
                                            .and_then(|s| s.operation.as_ref())
                                            .is_some_and(|o| o.id == id)
                                    });
                            if live {
                                state.server.with(|s| s.as_ref().map(|s| s.log_tail.clone()).unwrap_or_default())
                            } else {
                                loaded.with(|d| d.as_ref().map(|d| d.log_tail.clone()).unwrap_or_default())
                            }
                        })
                        max=LOG_LINES
                        testid="detail-log"
                        rows=12
                        fit=true
                    />
                </Show>
            </div>
        </div>
    }
}

/// A placeholder record, never drawn (the chart is shown once one is loaded).
fn empty(id: i64) -> RestartDetail {
    RestartDetail {
        summary: shared::restart::RestartSummary {
            id,
            kind: shared::restart::OpKind::Restart,
            requested_by: String::new(),
            started_at_ms: 0,
            finished_at_ms: None,
            from_flags: Default::default(),
            to_flags: Default::default(),
            outcome: Outcome::Running,
            failure: None,
            durations: Default::default(),
        },
        transitions: Vec::new(),
        markers: Vec::new(),
        timeline: Vec::new(),
        log_tail: Vec::new(),
    }
}
