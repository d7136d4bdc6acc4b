//! The throughput view below the history: one bar per flag set at the chosen
//! concurrency (median output tok/s with a min–max whisker across repeats, Δ
//! against a baseline, TTFT and ITL), a target line, sorting and filtering,
//! label and notes edited in place ([`FlagSetEditor`]), export links; the
//! sweep chart (tok/s against concurrency); and two sets compared
//! ([`ComparePanel`]).
//!
//! The agent draws the ledger for what the viewer picked
//! (`GET /api/flagsets/view`, into `state.ledger`): asked again when the page
//! opens, when a pick changes, after every finished benchmark, when the
//! server's flag set changes and after an edit. A click or tick inside the
//! rows is read as the [`RowAction`] its control names. The choices live in
//! the query ([`Choices`]) and the target also in local storage, so a reload
//! or a shared link shows the same.

use leptos::prelude::*;
use leptos::wasm_bindgen::JsCast;
use shared::bench::{LedgerSort as Sort, LedgerView};
use shared::units::{fmt_tok_s, tok_num};

use crate::api;
use crate::components::compare_panel::ComparePanel;
use crate::components::flagset_editor::FlagSetEditor;
use crate::deeplink;
use crate::fetch::SingleFlight;
use crate::ledger::picks::{RowAction, target_left, toggle_compare};
use crate::ledger::query::{Choices, DEFAULT_TARGET, parse_c, parse_target};
use crate::state::AppState;

/// The sweep chart's drawing box, in user units (the agent draws in it).
const SW: f64 = shared::bench::SWEEP_BOX.0;
const SH: f64 = shared::bench::SWEEP_BOX.1;

/// Where the target is kept between visits.
const TARGET_KEY: &str = "drainwatch.target";

fn storage() -> Option<web_sys::Storage> {
    window().local_storage().ok().flatten()
}

/// The control a click or tick inside the rows' markup was on, and what it
/// asks for.
fn acted_on(ev: &web_sys::Event) -> Option<(RowAction, web_sys::Element)> {
    let target = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    let el = target.closest("[data-act]").ok()??;
    let action = RowAction::of(
        &el.get_attribute("data-act")?,
        el.get_attribute("data-flagset"),
    )?;
    Some((action, el))
}

/// The viewer's choices.
#[derive(Clone, Copy)]
struct Picks {
    want_c: RwSignal<Option<u32>>,
    want_base: RwSignal<Option<String>>,
    compare: RwSignal<Vec<String>>,
    sort: RwSignal<Sort>,
    target: RwSignal<f64>,
    filter: RwSignal<String>,
}

impl Picks {
    /// From the query, and storage for the target; written back to the
    /// query as they change.
    fn new() -> Self {
        let chosen = Choices::from_query(&window().location().search().unwrap_or_default());
        let stored = || {
            storage()
                .and_then(|s| s.get_item(TARGET_KEY).ok().flatten())
                .and_then(|v| parse_target(&v))
        };
        let p = Self {
            want_c: RwSignal::new(chosen.c),
            want_base: RwSignal::new(chosen.baseline),
            compare: RwSignal::new(chosen.compare),
            sort: RwSignal::new(chosen.sort),
            target: RwSignal::new(chosen.target.or_else(stored).unwrap_or(DEFAULT_TARGET)),
            filter: RwSignal::new(String::new()),
        };
        Effect::new(move |prev: Option<()>| {
            let now = Choices {
                c: p.want_c.get(),
                baseline: p.want_base.get(),
                compare: p.compare.get(),
                sort: p.sort.get(),
                target: Some(p.target.get()),
            };
            if prev.is_some() {
                deeplink::replace_query(&now.to_query());
            }
        });
        p
    }

