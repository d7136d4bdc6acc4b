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
use shared::campaign::CampaignState;
use shared::restart::OpKind;

use crate::api;
use crate::campaign::pareto::{PH, PW, pareto_markup};
use crate::campaign::rows::{Drawn, ROW_PX, drawn, window};
use crate::campaign::{best_markup, effects_markup, progress, state_key, time_left};
use crate::chart::empty_detail;
use crate::components::drain_chart::DrainChart;
use crate::components::phase_badge::PhaseBadge;
use crate::components::restart_detail::live_detail;
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

/// Brings the steps' table body from `prev` to `next`: the rows that changed
/// only, when the window and the plan are the same; else the whole body.
fn patch(el: &web_sys::Element, prev: &Drawn, next: &Drawn) {
    if prev.range != next.range || prev.rows.len() != next.rows.len() || prev.rows.is_empty() {
        el.set_inner_html(&next.html());
        return;
    }
    let children = el.children();
    let offset = u32::from(next.above_px > 0.0);
    for (i, (a, b)) in prev.rows.iter().zip(&next.rows).enumerate() {
        if a != b
            && let Some(tr) = children.item(i as u32 + offset)
        {
            tr.set_outer_html(b);
        }
    }
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

    // What the panel's parts are rebuilt on: never the whole campaign, which
    // changes with every step.
    let loaded = Memo::new(move |_| state.campaign.with(Option::is_some));
    let title = Memo::new(move |_| {
        state.campaign.with(|c| {
            c.as_ref()
                .map(|c| (c.info.id, c.info.name.clone(), c.info.state))
        })
    });
    let reason = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().and_then(|c| c.info.reason.clone()))
    });
    // How long an ended campaign took.
    let ended = Memo::new(move |_| {
        state.campaign.with(|c| {
            let i = &c.as_ref()?.info;
            Some(i.finished_at_ms?.saturating_sub(i.created_at_ms))
        })
    });
    let state_of = Memo::new(move |_| state.campaign.with(|c| c.as_ref().map(|c| c.info.state)));
    let now = move || state.now_ms.get() as u64;
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
    let current = Memo::new(move |_| {
        state.campaign.with(|c| {
            let c = c.as_ref()?;
            let i = c.info.current?;
            let s = c.steps.get(i as usize)?;
            (!s.state.is_final()).then(|| (i, s.state.label(), c.info.steps, s.started_at_ms))
        })
    });
    let phase = Signal::derive(move || {
        state.server.with(|s| {
            s.as_ref()
                .map_or(shared::restart::Phase::Stopped, |s| s.phase)
        })
    });

    // The drain chart of the running step's restart, else of the newest one.
    let live_restart = Memo::new(move |_| {
        state.campaign.with(|c| {
            let c = c.as_ref()?;
            let current = c
                .info
                .current
                .and_then(|i| c.steps.get(i as usize))
                .filter(|s| !s.state.is_final())
                .and_then(|s| s.restart_id);
            current.or_else(|| {
                c.steps
                    .iter()
                    .filter(|s| s.restart_id.is_some())
                    .max_by_key(|s| s.started_at_ms)
                    .and_then(|s| s.restart_id)
            })
        })
    });
    let bench_line = move || {
        state.bench.with(|b| {
            b.as_ref().map(|b| {
                format!(
                    "benchmark #{}: {} · repeat {} of {} · {} of {} requests · {} tok/s",
                    b.run_id,
                    match b.request_rate {
                        Some(r) => format!("{} req/s", shared::units::rate_num(r)),
                        None => format!("concurrency {}", b.concurrency),
                    },
                    b.repeat + 1,
                    b.repeats.max(1),
                    b.done,
                    b.total,
                    shared::units::tok_num(b.output_tok_s)
                )
            })
        })
    };
    let live = move || {
        live_restart.get().map(|id| {
            let (loaded, _) = live_detail(state, id);
            view! {
                <div class="cpg-live-head">
                    <button type="button" class="link" data-act="restart" data-id=id.to_string()>{format!("restart #{id}")}</button>
                    <span class="cpg-muted num" data-testid="campaign-bench-line">{bench_line}</span>
                </div>
                <DrainChart detail=Signal::derive(move || loaded.get().unwrap_or_else(|| empty_detail(id))) />
            }
        })
    };

    // The rows drawn: a window around what the steps' box shows.
    let scroll = RwSignal::new(0.0f64);
    let view_px = RwSignal::new(700.0f64);
    let count = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().map_or(0, |c| c.steps.len()))
    });
    let win = Memo::new(move |_| window(count.get(), scroll.get(), view_px.get()));
    let steps_box = NodeRef::<leptos::html::Div>::new();
    // The box follows the running step while the one before it was in view
    // (nobody scrolled away to read something else).
    // Without reading the page's layout (which would make the browser lay
    // out everything at once): where the box is scrolled to comes from its
    // scroll events.
    Effect::new(move |prev: Option<Option<u32>>| {
        let now = current.with(|c| c.map(|c| c.0));
        if let (Some(i), Some(el)) = (now, steps_box.get_untracked()) {
            let shown = win.get_untracked();
            let was_seen = prev.flatten().is_none_or(|p| shown.contains(&(p as usize)));
            let (top, view) = (scroll.get_untracked(), view_px.get_untracked().min(420.0));
            let row = f64::from(i) * ROW_PX;
            if was_seen && (row < top || row + 2.0 * ROW_PX > top + view) {
                el.set_scroll_top((row - 3.0 * ROW_PX).max(0.0) as i32);
            }
        }
        now
    });
    // The markup of each part, as a memo: a message that changes nothing a
    // part shows (most change one row, or only the header) leaves its
    // element alone, so the browser parses and lays out only what changed.
    let rows = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().map(|c| drawn(c, win.get())).unwrap_or_default())
    });
    // The rows are patched, not redrawn: a step that changed replaces its own
    // row (the browser styles and lays out that row), a new window or plan
    // redraws the body.
    let tbody = NodeRef::<leptos::html::Tbody>::new();
    let shown = StoredValue::new(Drawn::default());
    Effect::new(move |_| {
        let Some(el) = tbody.get() else { return };
        rows.with(|next| {
            shown.update_value(|prev| {
                patch(&el, prev, next);
                prev.clone_from(next);
            })
        });
    });
    let chart = Memo::new(move |_| {
        state.campaign.with(|c| {
            c.as_ref()
                .map(|c| pareto_markup(c, selected.get()))
                .unwrap_or_default()
        })
    });
    let effects = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().map(effects_markup).unwrap_or_default())
    });
    let progress_of = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().map(progress).unwrap_or_default())
    });
    let best = Memo::new(move |_| {
        state
            .campaign
            .with(|c| c.as_ref().map(best_markup).unwrap_or_default())
    });

    // The chosen point's step and the baseline's flags, as they change.
    let chosen = Memo::new(move |_| {
        let step = selected.get()?;
        state.campaign.with(|c| {
            let c = c.as_ref()?;
            let s = c.steps.iter().find(|s| s.index == step)?.clone();
            Some((s, c.baseline().map(|b| b.flags.clone()).unwrap_or_default()))
        })
    });
    let point_box = move || {
        chosen.get().map(|(s, base)| {
            let step = s.index;
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
            {move || title.get().map(|(id, name, st)| {
                let name = format!("#{id} {name}");
                view! {
                    <span class="cpg-name" data-testid="campaign-name">{name}</span>
                    <span class="cpg-state" data-testid="campaign-state" data-state=state_key(st)>{st.label()}</span>
                }
            })}
            {buttons}
            <span class="proc-spacer"></span>
            {move || title.get().map(|(id, _, _)| view! {
                <a class="link" href=format!("/api/campaigns/{id}/export.csv") download="">"CSV"</a>
                <a class="link" href=format!("/api/campaigns/{id}/export.json") download="">"JSON"</a>
            })}
            {move || may().then(|| view! {
                <button type="button" class="btn" data-testid="test-webhooks" on:click=test_hooks>"Test webhooks"</button>
                <button type="button" class="btn btn-primary" data-testid="new-campaign" on:click=move |_| state.plan_open.set(true)>"New campaign…"</button>
            })}
        </div>
        <div class="notice-line" data-testid="campaign-message">{move || error.get()}</div>
        {move || match loaded.get() {
            false => view! {
                <p class="cpg-empty" data-testid="campaign-empty">
                    "No campaign yet. A campaign restarts the server into each flag set of a plan — a list, or a grid of values — "
                    "checks its answer and benchmarks it, unattended, every restart held to its guards; the results fill the ledger below."
                </p>
            }.into_any(),
            true => view! {
                <div class="cpg-summary">
                    <div class="cpg-progress">
                        <span class="num" data-testid="campaign-progress">{move || progress_of.get().0}</span>
                        <div class="cpg-bar"><div class="cpg-bar-fill" style:transform=move || format!("scaleX({:.4})", progress_of.get().1 / 100.0)></div></div>
                        <span class="num cpg-eta" data-testid="campaign-eta">{move || state.campaign.with(|c| c.as_ref().map(|c| time_left(c, now())).unwrap_or_default())}</span>
                    </div>
                    <div class="cpg-best-line" inner_html=best></div>
                    <div class="cpg-now">
                        {move || current.get().map(|(i, label, n, since)| view! {
                            <span data-testid="campaign-current">{format!("step {} of {n}: {label}", i + 1)}</span>
                            <PhaseBadge phase=phase />
                            <span class="num cpg-muted">{move || since.map(|t| crate::campaign::duration(now().saturating_sub(t))).unwrap_or_default()}</span>
                        })}
                        {move || ended.get().map(|took| view! {
                            <span class="cpg-muted num" data-testid="campaign-took">{format!("ended after {}", crate::campaign::duration(took))}</span>
                        })}
                        {move || reason.get().map(|r| view! {
                            <span class="cpg-reason" data-testid="campaign-reason">{r}</span>
                        })}
                    </div>
                </div>
                <div class="cpg-body" on:click=on_click>
                    <div class="cpg-main">
                    <div
                        class="cpg-steps"
                        node_ref=steps_box
                        on:scroll=move |ev| {
                            if let Some(el) = ev.target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) {
                                scroll.set(f64::from(el.scroll_top()));
                                view_px.set(f64::from(el.client_height()));
                            }
                        }
                    >
                        <table class="cpg-table">
                            <colgroup>
                                <col style="width:3.2em" /><col style="width:9.5em" /><col /><col style="width:10.5em" /><col style="width:6em" /><col style="width:6em" /><col style="width:4.5em" /><col style="width:4.2em" />
                            </colgroup>
                            <thead><tr><th class="num">"#"</th><th>"state"</th><th>"flags vs baseline"</th><th class="num">"result"</th><th class="num">"Δ"</th><th class="num">"p99 TTFT"</th><th class="num">"took"</th><th>"record"</th></tr></thead>
                            <tbody data-testid="campaign-steps" data-steps=move || count.get().to_string() node_ref=tbody></tbody>
                        </table>
                    </div>
                    <div class="cpg-live" data-testid="campaign-live">{live}</div>
                    </div>
                    <div class="cpg-side">
                        <svg class="chart pareto" data-testid="pareto-chart" viewBox=format!("0 0 {PW} {PH}") preserveAspectRatio="xMidYMid meet" role="img" aria-label="throughput against p99 time to first token"
                            inner_html=chart>
                        </svg>
                        {point_box}
                        <h3 class="cpg-h">"effect of each flag"</h3>
                        <ul class="cpg-effects" data-testid="campaign-effects" inner_html=effects></ul>
                    </div>
                </div>
            }.into_any(),
        }}
    }
}
