//! The campaign: the newest one's name and state, how far it is and how long
//! it has left, the best set so far against the target, the step running
//! now; a row per step (state, flags against the baseline, result, Δ, time,
//! its restart record); the comparison chart (metric against p99 TTFT, the
//! Pareto frontier, the target), where a point opens its step — its flags,
//! its restart record, "restart with this set"; and each flag's effect.
//! Operators pause, resume, cancel, start a new one (the plan builder) and
//! test the webhooks.
//!
//! The campaign is fetched whole when a new one appears (and after every
//! snapshot); `campaign` and `campaign_step` messages keep it current. The
//! read-only parts are text from [`crate::campaign`].

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::wasm_bindgen::JsCast;
use shared::campaign::{Campaign, CampaignState};
use shared::restart::OpKind;

use crate::api;
use crate::campaign::pareto::{PH, PW, pareto_markup};
use crate::campaign::rows::step_rows;
use crate::campaign::{best_markup, effects_markup, progress, state_key, time_left};
use crate::components::phase_badge::PhaseBadge;
use crate::fetch::SingleFlight;
use crate::flags::diff;
use crate::markup::diff_lines;
use crate::state::{AppState, DialogOpen, Prefill};

/// The element a click inside a markup block was on: its `data-act` and
/// its element.
fn acted_on(ev: &web_sys::MouseEvent) -> Option<(String, web_sys::Element)> {
    let target = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    let el = target.closest("[data-act]").ok()??;
    Some((el.get_attribute("data-act")?, el))
}

/// Keeps `state.campaign` the newest campaign, fetched whole.
fn follow(state: AppState) {
    let flight = SingleFlight::new();
    let head_id = Memo::new(move |_| state.campaign_head.with(|h| h.as_ref().map(|h| h.id)));
    Effect::new(move |_| {
        state.campaign_gen.track();
        let Some(id) = head_id.get() else { return };
        flight.run(move || async move {
            match api::campaign(id).await {
                Ok(c) => state.campaign.try_set(Some(c)).is_none(),
                Err(e) => state
                    .notice
                    .try_set(Some(format!("could not read campaign #{id}: {e}")))
                    .is_none(),
            }
        });
    });
}

