//! One operation in full, as a modal: fetched from `GET /api/restarts/{id}`, again
//! whenever a `restart` message for it arrives or its operation enters a phase,
//! and while it runs its drain chart grows from the socket's `timeline` messages.
//! The drain chart, the phase transitions, the failure and the log.

use leptos::ev;
use leptos::prelude::*;
use shared::restart::{RestartDetail, TimelinePoint};

use crate::api;
use crate::chart::empty_detail;
use crate::components::close_button::close_button;
use crate::components::drain_chart::DrainChart;
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
/// operation enters, and its timeline grown from `timeline` messages in
/// between. The record (once in) and why it could not be read.
pub(crate) fn live_detail(
    state: AppState,
    id: i64,
) -> (Memo<Option<RestartDetail>>, RwSignal<Option<String>>) {
    let data = RwSignal::new(None::<RestartDetail>);
    let error = RwSignal::new(None::<String>);
    let fetcher = SingleFlight::new();
    // Points the socket brought before the first fetch landed.
    let early = StoredValue::new(Vec::<TimelinePoint>::new());
    let refetch = move || {
        fetcher.run(move || async move {
            match api::restart_detail(id).await {
                Ok(mut d) => {
                    if let Some(points) = early.try_update_value(std::mem::take) {
                        append_newer(&mut d.timeline, &points);
                    }
                    let ok = data
                        .try_update(|old| *old = Some(merged(d, old.take())))
                        .is_some();
                    error.try_set(None);
                    ok
                }
                Err(e) => error.try_set(Some(e)).is_none(),
            }
        });
    };

    // The stored record: first, on every `restart` message for this id, and on
    // every phase the running operation enters (its transitions, markers and log).
    let summary = Memo::new(move |_| {
        state
            .restarts
            .with(|r| r.iter().find(|s| s.id == id).cloned())
    });
    let phase = Memo::new(move |_| {
        state.server.with(|s| {
            s.as_ref()
                .filter(|s| s.operation.as_ref().is_some_and(|o| o.id == id))
                .map(|s| (s.phase, s.phase_since_ms))
        })
    });
    Effect::new(move |_| {
        // Read, not only tracked: a memo recomputes when read, and only then
        // tells this effect that it changed.
        let _ = (summary.get(), phase.get());
        refetch();
        // The store commits within a quarter second of the news: look again
        // then for the transition and marker that came with it.
        set_timeout(refetch, std::time::Duration::from_millis(400));
    });
    // Between those, the timeline grows from `timeline` messages.
    Effect::new(move |_| {
        state.timeline.with(|t| {
            if let Some((rid, points)) = t
                && *rid == id
            {
                data.update(|d| match d {
                    Some(d) => append_newer(&mut d.timeline, points),
                    None => early.update_value(|e| append_newer(e, points)),
                });
            }
        });
    });

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
                    <DrainChart detail=Signal::derive(move || loaded.get().unwrap_or_else(|| empty_detail(id))) />
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

/// Adds the points of `more` that are newer than the last of `points`.
fn append_newer(points: &mut Vec<TimelinePoint>, more: &[TimelinePoint]) {
    let last = points.last().map(|p| p.at_ms);
    points.extend(
        more.iter()
            .filter(|p| last.is_none_or(|l| p.at_ms > l))
            .cloned(),
    );
}

/// The record as fetched, with the points the socket brought since it was
/// stored (the store writes in batches, so a fetch may lag the socket).
fn merged(mut fetched: RestartDetail, shown: Option<RestartDetail>) -> RestartDetail {
    if let Some(shown) = shown {
        append_newer(&mut fetched.timeline, &shown.timeline);
    }
    fetched
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::restart::Phase;

    fn p(at_ms: u64) -> TimelinePoint {
        TimelinePoint {
            at_ms,
            phase: Phase::Draining,
            mem_used_bytes: vec![Some(at_ms)],
            running_requests: None,
        }
    }

    fn at(points: &[TimelinePoint]) -> Vec<u64> {
        points.iter().map(|p| p.at_ms).collect()
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

    #[test]
    fn the_socket_adds_only_what_is_newer() {
        let mut points = vec![p(10), p(20)];
        append_newer(&mut points, &[p(15), p(20), p(30), p(40)]);
        assert_eq!(at(&points), vec![10, 20, 30, 40]);
        let mut none = Vec::new();
        append_newer(&mut none, &[p(5)]);
        assert_eq!(at(&none), vec![5]);
    }

    #[test]
    fn a_fetch_that_lags_the_socket_keeps_the_newer_points() {
        let mut stored = empty_detail(3);
        stored.timeline = vec![p(10), p(20)];
        let mut shown = empty_detail(3);
        shown.timeline = vec![p(10), p(20), p(30), p(40)];
        assert_eq!(
            at(&merged(stored.clone(), Some(shown)).timeline),
            vec![10, 20, 30, 40]
        );
        assert_eq!(at(&merged(stored, None).timeline), vec![10, 20]);
    }
}