    /// The view's request for these picks (tracked).
    fn ask(self) -> [(&'static str, Option<String>); 6] {
        [
            ("c", self.want_c.get().map(|c| c.to_string())),
            ("baseline", self.want_base.get()),
            ("sort", Some(self.sort.get().key().to_owned())),
            (
                "filter",
                Some(self.filter.get()).filter(|f| !f.trim().is_empty()),
            ),
            ("target", Some(self.target.get().to_string())),
            (
                "compare",
                Some(self.compare.get().join(",")).filter(|c| !c.is_empty()),
            ),
        ]
    }
}

/// What the agent drew, piece by piece: each changes only when its part does.
#[derive(Clone, Copy)]
struct Shown {
    c: Memo<Option<u32>>,
    baseline: Memo<Option<String>>,
    scale: Memo<f64>,
}

impl Shown {
    fn new(state: AppState) -> Self {
        Self {
            c: Memo::new(move |_| state.ledger.with(|l| l.as_ref()?.c)),
            baseline: Memo::new(move |_| state.ledger.with(|l| l.as_ref()?.baseline.clone())),
            scale: Memo::new(move |_| state.ledger.with(|l| l.as_ref().map_or(1.0, |l| l.scale))),
        }
    }
}

/// A piece of what the agent drew, as text ("" before the first view).
fn drawn(state: AppState, pick: fn(&LedgerView) -> &String) -> Memo<String> {
    Memo::new(move |_| {
        state
            .ledger
            .with(|l| l.as_ref().map(|l| pick(l).clone()).unwrap_or_default())
    })
}

/// The throughput section.
#[component]
pub(crate) fn ThroughputView() -> impl IntoView {
    let state = AppState::get();
    let error = RwSignal::new(None::<String>);
    let loaded = RwSignal::new(false);
    let fetcher = SingleFlight::new();
    let running = Memo::new(move |_| {
        state
            .server
            .with(|s| s.as_ref().and_then(|s| s.flagset.clone()))
    });
    let p = Picks::new();
    Effect::new(move |_| {
        state.ledger_gen.track();
        // Read, not only tracked: a memo recomputes, and notifies, when read.
        let _ = running.get();
        let _ = state.may_operate();
        let _ = p.ask();
        // The job reads the picks when it runs: a change while one view is
        // out is asked for right after it, as they stand then.
        fetcher.run(move || async move {
            let Some(ask) = untrack(move || {
                p.want_c.try_get_untracked()?;
                Some(p.ask())
            }) else {
                return false;
            };
            match api::ledger_view(&ask).await {
                Ok(view) => {
                    state.ledger.try_set(Some(view));
                    error.try_set(None);
                }
                Err(e) => {
                    error.try_set(Some(e));
                }
            }
            loaded.try_set(true).is_none()
        });
    });
    let s = Shown::new(state);
    let count = drawn(state, |l| &l.count);

    view! {
        <div class="proc-head">
            <h2 class="proc-title">"throughput"</h2>
            <span class="proc-counts num" data-testid="flagset-count">{count}</span>
            <span class="proc-error-slot">
                {move || error.get().map(|e| view! { <span class="proc-error" data-testid="throughput-error" title=e.clone()>{e.clone()}</span> })}
            </span>
            <span class="fs-export">
                "export "
                <a href=crate::base::url("/api/export/bench.csv") download="drainwatch-bench.csv" data-testid="export-csv">"CSV"</a>
                " · "
                <a href=crate::base::url("/api/export/bench.json") download="drainwatch-bench.json" data-testid="export-json">"JSON"</a>
            </span>
        </div>
        {controls(state, p, s)}
        {list(state, p, s, loaded)}
        {sweep_chart(state)}
        <ComparePanel compare=p.compare />
    }
}

/// Concurrency, baseline, target, sort and filter.
fn controls(state: AppState, p: Picks, s: Shown) -> impl IntoView {
    let target_text = RwSignal::new(tok_num(p.target.get_untracked()));
    view! {
        <div class="fs-controls">
            <label class="fs-ctl">
                <span class="dlg-label">"concurrency"</span>
                <select
                    class="flag-control"
                    data-testid="concurrency-select"
                    prop:value=move || s.c.get().map(|c| c.to_string()).unwrap_or_default()
                    on:change=move |ev| p.want_c.set(parse_c(&event_target_value(&ev)))
                    inner_html=drawn(state, |l| &l.c_options)
                ></select>
            </label>
            <label class="fs-ctl">
                <span class="dlg-label">"baseline"</span>
                <select
                    class="flag-control fs-baseline"
                    data-testid="baseline-select"
                    prop:value=move || s.baseline.get().unwrap_or_default()
                    on:change=move |ev| p.want_base.set(Some(event_target_value(&ev)))
                    inner_html=drawn(state, |l| &l.baseline_options)
                ></select>
            </label>
            <label class="fs-ctl">
                <span class="dlg-label">"target"</span>
                <input
                    class="flag-control fs-target-input"
                    type="number"
                    min="1"
                    step="any"
                    data-testid="target-input"
                    prop:value=move || target_text.get()
                    on:input=move |ev| {
                        let v = event_target_value(&ev);
                        target_text.set(v.clone());
                        if let Some(t) = parse_target(&v) {
                            p.target.set(t);
                            if let Some(s) = storage() {
                                let _ = s.set_item(TARGET_KEY, &t.to_string());
                            }
                        }
                    }
                />
                <span class="fs-unit">"tok/s"</span>
            </label>
            <label class="fs-ctl">
                <span class="dlg-label">"sort"</span>
                <select
                    class="flag-control"
                    data-testid="sort-select"
                    prop:value=move || p.sort.get().key()
                    on:change=move |ev| p.sort.set(Sort::from_key(&event_target_value(&ev)))
                >
                    <option value="throughput">"by throughput"</option>
                    <option value="first">"by first seen"</option>
                </select>
            </label>
            <label class="fs-ctl fs-filter">
                <span class="dlg-label">"filter"</span>
                <input
                    class="flag-control"
                    type="search"
                    data-testid="filter-input"
                    placeholder="label or flag, e.g. tp=4"
                    prop:value=move || p.filter.get()
                    on:input=move |ev| p.filter.set(event_target_value(&ev))
                />
            </label>
        </div>
    }
}

/// The list: its head with the tick labels, the target line over the bars,
/// one row per shown set with its editor, or why there is none.
fn list(state: AppState, p: Picks, s: Shown, loaded: RwSignal<bool>) -> impl IntoView {
    let rows = Memo::new(move |_| {
        state.ledger.with(|l| {
            l.as_ref()
                .map(|l| {
                    l.rows
                        .iter()
                        .map(|r| (r.id.clone(), r.html.clone()))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    });
    let row_html = move |id: &str| {
        rows.with(|r| {
            r.iter()
                .find(|(i, _)| i == id)
                .map(|(_, h)| h.clone())
                .unwrap_or_default()
        })
    };

    // The set whose label editor is open.
    let editing = RwSignal::new(None::<String>);
    let on_click = move |ev: web_sys::MouseEvent| {
        if let Some((RowAction::Edit(id), _)) = acted_on(&ev) {
            if editing.get_untracked().as_deref() == Some(id.as_str()) {
                editing.set(None);
            } else {
                editing.set(Some(id));
            }
        }
    };
    let on_change = move |ev: web_sys::Event| {
        let Some((RowAction::Compare(id), el)) = acted_on(&ev) else {
            return;
        };
        let on = el
            .dyn_into::<web_sys::HtmlInputElement>()
            .map(|i| i.checked())
            .unwrap_or(false);
        p.compare.update(|c| *c = toggle_compare(c, &id, on));
    };
    view! {
        <div class="fs-list" data-testid="flagset-list" data-c=move || s.c.get().map(|c| c.to_string()) data-baseline=move || s.baseline.get()>
            <div class="fs-row fs-head" inner_html=drawn(state, |l| &l.head)></div>
            <div class="fs-rows" on:click=on_click on:change=on_change>
                {target_overlay(p, s)}
                <For each=move || rows.with(|r| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>()) key=|id| id.clone() let:id>
                    <div class="fs-item">
                        <div class="fs-item-row" inner_html={
                            let id = id.clone();
                            move || row_html(&id)
                        }></div>
                        <FlagSetEditor id=id.clone() editing=editing />
                    </div>
                </For>
                {move || {
                    (loaded.get() && rows.with(Vec::is_empty)).then(|| {
                        let text = if state.ledger.with(|l| l.as_ref().is_none_or(|l| l.total == 0)) {
                            "no flag set yet: benchmark the running server to start the ledger"
                        } else {
                            "no flag set matches the filter"
                        };
                        view! { <div class="fs-empty" data-testid="throughput-empty">{text}</div> }
                    })
                }}
            </div>
        </div>
    }
}

/// The target's line over the bars, with its label.
fn target_overlay(p: Picks, s: Shown) -> impl IntoView {
    let target = p.target;
    view! {
    <div class="fs-overlay" aria-hidden="true">
        <span></span>
        <span></span>
        <span class="fs-overlay-track">
            <span
                class="fs-target"
                data-testid="target-line"
                data-tok-s=move || format!("{:.1}", target.get())
                style:left=move || format!("{:.2}%", target_left(target.get(), s.scale.get()))
            >
                <span class="fs-target-label">{move || format!("target {}", fmt_tok_s(Some(target.get())))}</span>
            </span>
        </span>
    </div>
    }
}

/// The sweep chart and its legend.
fn sweep_chart(state: AppState) -> impl IntoView {
    view! {
        <div class="chart-wrap sweep-wrap">
            <h3 class="dlg-h">"output tok/s against concurrency"</h3>
            <svg
                class="drain-chart sweep-chart"
                data-testid="sweep-chart"
                width=SW.to_string()
                height=SH.to_string()
                viewBox=format!("0 0 {SW} {SH}")
                role="img"
                aria-label="output tokens per second against concurrency, per flag set"
                inner_html=drawn(state, |l| &l.sweep)
            ></svg>
            <div class="chart-legend" data-testid="sweep-legend" inner_html=drawn(state, |l| &l.legend)></div>
        </div>
    }
}
