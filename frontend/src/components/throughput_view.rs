//! The throughput view below the history: one bar per flag set at the chosen
//! concurrency (median output tok/s with a min–max whisker across repeats, Δ
//! against a baseline, TTFT and ITL), a target line, sorting and filtering,
//! label and notes edited in place ([`FlagSetEditor`]), export links; the
//! sweep chart (tok/s against concurrency); and two sets compared
//! ([`ComparePanel`]).
//!
//! The ledger is fetched from `GET /api/flagsets` when the page opens, after
//! every finished benchmark, when the server's flag set changes and after an
//! edit. The read-only parts are HTML text from [`crate::ledger`]; a click or
//! tick inside them is read as the [`RowAction`] its control names. The
//! choices live in the query ([`Choices`]) and the target also in local
//! storage, so a reload or a shared link shows the same.

use leptos::prelude::*;
use leptos::wasm_bindgen::JsCast;
use shared::units::{fmt_tok_s, tok_num};

use crate::api;
use crate::components::compare_panel::ComparePanel;
use crate::components::flagset_editor::FlagSetEditor;
use crate::deeplink;
use crate::fetch::SingleFlight;
use crate::ledger::controls::{baseline_options, concurrency_options, head_markup};
use crate::ledger::query::{Choices, DEFAULT_TARGET, parse_c, parse_target};
use crate::ledger::rows::{RowAction, RowCtx, row_markup, target_left};
use crate::ledger::scale_max;
use crate::ledger::selection::{
    Sort, concurrencies, count_text, data_max, order, pick_baseline, pick_c, toggle_compare,
};
use crate::ledger::sweep::{SH, SW, sweep_legend, sweep_markup};
use crate::state::AppState;

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
}

/// What is shown, from the ledger and the choices.
#[derive(Clone, Copy)]
struct Shown {
    /// Every concurrency measured.
    cs: Memo<Vec<u32>>,
    c: Memo<Option<u32>>,
    baseline: Memo<Option<String>>,
    /// Positions in the ledger, in order.
    sets: Memo<Vec<usize>>,
    scale: Memo<f64>,
}

impl Shown {
    fn new(state: AppState, p: Picks) -> Self {
        let cs = Memo::new(move |_| state.ledger.with(|l| concurrencies(l)));
        let c = Memo::new(move |_| cs.with(|cs| pick_c(cs, p.want_c.get())));
        let baseline = Memo::new(move |_| {
            state
                .ledger
                .with(|l| pick_baseline(l, c.get(), p.want_base.get().as_deref()))
        });
        let sets = Memo::new(move |_| {
            let f = p.filter.get();
            state.ledger.with(|l| order(l, c.get(), p.sort.get(), &f))
        });
        let scale = Memo::new(move |_| {
            let c = c.get();
            let top = state.ledger.with(|l| sets.with(|idx| data_max(l, idx, c)));
            scale_max(top, p.target.get())
        });
        Self {
            cs,
            c,
            baseline,
            sets,
            scale,
        }
    }
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
    Effect::new(move |_| {
        state.ledger_gen.track();
        // Read, not only tracked: a memo recomputes, and notifies, when read.
        let _ = running.get();
        fetcher.run(move || async move {
            match api::ledger().await {
                Ok(list) => {
                    state.ledger.try_set(list);
                    error.try_set(None);
                }
                Err(e) => {
                    error.try_set(Some(e));
                }
            }
            loaded.try_set(true);
            true
        });
    });
    let p = Picks::new();
    let s = Shown::new(state, p);
    let count = move || count_text(s.sets.with(Vec::len), state.ledger.with(Vec::len));

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
        {list(state, p, s, running, loaded)}
        {sweep_chart(state, p, s)}
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
                    inner_html=move || s.cs.with(|cs| concurrency_options(cs, s.c.get()))
                ></select>
            </label>
            <label class="fs-ctl">
                <span class="dlg-label">"baseline"</span>
                <select
                    class="flag-control fs-baseline"
                    data-testid="baseline-select"
                    prop:value=move || s.baseline.get().unwrap_or_default()
                    on:change=move |ev| p.want_base.set(Some(event_target_value(&ev)))
                    inner_html=move || {
                        s.baseline.with(|cur| state.ledger.with(|l| baseline_options(l, cur.as_deref())))
                    }
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
fn list(
    state: AppState,
    p: Picks,
    s: Shown,
    running: Memo<Option<String>>,
    loaded: RwSignal<bool>,
) -> impl IntoView {
    let rows = row_memo(state, p, s, running);
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
            <div class="fs-row fs-head" inner_html=move || head_markup(s.scale.get())></div>
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
                        let text = if state.ledger.with(Vec::is_empty) {
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

/// Each shown set's id and row, as HTML text.
fn row_memo(
    state: AppState,
    p: Picks,
    s: Shown,
    running: Memo<Option<String>>,
) -> Memo<Vec<(String, String)>> {
    Memo::new(move |_| {
        let (c, running, scale) = (s.c.get(), running.get(), s.scale.get());
        let base_id = s.baseline.get();
        p.compare.with(|cmp| {
            state.ledger.with(|l| {
                let ctx = RowCtx {
                    c,
                    baseline: base_id
                        .as_deref()
                        .and_then(|b| l.iter().find(|r| r.set.id == b)),
                    running: running.as_deref(),
                    compare: cmp,
                    scale,
                    operate: state.may_operate(),
                };
                s.sets.with(|idx| {
                    idx.iter()
                        .map(|&i| (l[i].set.id.clone(), row_markup(&l[i], &ctx)))
                        .collect::<Vec<_>>()
                })
            })
        })
    })
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
fn sweep_chart(state: AppState, p: Picks, s: Shown) -> impl IntoView {
    let sweep = Memo::new(move |_| {
        let t = p.target.get();
        state.ledger.with(|l| {
            s.sets
                .with(|idx| (sweep_markup(l, idx, t), sweep_legend(l, idx)))
        })
    });
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
                inner_html=move || sweep.with(|s| s.0.clone())
            ></svg>
            <div class="chart-legend" data-testid="sweep-legend" inner_html=move || sweep.with(|s| s.1.clone())></div>
        </div>
    }
}
