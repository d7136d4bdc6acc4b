//! The plan builder, a modal: pick the flags to vary from the allow-list
//! and their values (boxes to tick for enums and booleans, a list for
//! numbers), the benchmark every step runs, what a failure leads to, the
//! order, a target. It shows the number of combinations as it is edited, and
//! drainwatch's own check of the plan (a dry run): the steps in the order
//! they would run and the time they would take from past phase times, or
//! what is wrong. Start sends it; the panel then follows the campaign.

use leptos::ev;
use leptos::prelude::*;
use leptos::wasm_bindgen::JsCast;
use shared::flags::FlagSpec;

use crate::api;
use crate::campaign::plan::{Builder, Laid, check_markup, form};
use crate::components::close_button::close_button;
use crate::fetch::{SingleFlight, send_from_dialog};
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
    Laid(Box<Laid>),
    Refused(String),
}

fn body(state: AppState, specs: Vec<FlagSpec>, defaults: shared::flags::Flags) -> impl IntoView {
    let plan = RwSignal::new(Builder::new(&specs));
    let check = RwSignal::new(Check::Waiting);
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let json = Memo::new(move |_| plan.with(Builder::to_json));
    keep_checked(json, check);
    let start = move || {
        let Ok(text) = json.get_untracked() else {
            return;
        };
        send_from_dialog(sending, error, api::post_plan(text, false), move || {
            state.plan_open.set(false)
        });
    };

    // The form is text (`form`); every edit reaches the plan through the
    // event it bubbles up here, named by its field.
    let fields = form(&specs, &defaults);
    let on_edit = move |ev: web_sys::Event| edited(plan, &ev);
    let summary = move || {
        let n = plan.with(Builder::combinations);
        check.with(|c| match c {
            Check::Laid(c) => check_markup(n, Some(c), None),
            Check::Refused(why) => check_markup(n, None, Some(why)),
            Check::Waiting => check_markup(n, None, None),
        })
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
                    <div class="plan-form" inner_html=fields on:change=on_edit on:input=on_edit></div>
                    <div class="plan-summary" inner_html=summary></div>
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

/// drainwatch's own check of the plan (`json`) into `check`, as the plan changes.
fn keep_checked(json: Memo<Result<String, String>>, check: RwSignal<Check>) {
    let flight = SingleFlight::new();
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
}

/// An edit in the form, bubbled up from its field: into the plan.
fn edited(plan: RwSignal<Builder>, ev: &web_sys::Event) {
    let Some(el) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
    else {
        return;
    };
    if let Some(input) = el.dyn_ref::<web_sys::HtmlInputElement>() {
        let (text, ticked) = (input.value(), input.checked());
        if let Some(flag) = el.get_attribute("data-flag") {
            if input.type_() == "checkbox" {
                let value = el.get_attribute("data-value").unwrap_or_default();
                plan.update(|p| p.set(&flag, &value, ticked));
            } else {
                plan.update(|p| p.set_list(&flag, &text));
            }
        } else if let Some(field) = el.get_attribute("data-field") {
            plan.update(|p| p.edit(&field, &text, ticked));
        }
    } else if let (Some(select), Some(field)) = (
        el.dyn_ref::<web_sys::HtmlSelectElement>(),
        el.get_attribute("data-field"),
    ) {
        plan.update(|p| p.edit(&field, &select.value(), false));
    }
}
