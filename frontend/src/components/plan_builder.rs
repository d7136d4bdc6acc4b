//! The plan builder, a modal: pick the flags to vary from the allow-list
//! and their values (boxes to tick for enums and booleans, a list for
//! numbers), the benchmark every step runs, what a failure leads to, the
//! order, a target. It shows the number of combinations as it is edited, and
//! drainwatch's own check of the plan (a dry run): the steps in the order
//! they would run and the time they would take from past phase times, or
//! what is wrong. Start sends it; the panel then follows the campaign.

use leptos::ev;
use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::wasm_bindgen::JsCast;
use shared::campaign::{Campaign, FailurePolicy, PlanOrder};
use shared::flags::FlagSpec;

use crate::api;
use crate::campaign::duration;
use crate::campaign::plan::{Builder, flag_rows};
use crate::components::close_button::close_button;
use crate::fetch::SingleFlight;
use crate::state::AppState;

/// The builder, while it is open.
#[component]
pub(crate) fn PlanBuilder() -> impl IntoView {
    let state = AppState::get();
    let handle = window_event_listener(ev::keydown, move |ev| {
        if ev.key() == "Escape" && state.plan_open.get_untracked() {
            state.plan_open.set(false);
        }
    });
    on_cleanup(move || handle.remove());
    move || {
        (state.plan_open.get())
            .then(|| state.server.get_untracked())
            .flatten()
            .map(|s| body(state, s.allowed, s.default_flags))
    }
}

/// What the dry run said of the plan as it stands.
#[derive(Debug, Clone, PartialEq)]
enum Check {
    Waiting,
    Laid(Box<Campaign>),
    Refused(String),
}

