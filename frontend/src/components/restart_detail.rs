//! One operation in full, as a modal: fetched from `GET /api/restarts/{id}`, again
//! whenever a `restart` message for it arrives or its operation enters a phase;
//! its drain chart ([`DrainChart`]) is asked for again as its timeline grows.
//! The drain chart, the phase transitions, the failure and the log.

use leptos::ev;
use leptos::prelude::*;
use shared::restart::RestartDetail;

use crate::api;
use crate::components::close_button::close_button;
use crate::components::drain_chart::{DrainChart, on_record_news};
use crate::components::log_tail::LogTail;
use crate::fetch::SingleFlight;
use crate::localtime;
use crate::markup;
use crate::state::AppState;

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

/// Restart `id`'s record, kept current while this component lives: fetched
/// first, again on every `restart` message for it and every phase its
/// operation enters. The record (once in) and why it could not be read.
fn live_detail(
    state: AppState,
    id: i64,
) -> (Memo<Option<RestartDetail>>, RwSignal<Option<String>>) {
    let data = RwSignal::new(None::<RestartDetail>);
    let error = RwSignal::new(None::<String>);
    let fetcher = SingleFlight::new();
    let refetch = move || {
        fetcher.run(move || async move {
            match api::restart_detail(id).await {
                Ok(d) => {
                    error.try_set(None);
                    data.try_set(Some(d)).is_none()
                }
                Err(e) => error.try_set(Some(e)).is_none(),
            }
        });
    };
    on_record_news(state, id, refetch);
    (Memo::new(move |_| data.get()), error)
}

/// The modal of restart `id`.
fn body(state: AppState, id: i64) -> impl IntoView {
    let (loaded, error) = live_detail(state, id);
    let close = move || state.detail.set(None);

    view! {
        <div class="modal-backdrop" on:click=move |_| close()>
            <div
                class="modal detail"
                role="dialog"
                aria-modal="true"
                aria-label=format!("operation #{id}")
                data-testid="restart-detail"
                data-id=id.to_string()
                data-outcome=move || loaded.with(|d| d.as_ref().map(|d| d.summary.outcome.as_str()))
                on:click=|ev| ev.stop_propagation()
            >
                <header class="modal-head">
                    // `display: contents`: the title and the pill are the head's items.
                    <span
                        class="detail-head"
                        inner_html=move || loaded.with(|d| head_markup(id, d.as_ref()))
                    ></span>
                    {close_button(close, Some("close-detail"))}
                </header>
                // The error or, until the record is in, a loading line.
                <div
                    class="detail-wait"
                    inner_html=move || {
                        error.with(|e| loaded.with(|d| wait_markup(id, e.as_deref(), d.is_some())))
                    }
                ></div>
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
                    <DrainChart id=id />
                    <div
                        class="detail-section"
                        inner_html=move || {
                            loaded
                                .with(|d| {
                                    d.as_ref().map(|d| markup::transitions(d, localtime::full)).unwrap_or_default()
                                })
                        }
                    ></div>
                    <div
                        class="failure-slot"
                        inner_html=move || {
                            loaded.with(|d| {
                                let f = d.as_ref().and_then(|d| d.summary.failure.as_ref());
                                markup::failure_box(f, "detail-failure")
                            })
                        }
                    ></div>
                    <h3 class="dlg-h">"log"</h3>
                    <LogTail
                        lines=Signal::derive(move || {
                            // While the operation runs, the server's status has the
                            // newest lines; after, the record has them all.
                            let live = state
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

/// The head's title and, once the record is in, its outcome pill, as HTML text.
fn head_markup(id: i64, d: Option<&RestartDetail>) -> String {
    let Some(d) = d else {
        return format!(r#"<h2 class="modal-title">operation #{id}</h2>"#);
    };
    let s = &d.summary;
    let o = s.outcome.as_str();
    let tip = s.failure.as_ref().map(|f| f.summary()).unwrap_or_default();
    format!(
        r#"<h2 class="modal-title">{} #{id}</h2><span class="outcome" data-testid="detail-outcome" data-outcome="{o}" title="{}">{o}</span>"#,
        s.kind.as_str(),
        markup::escape(&tip)
    )
}

/// The fetch's error, or a loading line until the record is in, as HTML text.
fn wait_markup(id: i64, error: Option<&str>, loaded: bool) -> String {
    match error {
        Some(e) => format!(
            r#"<div class="dialog-error" data-testid="detail-error" role="alert">{}</div>"#,
            markup::escape(e)
        ),
        None if !loaded => format!(r#"<div class="detail-loading">loading operation #{id}…</div>"#),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::{OpKind, Outcome, RestartSummary};

    fn empty_detail(id: i64) -> RestartDetail {
        RestartDetail {
            summary: RestartSummary {
                id,
                kind: OpKind::Restart,
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
            containment: None,
        }
    }

    #[test]
    fn head_and_wait_lines() {
        assert_eq!(
            head_markup(3, None),
            r#"<h2 class="modal-title">operation #3</h2>"#
        );
        let html = head_markup(3, Some(&empty_detail(3)));
        assert!(html.starts_with(r#"<h2 class="modal-title">"#), "{html}");
        assert!(html.contains(
            r#" #3</h2><span class="outcome" data-testid="detail-outcome" data-outcome=""#
        ));
        assert_eq!(
            wait_markup(3, None, false),
            r#"<div class="detail-loading">loading operation #3…</div>"#
        );
        assert_eq!(wait_markup(3, None, true), "");
        assert_eq!(
            wait_markup(3, Some("<no>"), false),
            r#"<div class="dialog-error" data-testid="detail-error" role="alert">&lt;no&gt;</div>"#
        );
    }
}
