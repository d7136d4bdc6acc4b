//! The throughput view below the history: one bar per flag set at the chosen
//! concurrency (median output tok/s with a min–max whisker across repeats, Δ
//! against a baseline, TTFT and ITL), a target line, sorting and filtering,
//! label and notes edited in place, export links; the sweep chart (tok/s
//! against concurrency); and two sets compared, flag by flag and level by
//! level, with a button per set that opens the guarded restart dialog at that
//! set's flags.
//!
//! The ledger is fetched from `GET /api/flagsets` when the page opens, after
//! every finished benchmark, when the server's flag set changes and after an
//! edit. The read-only parts are HTML text from [`crate::throughput`]; clicks
//! and ticks inside them are handled here by delegation. The choices live in
//! the query (`?c=16&baseline=…&compare=A,B&sort=first&target=1200`) and the
//! target also in local storage, so a reload or a shared link shows the same.

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::wasm_bindgen::JsCast;
use shared::bench::FlagSetResults;

use crate::api::{self, SetDiff};
use crate::deeplink;
use crate::markup::diff_lines;
use crate::ops::relaunch_kind;
use crate::state::{AppState, DialogOpen, Prefill};
use crate::throughput::{
    self, DEFAULT_TARGET, RowCtx, SH, SW, Sort, axis_markup, compare_table, concurrencies,
    from_wire, order, pick_baseline, pick_c, row_markup, scale_max, set_name, sweep_legend,
    sweep_markup, target_left, toggle_compare,
};

/// Where the target is kept between visits.
const TARGET_KEY: &str = "drainwatch.target";

fn storage() -> Option<web_sys::Storage> {
    window().local_storage().ok().flatten()
}

/// The element an event happened in, or its closest ancestor matching `css`.
fn closest(ev: &web_sys::Event, css: &str) -> Option<web_sys::Element> {
    let target = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    target.closest(css).ok()?
}

/// Fetches the ledger unless a fetch runs; then once more if asked meanwhile.
fn fetch_ledger(
    state: AppState,
    error: RwSignal<Option<String>>,
    loaded: RwSignal<bool>,
    busy: StoredValue<(bool, bool)>,
) {
    if busy.try_get_value().is_none_or(|(running, _)| running) {
        busy.try_update_value(|b| b.1 = true);
        return;
    }
    busy.set_value((true, false));
    spawn_local(async move {
        let result = api::ledger().await;
        match result {
            Ok(list) => {
                state.ledger.try_set(list);
                error.try_set(None);
            }
            Err(e) => {
                error.try_set(Some(e));
            }
        }
        loaded.try_set(true);
        let again = busy.try_get_value().is_some_and(|(_, again)| again);
        busy.try_set_value((false, false));
        if again {
            fetch_ledger(state, error, loaded, busy);
        }
    });
}

