//! The server panel's throughput line: live tok/s from the server's own
//! metrics, the flag set it runs, the running benchmark's progress with a
//! Cancel button (or how the last one ended), and "Benchmark…", which opens
//! the benchmark form. The line keeps its height whatever it shows.

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::components::close_button::close_button;
use crate::fetch::send_from_dialog;
use crate::ledger::form::{BenchForm, bench_request};
use crate::ledger::live::{live_text, progress_text, run_text};
use crate::ops::can_bench;
use crate::state::AppState;

/// The throughput line and the benchmark form.
#[component]
pub(crate) fn BenchBar() -> impl IntoView {
    let state = AppState::get();
    let live = Memo::new(move |_| {
        state.server.with(|s| {
            s.as_ref()
                .map_or_else(String::new, |s| live_text(s.has_metrics, &s.passive))
        })
    });
    let no_metrics = Memo::new(move |_| {
        state
            .server
            .with(|s| s.as_ref().is_some_and(|s| !s.has_metrics))
    });
    // The running set as the agent named it when it drew the ledger (its
    // label is there); its id alone until then.
    let flagset = move || {
        state
            .ledger
            .with(|l| l.as_ref().map(|l| l.running_set.clone()))
            .unwrap_or_else(|| {
                state.server.with(|s| {
                    let id = s.as_ref().and_then(|s| s.flagset.as_deref()).unwrap_or("—");
                    let id = crate::markup::escape(id);
                    format!(r#"<span class="srv-set" title="flag set {id}">flag set {id}</span>"#)
                })
            })
    };
    let enabled = Memo::new(move |_| state.server.with(|s| s.as_ref().is_some_and(can_bench)));

    let progress = Memo::new(move |_| state.bench.with(|b| b.as_ref().map(progress_text)));
    let last = Memo::new(move |_| state.last_run.with(|r| r.as_ref().map(run_text)));

    let open = RwSignal::new(false);
    // The form's values outlive the dialog: reopening it shows the last ones.
    let form = RwSignal::new(BenchForm::default());

    view! {
        <div class="srv-bench" data-testid="server-bench">
            <span
                class="srv-live num"
                class:srv-none=move || no_metrics.get()
                data-testid="live-tok-s"
                title="output tokens per second, requests running and queued, from the server's own metrics"
            >
                {move || live.get()}
            </span>
            // `display: contents`: the set's span is the line's item.
            <span class="srv-set-slot" inner_html=flagset></span>
            {bench_slot(state, progress, last)}
            {move || state.may_operate().then(|| view! {
            <button
                class="btn"
                data-testid="open-bench"
                disabled=move || !enabled.get()
                title="measure serving throughput with the running flags"
                on:click=move |_| open.set(true)
            >
                "Benchmark…"
            </button>
            })}
        </div>
        {move || open.get().then(|| bench_dialog(state, open, form, enabled))}
    }
}

/// The running benchmark's progress and its cancel button (for an
/// operator), or the last run's outcome.
fn bench_slot(
    state: AppState,
    progress: Memo<Option<String>>,
    last: Memo<Option<String>>,
) -> impl IntoView {
    let cancel_error = RwSignal::new(None::<String>);
    let cancelling = RwSignal::new(false);
    let cancel = move |_| {
        if cancelling.get_untracked() {
            return;
        }
        cancelling.set(true);
        cancel_error.set(None);
        spawn_local(async move {
            let r = api::cancel_bench().await;
            cancelling.try_set(false);
            cancel_error.try_set(r.err());
        });
    };

    view! {
    <span class="bench-slot">
        {move || match progress.get() {
            Some(text) => {
                view! {
                    <span class="bench-progress num" data-testid="bench-progress" title=text.clone()>
                        {text.clone()}
                    </span>
                    <button
                        class="btn btn-small"
                        data-testid="bench-cancel"
                        hidden=move || !state.may_operate()
                        disabled=move || cancelling.get()
                        on:click=cancel
                    >
                        "Cancel"
                    </button>
                }
                    .into_any()
            }
            None => {
                let text = cancel_error
                    .get()
                    .or_else(|| last.get())
                    .unwrap_or_else(|| "no benchmark running".to_owned());
                view! {
                    <span class="bench-idle" data-testid="bench-last" title=text.clone()>
                        {text.clone()}
                    </span>
                }
                    .into_any()
            }
        }}
    </span>
    }
}

/// A part of the form: how to read it, how to write it.
type Part = (fn(&BenchForm) -> &String, fn(&mut BenchForm, String));

/// A text input bound to a part of the form; `numeric` asks for a number
/// keypad and no autocomplete.
fn input(
    form: RwSignal<BenchForm>,
    testid: &'static str,
    placeholder: &'static str,
    numeric: bool,
    (get, set): Part,
) -> impl IntoView {
    view! {
        <input
            class="flag-control"
            type="text"
            inputmode=numeric.then_some("numeric")
            autocomplete=numeric.then_some("off")
            data-testid=testid
            placeholder=placeholder
            prop:value=move || form.with(|f| get(f).clone())
            on:input=move |ev| form.update(|f| set(f, event_target_value(&ev)))
        />
    }
}

/// One labelled number field of the form.
fn field(
    form: RwSignal<BenchForm>,
    label: &'static str,
    testid: &'static str,
    placeholder: &'static str,
    get: fn(&BenchForm) -> &String,
    set: fn(&mut BenchForm, String),
) -> impl IntoView {
    view! {
        <label class="bench-field">
            <span class="dlg-label">{label}</span>
            {input(form, testid, placeholder, true, (get, set))}
        </label>
    }
}

/// The benchmark form, a modal: what to change from the server's defaults.
fn bench_dialog(
    state: AppState,
    open: RwSignal<bool>,
    form: RwSignal<BenchForm>,
    enabled: Memo<bool>,
) -> impl IntoView {
    let error = RwSignal::new(None::<String>);
    let sending = RwSignal::new(false);
    let close = move || open.set(false);
    let handle = window_event_listener(ev::keydown, move |ev| {
        if ev.key() == "Escape" {
            open.set(false);
        }
    });
    on_cleanup(move || handle.remove());
    let submit = move || start(form, open, sending, error);
    let name = state
        .server
        .with_untracked(|s| s.as_ref().map(|s| s.name.clone()))
        .unwrap_or_default();

    view! {
        <div class="modal-backdrop">
            <div class="modal dialog bench-dialog" role="dialog" aria-modal="true" aria-label="benchmark" data-testid="bench-dialog">
                <form on:submit=move |ev| {
                    ev.prevent_default();
                    submit();
                }>
                    <header class="modal-head">
                        <h2 class="modal-title">{format!("Benchmark {name}")}</h2>
                        {close_button(close, None)}
                    </header>
                    <p class="dlg-explain">
                        "Loads the running server with streaming requests at each concurrency, a few repeats each, and records throughput and latency for its flag set. Empty fields keep the server's configured defaults."
                    </p>
                    <div class="bench-grid">
                        {field(form, "concurrency (list)", "bench-concurrency", "e.g. 1,4,16,64", |f| &f.concurrency, |f, v| f.concurrency = v)}
                        {field(form, "prompts per repeat", "bench-prompts", "default", |f| &f.prompts, |f, v| f.prompts = v)}
                        {field(form, "input length (tokens)", "bench-input-len", "default", |f| &f.input_len, |f, v| f.input_len = v)}
                        {field(form, "output length (tokens)", "bench-output-len", "default", |f| &f.output_len, |f, v| f.output_len = v)}
                        {field(form, "repeats (3 or more)", "bench-repeats", "default", |f| &f.repeats, |f, v| f.repeats = v)}
                        {field(form, "warm-up requests", "bench-warmup", "default", |f| &f.warmup, |f, v| f.warmup = v)}
                        <label class="bench-field">
                            <span class="dlg-label">"API"</span>
                            <select
                                class="flag-control"
                                data-testid="bench-api"
                                prop:value=move || form.with(|f| f.api.clone())
                                on:change=move |ev| form.update(|f| f.api = event_target_value(&ev))
                            >
                                <option value="">"(default)"</option>
                                <option value="completions">"completions"</option>
                                <option value="chat">"chat"</option>
                                <option value="generate">"generate (SGLang)"</option>
                            </select>
                        </label>
                    </div>
                    {optional_sections(form)}
                    <div class="dialog-error-slot">
                        {move || {
                            error.get().map(|text| {
                                view! { <div class="dialog-error" data-testid="bench-error" role="alert">{text}</div> }
                            })
                        }}
                    </div>
                    <footer class="modal-foot">
                        <button type="button" class="btn" data-testid="bench-close" on:click=move |_| close()>
                            "Cancel"
                        </button>
                        <button
                            type="submit"
                            class="btn btn-primary"
                            data-testid="bench-start"
                            disabled=move || sending.get()
                            title=move || if enabled.get() { "" } else { "the server is not ready, or something else runs: drainwatch will say why" }
                        >
                            {move || if sending.get() { "starting…" } else { "Start benchmark" }}
                        </button>
                    </footer>
                </form>
            </div>
        </div>
    }
}

/// Starts the benchmark the form asks for (unless one is being sent): the
/// dialog closes when drainwatch takes it, else says why not.
fn start(
    form: RwSignal<BenchForm>,
    open: RwSignal<bool>,
    sending: RwSignal<bool>,
    error: RwSignal<Option<String>>,
) {
    if sending.get_untracked() {
        return;
    }
    let req = match form.with_untracked(bench_request) {
        Ok(r) => r,
        Err(e) => {
            error.set(Some(e));
            return;
        }
    };
    let request = async move { api::start_bench(&req).await };
    send_from_dialog(sending, error, request, move || open.set(false));
}

/// The dialog's optional parts: the workload, the open loop and goodput,
/// the correctness check.
fn optional_sections(form: RwSignal<BenchForm>) -> impl IntoView {
    view! {
        <section class="dlg-section">
            <h3 class="dlg-h">"workload (optional)"</h3>
            <p class="dlg-explain">"Random prompts unless a dataset file (from the server's datasets directory: ShareGPT JSON or JSONL) or shared prefixes are given."</p>
            <div class="bench-grid">
                {field(form, "dataset file", "bench-dataset", "e.g. sharegpt-mini.json", |f| &f.dataset, |f, v| f.dataset = v)}
                {field(form, "shared-prefix groups", "bench-prefix-groups", "none", |f| &f.prefix_groups, |f, v| f.prefix_groups = v)}
                {field(form, "prefix length (words)", "bench-prefix-len", "none", |f| &f.prefix_len, |f, v| f.prefix_len = v)}
            </div>
        </section>
        <section class="dlg-section">
            <h3 class="dlg-h">"open loop and goodput (optional)"</h3>
            <p class="dlg-explain">"Request rates send at that pace whatever the server's (Poisson arrivals), instead of the concurrency; goodput counts the requests that met every objective given."</p>
            <div class="bench-grid">
                {field(form, "request rates (req/s)", "bench-rates", "e.g. 2,4,8", |f| &f.rates, |f, v| f.rates = v)}
                {field(form, "max in flight", "bench-max-in-flight", "no cap", |f| &f.max_in_flight, |f, v| f.max_in_flight = v)}
                {field(form, "SLO: TTFT at most (ms)", "bench-slo-ttft", "default", |f| &f.slo_ttft, |f, v| f.slo_ttft = v)}
                {field(form, "SLO: TPOT at most (ms)", "bench-slo-tpot", "default", |f| &f.slo_tpot, |f, v| f.slo_tpot = v)}
                {field(form, "SLO: E2E at most (ms)", "bench-slo-e2e", "default", |f| &f.slo_e2e, |f, v| f.slo_e2e = v)}
            </div>
        </section>
        <section class="dlg-section">
            <h3 class="dlg-h">"correctness check (optional)"</h3>
            <div class="bench-correct">
                {input(form, "bench-correct-prompt", "prompt, e.g. What is 2+2? Answer with a number.", false, (|f| &f.prompt, |f, v| f.prompt = v))}
                {input(form, "bench-correct-expect", "the answer contains, e.g. 4", false, (|f| &f.expect, |f, v| f.expect = v))}
            </div>
        </section>
    }
}