/// The panel.
#[component]
pub(crate) fn CampaignPanel() -> impl IntoView {
    let state = AppState::get();
    follow(state);
    let selected = RwSignal::new(None::<u32>);
    let error = RwSignal::new(None::<String>);
    let sending = RwSignal::new(false);

    let act = move |verb: &'static str| {
        let Some(id) = state
            .campaign
            .with_untracked(|c| c.as_ref().map(|c| c.info.id))
        else {
            return;
        };
        sending.set(true);
        error.set(None);
        spawn_local(async move {
            let r = api::campaign_act(id, verb).await;
            sending.try_set(false);
            if let Err(e) = r {
                error.try_set(Some(e));
            }
        });
    };
    let test_hooks = move |_| {
        error.set(None);
        spawn_local(async move {
            let text = match api::test_webhooks().await {
                Ok(list) => list
                    .iter()
                    .map(|d| match (d.ok, &d.error) {
                        (true, _) => format!("{}: delivered", d.name),
                        (false, e) => format!("{}: {}", d.name, e.as_deref().unwrap_or("failed")),
                    })
                    .collect::<Vec<_>>()
                    .join(" · "),
                Err(e) => e,
            };
            error.try_set(Some(text));
        });
    };

    let state_of = Memo::new(move |_| state.campaign.with(|c| c.as_ref().map(|c| c.info.state)));
    let now = move || state.now_ms.get() as u64;
    let with_c = move |f: fn(&Campaign, u64) -> String| {
        move || {
            state
                .campaign
                .with(|c| c.as_ref().map(|c| f(c, 0)).unwrap_or_default())
        }
    };
    let on_click = move |ev: web_sys::MouseEvent| {
        let Some((act, el)) = acted_on(&ev) else {
            return;
        };
        let id = el
            .get_attribute("data-id")
            .and_then(|v| v.parse::<i64>().ok());
        let step = el
            .get_attribute("data-step")
            .and_then(|v| v.parse::<u32>().ok());
        match act.as_str() {
            "restart" => {
                if let Some(id) = id {
                    state.detail.set(Some(id));
                }
            }
            "point" => selected.set(step),
            _ => {}
        }
    };

    let may = move || state.may_operate();
    let buttons = move || {
        let s = state_of.get()?;
        may().then(|| {
            view! {
                <span class="cpg-actions">
                    {matches!(s, CampaignState::Running).then(|| view! {
                        <button type="button" class="btn" data-testid="campaign-pause" disabled=move || sending.get() on:click=move |_| act("pause")>"Pause"</button>
                    })}
                    {matches!(s, CampaignState::Paused | CampaignState::Pausing).then(|| view! {
                        <button type="button" class="btn" data-testid="campaign-resume" disabled=move || sending.get() on:click=move |_| act("resume")>"Resume"</button>
                    })}
                    {(!s.is_over()).then(|| view! {
                        <button type="button" class="btn btn-danger" data-testid="campaign-cancel" disabled=move || sending.get() on:click=move |_| act("cancel")>"Cancel"</button>
                    })}
                </span>
            }
        })
    };

    // The step running now: its phase from the server's status.
    let current = move || {
        state.campaign.with(|c| {
            let c = c.as_ref()?;
            let i = c.info.current?;
            let s = c.steps.get(i as usize)?;
            (!s.state.is_final()).then(|| (i, s.state.label(), c.info.steps))
        })
    };
    let phase = Signal::derive(move || {
        state.server.with(|s| {
            s.as_ref()
                .map_or(shared::restart::Phase::Stopped, |s| s.phase)
        })
    });

    let point_box = move || {
        let step = selected.get()?;
        state.campaign.with(|c| {
            let c = c.as_ref()?;
            let s = c.steps.iter().find(|s| s.index == step)?.clone();
            let base = c.baseline().map(|b| b.flags.clone()).unwrap_or_default();
            let changes = diff_lines(&diff(&base, &s.flags), "the baseline's flags");
            let metric = s
                .result
                .as_ref()
                .map(|r| format!("{} {}", shared::units::tok_num(r.metric().median), r.metric_unit()))
                .unwrap_or_default();
            let restart_id = s.restart_id;
            let flags = s.flags.clone();
            let flagset = s.flagset.clone();
            let name = s.label.clone().unwrap_or_else(|| format!("step {}", s.index + 1));
            Some(view! {
                <div class="cpg-point" data-testid="campaign-point" data-step=step.to_string()>
                    <div class="cpg-point-head">
                        <b>{format!("step {}", step + 1)}</b>
                        <span class="num">{metric}</span>
                        <span class="cpg-muted num">{flagset.clone()}</span>
                    </div>
                    <div class="diff-lines" inner_html=changes></div>
                    <div class="cpg-point-actions">
                        {restart_id.map(|id| view! {
                            <button type="button" class="btn" data-testid="campaign-point-record" on:click=move |_| state.detail.set(Some(id))>"Restart record"</button>
                        })}
                        {move || may().then(|| {
                            let (flags, flagset, name) = (flags.clone(), flagset.clone(), name.clone());
                            let status = state.server.get();
                            let held = status.as_ref().is_some_and(|s| s.held_by.is_some() || s.operation.is_some());
                            view! {
                                <button
                                    type="button"
                                    class="btn"
                                    data-testid="campaign-point-restart"
                                    disabled=held
                                    title=if held { "the server is busy: a campaign or an operation holds it" } else { "open the restart dialog with this set's flags" }
                                    on:click=move |_| {
                                        if let Some(status) = state.server.get_untracked() {
                                            state.dialog.set(Some(DialogOpen {
                                                kind: OpKind::Restart,
                                                status,
                                                prefill: Some(Prefill { id: flagset.clone(), name: name.clone(), flags: flags.clone() }),
                                            }));
                                        }
                                    }
                                >
                                    "Restart with this set…"
                                </button>
                            }
                        })}
                    </div>
                </div>
            })
        })
    };

    view! {
        <div class="proc-head">
            <h2 class="proc-title">"campaign"</h2>
            {move || state.campaign.with(|c| c.as_ref().map(|c| {
                let name = format!("#{} {}", c.info.id, c.info.name);
                view! {
                    <span class="cpg-name" data-testid="campaign-name">{name}</span>
                    <span class="cpg-state" data-testid="campaign-state" data-state=state_key(c.info.state)>{c.info.state.label()}</span>
                }
            }))}
            {buttons}
            <span class="proc-spacer"></span>
            {move || state.campaign.with(|c| c.as_ref().map(|c| {
                let id = c.info.id;
                view! {
                    <a class="link" href=format!("/api/campaigns/{id}/export.csv") download="">"CSV"</a>
                    <a class="link" href=format!("/api/campaigns/{id}/export.json") download="">"JSON"</a>
                }
            }))}
            {move || may().then(|| view! {
                <button type="button" class="btn" data-testid="test-webhooks" on:click=test_hooks>"Test webhooks"</button>
                <button type="button" class="btn btn-primary" data-testid="new-campaign" on:click=move |_| state.plan_open.set(true)>"New campaign…"</button>
            })}
        </div>
        <div class="notice-line" data-testid="campaign-message">{move || error.get()}</div>
        {move || match state.campaign.with(Option::is_some) {
            false => view! {
                <p class="cpg-empty" data-testid="campaign-empty">
                    "No campaign yet. A campaign restarts the server into each flag set of a plan — a list, or a grid of values — "
                    "checks its answer and benchmarks it, unattended, every restart held to its guards; the results fill the ledger below."
                </p>
            }.into_any(),
            true => view! {
                <div class="cpg-summary">
                    <div class="cpg-progress">
                        <span class="num" data-testid="campaign-progress">{move || state.campaign.with(|c| c.as_ref().map(|c| progress(c).0).unwrap_or_default())}</span>
                        <div class="cpg-bar"><div class="cpg-bar-fill" style:width=move || format!("{:.1}%", state.campaign.with(|c| c.as_ref().map_or(0.0, |c| progress(c).1)))></div></div>
                        <span class="num cpg-eta" data-testid="campaign-eta">{move || state.campaign.with(|c| c.as_ref().map(|c| time_left(c, now())).unwrap_or_default())}</span>
                    </div>
                    <div class="cpg-best-line" inner_html=with_c(|c, _| best_markup(c))></div>
                    <div class="cpg-now">
                        {move || current().map(|(i, label, n)| view! {
                            <span data-testid="campaign-current">{format!("step {} of {n}: {label}", i + 1)}</span>
                            <PhaseBadge phase=phase />
                        })}
                        {move || state.campaign.with(|c| c.as_ref().and_then(|c| c.info.reason.clone())).map(|r| view! {
                            <span class="cpg-reason" data-testid="campaign-reason">{r}</span>
                        })}
                    </div>
                </div>
                <div class="cpg-body" on:click=on_click>
                    <div class="cpg-steps">
                        <table class="cpg-table">
                            <colgroup>
                                <col style="width:3.2em" /><col style="width:9.5em" /><col /><col style="width:10.5em" /><col style="width:6em" /><col style="width:6em" /><col style="width:4.5em" /><col style="width:4.2em" />
                            </colgroup>
                            <thead><tr><th class="num">"#"</th><th>"state"</th><th>"flags vs baseline"</th><th class="num">"result"</th><th class="num">"Δ"</th><th class="num">"p99 TTFT"</th><th class="num">"took"</th><th>"record"</th></tr></thead>
                            <tbody data-testid="campaign-steps" inner_html=move || state.campaign.with(|c| c.as_ref().map(|c| step_rows(c, now())).unwrap_or_default())></tbody>
                        </table>
                    </div>
                    <div class="cpg-side">
                        <svg class="chart pareto" data-testid="pareto-chart" viewBox=format!("0 0 {PW} {PH}") preserveAspectRatio="xMidYMid meet" role="img" aria-label="throughput against p99 time to first token"
                            inner_html=move || state.campaign.with(|c| c.as_ref().map(|c| pareto_markup(c, selected.get())).unwrap_or_default())>
                        </svg>
                        {point_box}
                        <h3 class="cpg-h">"effect of each flag"</h3>
                        <ul class="cpg-effects" data-testid="campaign-effects" inner_html=with_c(|c, _| effects_markup(c))></ul>
                    </div>
                </div>
            }.into_any(),
        }}
    }
}