/// Writes `pairs` into the page's query, keeping its other parameters.
fn write_query(pairs: &[(&str, Option<String>)]) {
    let location = window().location();
    let mut search = location.search().unwrap_or_default();
    for (key, value) in pairs {
        search = deeplink::with_param(&search, key, value.as_deref());
    }
    let url = format!("{}{search}", location.pathname().unwrap_or_default());
    if let Ok(history) = window().history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

/// The throughput section.
#[component]
pub(crate) fn ThroughputView() -> impl IntoView {
    let state = AppState::get();
    let error = RwSignal::new(None::<String>);
    let loaded = RwSignal::new(false);
    let busy = StoredValue::new((false, false));
    let running = Memo::new(move |_| {
        state
            .server
            .with(|s| s.as_ref().and_then(|s| s.flagset.clone()))
    });
    Effect::new(move |_| {
        state.ledger_gen.track();
        // Read, not only tracked: a memo recomputes, and notifies, when read.
        let _ = running.get();
        fetch_ledger(state, error, loaded, busy);
    });

    // The choices, from the query (and storage for the target).
    let search = window().location().search().unwrap_or_default();
    let q = |k: &str| deeplink::param(&search, k);
    let want_c = RwSignal::new(q("c").and_then(|v| throughput::parse_c(&v)));
    let want_base = RwSignal::new(q("baseline").filter(|v| !v.is_empty()));
    let compare = RwSignal::new(
        q("compare")
            .map(|v| throughput::parse_compare(&v))
            .unwrap_or_default(),
    );
    let sort = RwSignal::new(q("sort").map_or(Sort::Throughput, |v| Sort::from_key(&v)));
    let target = RwSignal::new(
        q("target")
            .and_then(|v| throughput::parse_target(&v))
            .or_else(|| {
                storage()
                    .and_then(|s| s.get_item(TARGET_KEY).ok().flatten())
                    .and_then(|v| throughput::parse_target(&v))
            })
            .unwrap_or(DEFAULT_TARGET),
    );
    let target_text = RwSignal::new(throughput::tok_num(target.get_untracked()));
    let filter = RwSignal::new(String::new());
    Effect::new(move |prev: Option<()>| {
        let pairs = [
            ("c", want_c.get().map(|c| c.to_string())),
            ("baseline", want_base.get()),
            (
                "compare",
                compare.with(|c| (!c.is_empty()).then(|| c.join(","))),
            ),
            (
                "sort",
                (sort.get() == Sort::FirstSeen).then(|| "first".to_owned()),
            ),
            (
                "target",
                Some(target.get())
                    .filter(|t| *t != DEFAULT_TARGET)
                    .map(|t| t.to_string()),
            ),
        ];
        if prev.is_some() {
            write_query(&pairs);
        }
    });

    // What is shown.
    let cs = Memo::new(move |_| state.ledger.with(|l| concurrencies(l)));
    let c = Memo::new(move |_| cs.with(|cs| pick_c(cs, want_c.get())));
    let baseline = Memo::new(move |_| {
        state
            .ledger
            .with(|l| pick_baseline(l, c.get(), want_base.get().as_deref()))
    });
    let shown = Memo::new(move |_| {
        let f = filter.get();
        state.ledger.with(|l| order(l, c.get(), sort.get(), &f))
    });
    let scale = Memo::new(move |_| {
        let c = c.get();
        let data_max = state.ledger.with(|l| {
            shown.with(|idx| {
                idx.iter()
                    .filter_map(|&i| throughput::level(&l[i], c))
                    .map(|lv| lv.output_tok_s.max)
                    .fold(0.0f64, f64::max)
            })
        });
        scale_max(data_max, target.get())
    });
    let rows = Memo::new(move |_| {
        let (c, running, scale) = (c.get(), running.get(), scale.get());
        let base_id = baseline.get();
        compare.with(|cmp| {
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
                shown.with(|idx| {
                    idx.iter()
                        .map(|&i| (l[i].set.id.clone(), row_markup(&l[i], &ctx)))
                        .collect::<Vec<_>>()
                })
            })
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
    let count = move || {
        let (n, all) = (shown.with(Vec::len), state.ledger.with(Vec::len));
        let sets = if all == 1 { "flag set" } else { "flag sets" };
        if n == all {
            format!("{all} {sets}")
        } else {
            format!("{n} of {all} {sets}")
        }
    };

    // Editing a label and notes, in place under the row.
    let editing = RwSignal::new(None::<String>);
    let edit_label = RwSignal::new(String::new());
    let edit_notes = RwSignal::new(String::new());
    let edit_error = RwSignal::new(None::<String>);
    let saving = RwSignal::new(false);
    let start_edit = move |id: String| {
        let (label, notes) = state.ledger.with_untracked(|l| {
            l.iter()
                .find(|r| r.set.id == id)
                .map(|r| {
                    (
                        r.set.label.clone().unwrap_or_default(),
                        r.set.notes.clone().unwrap_or_default(),
                    )
                })
                .unwrap_or_default()
        });
        edit_label.set(label);
        edit_notes.set(notes);
        edit_error.set(None);
        editing.set(Some(id));
    };
    let save = move || {
        let Some(id) = editing.get_untracked() else {
            return;
        };
        if saving.get_untracked() {
            return;
        }
        saving.set(true);
        edit_error.set(None);
        let (label, notes) = (edit_label.get_untracked(), edit_notes.get_untracked());
        spawn_local(async move {
            let result = api::edit_flagset(&id, &label, &notes).await;
            saving.try_set(false);
            match result {
                Ok(()) => {
                    editing.try_set(None);
                    state.ledger_gen.try_update(|g| *g += 1);
                }
                Err(e) => {
                    edit_error.try_set(Some(e));
                }
            }
        });
    };
    let editor = move |id: String| {
        let open = {
            let id = id.clone();
            move || editing.with(|e| e.as_deref() == Some(id.as_str()))
        };
        move || {
            open().then(|| {
                view! {
                    <form
                        class="fs-editor"
                        data-testid="label-editor"
                        data-flagset=id.clone()
                        on:submit=move |ev| {
                            ev.prevent_default();
                            save();
                        }
                    >
                        <label class="bench-field fs-edit-label">
                            <span class="dlg-label">"label"</span>
                            <input
                                class="flag-control"
                                type="text"
                                maxlength="80"
                                data-testid="label-input"
                                placeholder="e.g. baseline, +tilelang"
                                prop:value=move || edit_label.get()
                                on:input=move |ev| edit_label.set(event_target_value(&ev))
                            />
                        </label>
                        <label class="bench-field fs-edit-notes">
                            <span class="dlg-label">"notes"</span>
                            <textarea
                                class="flag-control"
                                rows="2"
                                maxlength="4000"
                                data-testid="notes-input"
                                prop:value=move || edit_notes.get()
                                on:input=move |ev| edit_notes.set(event_target_value(&ev))
                            ></textarea>
                        </label>
                        <div class="fs-edit-actions">
                            <button type="submit" class="btn btn-primary" data-testid="label-save" disabled=move || saving.get()>
                                "Save"
                            </button>
                            <button type="button" class="btn" data-testid="label-cancel" on:click=move |_| editing.set(None)>
                                "Cancel"
                            </button>
                        </div>
                        {move || {
                            edit_error.get().map(|e| view! { <div class="dialog-error fs-edit-error" data-testid="label-error" role="alert">{e}</div> })
                        }}
                    </form>
                }
            })
        }
    };

    // Clicks and ticks inside the rows' markup.
    let on_click = move |ev: web_sys::MouseEvent| {
        if let Some(el) = closest(&ev, "[data-testid=label-edit]")
            && let Some(id) = el.get_attribute("data-flagset")
        {
            if editing.get_untracked().as_deref() == Some(id.as_str()) {
                editing.set(None);
            } else {
                start_edit(id);
            }
        }
    };
    let on_change = move |ev: web_sys::Event| {
        let Some(el) = closest(&ev, "[data-testid=compare-check]") else {
            return;
        };
        let Some(id) = el.get_attribute("data-flagset") else {
            return;
        };
        let on = el
            .dyn_into::<web_sys::HtmlInputElement>()
            .map(|i| i.checked())
            .unwrap_or(false);
        compare.update(|c| *c = toggle_compare(c, &id, on));
    };

    // The sweep chart.
    let sweep = Memo::new(move |_| {
        let t = target.get();
        state
            .ledger
            .with(|l| shown.with(|idx| (sweep_markup(l, idx, t), sweep_legend(l, idx))))
    });

    view! {
        <div class="proc-head">
            <h2 class="proc-title">"throughput"</h2>
            <span class="proc-counts num" data-testid="flagset-count">{count}</span>
            <span class="proc-error-slot">
                {move || error.get().map(|e| view! { <span class="proc-error" data-testid="throughput-error" title=e.clone()>{e.clone()}</span> })}
            </span>
            <span class="fs-export">
                "export "
                <a href="/api/export/bench.csv" download="drainwatch-bench.csv" data-testid="export-csv">"CSV"</a>
                " · "
                <a href="/api/export/bench.json" download="drainwatch-bench.json" data-testid="export-json">"JSON"</a>
            </span>
        </div>
        <div class="fs-controls">
            <label class="fs-ctl">
                <span class="dlg-label">"concurrency"</span>
                <select
                    class="flag-control"
                    data-testid="concurrency-select"
                    prop:value=move || c.get().map(|c| c.to_string()).unwrap_or_default()
                    on:change=move |ev| want_c.set(throughput::parse_c(&event_target_value(&ev)))
                >
                    {move || {
                        let cur = c.get();
                        cs.get()
                            .into_iter()
                            .map(|v| view! { <option value=v.to_string() selected=cur == Some(v)>{format!("c={v}")}</option> })
                            .collect::<Vec<_>>()
                    }}
                </select>
            </label>
            <label class="fs-ctl">
                <span class="dlg-label">"baseline"</span>
                <select
                    class="flag-control fs-baseline"
                    data-testid="baseline-select"
                    prop:value=move || baseline.get().unwrap_or_default()
                    on:change=move |ev| want_base.set(Some(event_target_value(&ev)))
                >
                    {move || {
                        let cur = baseline.get();
                        state.ledger.with(|l| {
                            l.iter()
                                .map(|r: &FlagSetResults| {
                                    let id = r.set.id.clone();
                                    let sel = cur.as_deref() == Some(id.as_str());
                                    view! { <option value=id selected=sel>{set_name(&r.set).to_owned()}</option> }
                                })
                                .collect::<Vec<_>>()
                        })
                    }}
                </select>
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
                        if let Some(t) = throughput::parse_target(&v) {
                            target.set(t);
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
                    prop:value=move || sort.get().key()
                    on:change=move |ev| sort.set(Sort::from_key(&event_target_value(&ev)))
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
                    prop:value=move || filter.get()
                    on:input=move |ev| filter.set(event_target_value(&ev))
                />
            </label>
        </div>
        <div class="fs-list" data-testid="flagset-list" data-c=move || c.get().map(|c| c.to_string()) data-baseline=move || baseline.get()>
            <div class="fs-row fs-head">
                <span></span>
                <span>"flag set (flags vs the baseline)"</span>
                <span class="fs-axis" inner_html=move || axis_markup(scale.get())></span>
                <span class="num">"median · Δ vs baseline"</span>
                <span class="num">"TTFT p50 / p99"</span>
                <span class="num">"ITL p50 / p99"</span>
                <span></span>
            </div>
            <div class="fs-rows" on:click=on_click on:change=on_change>
                <div class="fs-overlay" aria-hidden="true">
                    <span></span>
                    <span></span>
                    <span class="fs-overlay-track">
                        <span
                            class="fs-target"
                            data-testid="target-line"
                            data-tok-s=move || format!("{:.1}", target.get())
                            style:left=move || format!("{:.2}%", target_left(target.get(), scale.get()))
                        >
                            <span class="fs-target-label">{move || format!("target {}", throughput::fmt_tok_s(Some(target.get())))}</span>
                        </span>
                    </span>
                </div>
                <For each=move || rows.with(|r| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>()) key=|id| id.clone() let:id>
                    <div class="fs-item">
                        <div class="fs-item-row" inner_html={
                            let id = id.clone();
                            move || row_html(&id)
                        }></div>
                        {editor(id.clone())}
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
        <ComparePanel compare=compare />
    }
}

/// The comparison of the two ticked sets, or a hint while fewer are ticked.
#[component]
fn ComparePanel(compare: RwSignal<Vec<String>>) -> impl IntoView {
    let state = AppState::get();
    // The two sets, when both are in the ledger.
    let pair = Memo::new(move |_| {
        compare.with(|c| match c.as_slice() {
            [a, b] => state.ledger.with(|l| {
                let find = |id: &str| l.iter().find(|r| r.set.id == id).cloned();
                find(a).zip(find(b))
            }),
            _ => None,
        })
    });
    let ids = Memo::new(move |_| {
        pair.with(|p| {
            p.as_ref()
                .map(|(a, b)| (a.set.id.clone(), b.set.id.clone()))
        })
    });
    let diff = RwSignal::new(None::<Result<SetDiff, String>>);
    Effect::new(move |_| {
        let Some((a, b)) = ids.get() else { return };
        diff.set(None);
        spawn_local(async move {
            let r = api::set_diff(&a, &b).await;
            // Only if the pair is still the one asked about.
            if ids.try_get_untracked().flatten() == Some((a, b)) {
                diff.try_set(Some(r));
            }
        });
    });
    let relaunch = Memo::new(move |_| state.server.with(|s| s.as_ref().and_then(relaunch_kind)));
    let restart_with = move |r: &FlagSetResults| {
        let Some(status) = state.server.get_untracked() else {
            return;
        };
        let Some(kind) = relaunch_kind(&status) else {
            return;
        };
        state.dialog.set(Some(DialogOpen {
            kind,
            status,
            prefill: Some(Prefill {
                id: r.set.id.clone(),
                name: set_name(&r.set).to_owned(),
                flags: r.set.flags.clone(),
            }),
        }));
    };

    move || match pair.get() {
        None => {
            let n = compare.with(Vec::len);
            let text = if n == 1 {
                "tick one more flag set to compare the two"
            } else {
                "tick two flag sets to compare their flags and results"
            };
            view! { <div class="cmp-hint" data-testid="compare-hint">{text}</div> }.into_any()
        }
        Some((a, b)) => {
            let table = compare_table(&a, &b);
            let diff_html = move || {
                diff.with(|d| match d {
                    None => r#"<span class="dlg-muted">loading…</span>"#.to_owned(),
                    Some(Err(e)) => format!(
                        r#"<span class="diff-removed">{}</span>"#,
                        crate::markup::escape(e)
                    ),
                    Some(Ok(d)) => diff_lines(&from_wire(&d.changes), "no difference"),
                })
            };
            let button = |r: FlagSetResults, which: &'static str| {
                let id = r.set.id.clone();
                let text = format!("Restart with {which} ({})…", set_name(&r.set));
                view! {
                    <button
                        class="btn btn-danger"
                        data-testid="restart-with"
                        data-flagset=id
                        disabled=move || relaunch.get().is_none()
                        title="opens the restart dialog at this set's flags; nothing happens until you confirm"
                        on:click=move |_| restart_with(&r)
                    >
                        {text}
                    </button>
                }
            };
            let title = format!("compare A {} with B {}", set_name(&a.set), set_name(&b.set));
            // Only an operator's page offers to relaunch.
            let actions = state.may_operate().then(|| {
                view! { <div class="cmp-actions">{button(a.clone(), "A")} {button(b.clone(), "B")}</div> }
            });
            let (aid, bid) = (a.set.id.clone(), b.set.id.clone());
            view! {
                <section class="cmp-panel" data-testid="compare-panel" data-a=aid data-b=bid>
                    <div class="cmp-head">
                        <h3 class="dlg-h cmp-title">{title}</h3>
                        <button type="button" class="btn btn-small" data-testid="compare-clear" on:click=move |_| compare.set(Vec::new())>
                            "Clear"
                        </button>
                    </div>
                    <div class="flag-diff" data-testid="compare-diff">
                        <span class="dlg-label">"flags A → B"</span>
                        <span class="diff-lines" inner_html=diff_html></span>
                    </div>
                    <div class="cmp-results" inner_html=table></div>
                    {actions}
                </section>
            }
            .into_any()
        }
    }
}