fn body(state: AppState, specs: Vec<FlagSpec>, defaults: shared::flags::Flags) -> impl IntoView {
    let plan = RwSignal::new(Builder::new(&specs));
    let check = RwSignal::new(Check::Waiting);
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let flight = SingleFlight::new();
    let json = Memo::new(move |_| plan.with(Builder::to_json));
    // drainwatch's own check, as the plan changes.
    // The job reads the plan when it runs: a change while one check is out
    // is checked right after it, as it stands then.
    Effect::new(move |_| match json.get() {
        Err(why) => check.set(Check::Refused(why)),
        Ok(_) => flight.run(move || async move {
            let Some(Ok(text)) = json.try_get_untracked() else {
                return false;
            };
            let answer = match api::post_plan(text.clone(), true).await {
                Ok(Some(c)) => Check::Laid(Box::new(c)),
                Ok(None) => Check::Waiting,
                Err(e) => Check::Refused(e),
            };
            // Only if the plan is still the one checked.
            if json.try_get_untracked() != Some(Ok(text)) {
                return true;
            }
            check.try_set(answer).is_none()
        }),
    });
    let start = move || {
        let Ok(text) = json.get_untracked() else {
            return;
        };
        sending.set(true);
        error.set(None);
        spawn_local(async move {
            let r = api::post_plan(text, false).await;
            if sending.try_set(false).is_some() {
                return;
            }
            match r {
                Ok(_) => state.plan_open.set(false),
                Err(e) => {
                    error.try_set(Some(e));
                }
            }
        });
    };

    // The flags and their values are text (`flag_rows`); what is ticked or
    // typed reaches the plan through the events they bubble up here.
    let rows = flag_rows(&specs, &defaults);
    let on_edit = move |ev: web_sys::Event| {
        let Some(input) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
        else {
            return;
        };
        let Some(flag) = input.get_attribute("data-flag") else {
            return;
        };
        if input.type_() == "checkbox" {
            let value = input.get_attribute("data-value").unwrap_or_default();
            plan.update(|p| p.set(&flag, &value, input.checked()));
        } else {
            plan.update(|p| p.set_list(&flag, &input.value()));
        }
    };

    let text_field = move |label: &'static str,
                           testid: &'static str,
                           get: fn(&Builder) -> String,
                           set: fn(&mut Builder, String)| {
        view! {
            <label class="plan-field">
                <span class="dlg-label">{label}</span>
                <input type="text" data-testid=testid prop:value=move || plan.with(get) on:input=move |ev| plan.update(|p| set(p, event_target_value(&ev))) />
            </label>
        }
    };

    let summary = move || {
        let n = plan.with(Builder::combinations);
        match check.get() {
            Check::Laid(c) => {
                let steps = c.steps.len() as u64;
                let time = c
                    .info
                    .step_estimate_ms
                    .map(|ms| format!(" · ≈ {} at past phase and benchmark times", duration(ms * steps)))
                    .unwrap_or_else(|| " · time: after the first step".to_owned());
                let order: Vec<String> = c.steps.iter().take(12).map(|s| (s.plan_index + 1).to_string()).collect();
                let more = if c.steps.len() > 12 { " …" } else { "" };
                view! {
                    <div class="plan-ok" data-testid="plan-check" data-steps=steps.to_string()>
                        {format!("{steps} steps{time}")}
                        <span class="cmp-muted">{format!(" · runs sets {}{more}", order.join(", "))}</span>
                    </div>
                }
                .into_any()
            }
            Check::Refused(why) => view! {
                <div class="plan-bad" data-testid="plan-check" data-steps="0">{format!("{n} combinations · {why}")}</div>
            }
            .into_any(),
            Check::Waiting => view! { <div class="plan-ok" data-testid="plan-check">{format!("{n} combinations")}</div> }.into_any(),
        }
    };

    view! {
        <div class="modal-backdrop">
            <div class="modal dialog plan-builder" role="dialog" aria-modal="true" aria-label="new campaign" data-testid="plan-builder">
                <form on:submit=move |ev| { ev.prevent_default(); start(); }>
                    <header class="modal-head">
                        <h2 class="modal-title">"New campaign"</h2>
                        {close_button(move || state.plan_open.set(false), None)}
                    </header>
                    <p class="dlg-explain">
                        "Every combination of the values ticked below becomes a step: a guarded restart into that flag set, the correctness check, then the benchmark. "
                        "The first combination is the baseline every other is compared with."
                    </p>
                    {text_field("name", "plan-name", |p| p.name.clone(), |p, v| p.name = v)}
                    <section class="dlg-section">
                        <h3 class="dlg-h">"flags to vary"</h3>
                        <div class="plan-flags" inner_html=rows on:change=on_edit on:input=on_edit></div>
                    </section>
                    <section class="dlg-section plan-bench">
                        <h3 class="dlg-h">"every step's benchmark"</h3>
                        {text_field("concurrency", "plan-concurrency", |p| p.concurrency.clone(), |p, v| p.concurrency = v)}
                        {text_field("repeats", "plan-repeats", |p| p.repeats.clone(), |p, v| p.repeats = v)}
                        {text_field("prompts per repeat", "plan-prompts", |p| p.num_prompts.clone(), |p, v| p.num_prompts = v)}
                        {text_field("target tok/s", "plan-target", |p| p.target.clone(), |p, v| p.target = v)}
                    </section>
                    <section class="dlg-section plan-policy">
                        <label class="plan-field">
                            <span class="dlg-label">"when a step fails"</span>
                            <select data-testid="plan-on-failure" on:change=move |ev| {
                                let v = event_target_value(&ev);
                                plan.update(|p| p.on_failure = match v.as_str() { "retry" => FailurePolicy::Retry, "stop" => FailurePolicy::Stop, _ => FailurePolicy::Continue });
                            }>
                                <option value="continue">"record it and go on"</option>
                                <option value="retry">"retry once"</option>
                                <option value="stop">"stop the campaign"</option>
                            </select>
                        </label>
                        <label class="plan-field">
                            <span class="dlg-label">"order"</span>
                            <select data-testid="plan-order" on:change=move |ev| {
                                let v = event_target_value(&ev);
                                plan.update(|p| p.order = if v == "env_first" { PlanOrder::EnvFirst } else { PlanOrder::Given });
                            }>
                                <option value="given">"as written"</option>
                                <option value="env_first">"group by arguments (environment changes first)"</option>
                            </select>
                        </label>
                        <label class="plan-check-box">
                            <input type="checkbox" prop:checked=move || plan.with(|p| p.reuse) on:change=move |ev| plan.update(|p| p.reuse = event_target_checked(&ev)) />
                            " reuse a set already measured with these settings on this server version"
                        </label>
                    </section>
                    <div class="plan-summary">{summary}</div>
                    <div class="dialog-error-slot">
                        {move || error.get().map(|text| view! { <div class="dialog-error" data-testid="plan-error" role="alert">{text}</div> })}
                    </div>
                    <footer class="modal-foot">
                        <button type="button" class="btn" on:click=move |_| state.plan_open.set(false)>"Cancel"</button>
                        <button
                            type="submit"
                            class="btn btn-primary"
                            data-testid="plan-start"
                            disabled=move || sending.get() || !matches!(check.get(), Check::Laid(_))
                        >
                            {move || if sending.get() { "starting…" } else { "Start campaign" }}
                        </button>
                    </footer>
                </form>
            </div>
        </div>
    }
}
