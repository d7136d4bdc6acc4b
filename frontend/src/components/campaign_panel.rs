//! The campaign: the newest one's name and state, how far it is and how long
//! it has left, the best set so far against the target, the step running
//! now; a row per step (state, flags against the baseline, result, Δ, time,
//! its restart record); the comparison chart (metric against p99 TTFT, the
//! Pareto frontier, the target), where a point opens its step — its flags,
//! its restart record, "restart with this set"; and each flag's effect.
//! Operators pause, resume, cancel, start a new one (the plan builder) and
//! test the webhooks.
//!
//! The agent draws the campaign (`GET /api/campaigns/{id}/view`): the page
//! asks for its view again when a `campaign` or `campaign_step` message or a
//! snapshot says it changed, when a point is chosen, when the rows in view
//! change, and when the server's phase or hold does. The page draws the head
//! ([`crate::campaign::panel`]), patches the rows that changed and counts
//! down the times that follow the clock.

use std::ops::Range;

use leptos::prelude::*;
use leptos::task::spawn_local;
use leptos::wasm_bindgen::JsCast;
use shared::campaign::CampaignView;
use shared::html::duration;
use shared::restart::OpKind;

use crate::api;
use crate::campaign::panel;
use crate::campaign::rows::{Drawn, ROW_PX, window};
use crate::components::drain_chart::DrainChart;
use crate::fetch::SingleFlight;
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

/// What the page asks the agent to draw: the campaign, the chosen step, the
/// rows in view.
#[derive(Debug, Clone, PartialEq)]
struct Ask {
    id: i64,
    selected: Option<u32>,
    rows: Range<usize>,
}

/// Keeps `view` the agent's drawing of what `ask` asks for, asked again
/// whenever it may have changed: the campaign (`campaign_gen`), or what the
/// agent draws it with besides (the caller's role, the server's phase and
/// whether anything holds it).
fn follow(state: AppState, ask: Memo<Option<Ask>>, view: RwSignal<Option<CampaignView>>) {
    let flight = SingleFlight::new();
    let drawn_with = Memo::new(move |_| {
        let server = state
            .server
            .with(|s| s.as_ref().map(|s| (s.phase, s.is_free())));
        (state.may_operate(), server)
    });
    Effect::new(move |_| {
        state.campaign_gen.track();
        drawn_with.track();
        if ask.with(Option::is_none) {
            return;
        }
        // The job reads what is asked when it runs: a change while one view
        // is out is asked for right after it, as it stands then.
        flight.run(move || async move {
            let Some(Some(a)) = ask.try_get_untracked() else {
                return false;
            };
            match api::campaign_view(a.id, a.selected, a.rows.clone()).await {
                Ok(v) => view.try_set(Some(v)).is_none(),
                Err(e) => state
                    .notice
                    .try_set(Some(format!("could not read campaign #{}: {e}", a.id)))
                    .is_none(),
            }
        });
    });
}

/// The times in `el` that follow the clock (class `tick`), as they read at
/// `now_ms`: the time since `data-since`, or the time left to `data-end`
/// but never below `data-floor`.
fn tick(el: &web_sys::Element, now_ms: u64) {
    let all = el.get_elements_by_class_name("tick");
    for i in 0..all.length() {
        let Some(e) = all.item(i) else { continue };
        let num = |name: &str| e.get_attribute(name).and_then(|v| v.parse::<u64>().ok());
        let text = if let Some(since) = num("data-since") {
            duration(now_ms.saturating_sub(since))
        } else if let Some(end) = num("data-end") {
            let left = end
                .saturating_sub(now_ms)
                .max(num("data-floor").unwrap_or(0));
            format!("≈ {} left", duration(left))
        } else {
            continue;
        };
        e.set_text_content(Some(&text));
    }
}

/// Enter or Space on a focused element of a text block that acts when
/// clicked (a chart's point is an SVG `role="button"`, which the browser
/// does not click for a key as it does a `<button>`): a click on it, once
/// per press.
fn press(ev: web_sys::KeyboardEvent) {
    if !matches!(ev.key().as_str(), "Enter" | " ") || ev.repeat() {
        return;
    }
    let Some(el) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .filter(|el| el.get_attribute("role").as_deref() == Some("button"))
    else {
        return;
    };
    let init = web_sys::MouseEventInit::new();
    init.set_bubbles(true);
    if let Ok(click) = web_sys::MouseEvent::new_with_mouse_event_init_dict("click", &init) {
        ev.prevent_default();
        let _ = el.dispatch_event(&click);
    }
}

/// Sets `el`'s HTML; the focus, when it was on one of its points, goes to
/// the same point in the new drawing (a point chosen with a key keeps it).
fn redraw_keeping_focus(el: &web_sys::Element, html: &str) {
    let focused = document()
        .active_element()
        .filter(|a| el.contains(Some(a)))
        .and_then(|a| Some((a.get_attribute("data-act")?, a.get_attribute("data-step")?)));
    el.set_inner_html(html);
    let again = focused
        .and_then(|(act, step)| {
            el.query_selector(&format!("[data-act='{act}'][data-step='{step}']"))
                .ok()
                .flatten()
        })
        .and_then(|e| e.dyn_into::<web_sys::SvgElement>().ok());
    if let Some(again) = again {
        let _ = again.focus();
    }
}

/// One handler for every button of the text blocks: pause, resume, cancel;
/// the webhook test; a step's record and a point's actions.
fn click_handler(
    state: AppState,
    view: RwSignal<Option<CampaignView>>,
    selected: RwSignal<Option<u32>>,
    message: RwSignal<Option<String>>,
) -> impl Fn(web_sys::MouseEvent) + Copy + 'static {
    let act = move |verb: &'static str| {
        let Some(id) = state
            .campaign_head
            .with_untracked(|c| c.as_ref().map(|c| c.id))
        else {
            return;
        };
        message.set(None);
        spawn_local(async move {
            if let Err(e) = api::campaign_act(id, verb).await {
                message.try_set(Some(e));
            }
        });
    };
    let test_hooks = move || {
        message.set(Some("testing the webhooks…".to_owned()));
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
            message.try_set(Some(text));
        });
    };
    // The chosen step's set, as the view drawn for that choice gives it.
    let restart_with = move |step: u32| {
        let set = (selected.get_untracked() == Some(step))
            .then(|| view.with_untracked(|v| v.as_ref()?.chosen.clone()))
            .flatten()
            .map(|c| Prefill {
                id: c.flagset,
                name: c.name,
                flags: c.flags,
            });
        if let (Some(prefill), Some(status)) = (set, state.server.get_untracked()) {
            state.dialog.set(Some(DialogOpen {
                kind: OpKind::Restart,
                status,
                prefill: Some(prefill),
            }));
        }
    };
    move |ev: web_sys::MouseEvent| {
        let Some((act_name, el)) = acted_on(&ev) else {
            return;
        };
        let num = |name: &str| el.get_attribute(name).and_then(|v| v.parse::<i64>().ok());
        match act_name.as_str() {
            "restart" => {
                if let Some(id) = num("data-id") {
                    state.detail.set(Some(id));
                }
            }
            "point" => selected.set(num("data-step").map(|s| s as u32)),
            "restart-with" => {
                if let Some(s) = num("data-step") {
                    restart_with(s as u32);
                }
            }
            "pause" => act("pause"),
            "resume" => act("resume"),
            "cancel" => act("cancel"),
            "hooks" => test_hooks(),
            "new" => state.plan_open.set(true),
            _ => {}
        }
    }
}

/// The drain chart of the running step's restart (else of the newest one),
/// with the benchmark's progress.
fn live_view(state: AppState, view: RwSignal<Option<CampaignView>>) -> impl IntoView {
    let live_restart = Memo::new(move |_| view.with(|v| v.as_ref()?.live_restart));
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
    move || {
        live_restart.get().map(|id| {
            view! {
                <div class="cpg-live-head">
                    <button type="button" class="link" data-act="restart" data-id=id.to_string()>{format!("restart #{id}")}</button>
                    <span class="cpg-muted num" data-testid="campaign-bench-line">{bench_line}</span>
                </div>
                <DrainChart id=id />
            }
        })
    }
}

/// The steps' table: a window of rows around what its box shows, patched as
/// steps change, following the running step.
fn steps_table(
    view: RwSignal<Option<CampaignView>>,
    win: Memo<Range<usize>>,
    scroll: RwSignal<f64>,
    view_px: RwSignal<f64>,
) -> impl IntoView {
    let count = Memo::new(move |_| view.with(|v| v.as_ref().map_or(0, |v| v.steps)));
    let current = Memo::new(move |_| view.with(|v| v.as_ref()?.current));
    let steps_box = NodeRef::<leptos::html::Div>::new();
    // The box follows the running step while the one before it was in view
    // (nobody scrolled away to read something else), without reading the
    // page's layout (which would make the browser lay out everything at
    // once): where the box is scrolled to comes from its scroll events.
    Effect::new(move |prev: Option<Option<u32>>| {
        let now = current.get();
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
    // The rows are patched, not redrawn: a step that changed replaces its own
    // row (the browser styles and lays out that row), a new window or plan
    // redraws the body.
    let rows = Memo::new(move |_| {
        view.with(|v| {
            v.as_ref()
                .map(|v| Drawn::of(v.steps as usize, v.first as usize, v.rows.clone()))
                .unwrap_or_default()
        })
    });
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

    view! {
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
    }
}

/// The panel.
#[component]
pub(crate) fn CampaignPanel() -> impl IntoView {
    let state = AppState::get();
    let selected = RwSignal::new(None::<u32>);
    let message = RwSignal::new(None::<String>);
    let view = RwSignal::new(None::<CampaignView>);
    // The rows drawn: a window around what the steps' box shows.
    let scroll = RwSignal::new(0.0f64);
    let view_px = RwSignal::new(700.0f64);
    let count = Memo::new(move |_| {
        state
            .campaign_head
            .with(|h| h.as_ref().map_or(0, |h| h.steps as usize))
    });
    let win = Memo::new(move |_| window(count.get(), scroll.get(), view_px.get()));
    let ask = Memo::new(move |_| {
        let id = state.campaign_head.with(|h| h.as_ref().map(|h| h.id))?;
        Some(Ask {
            id,
            selected: selected.get(),
            rows: win.get(),
        })
    });
    follow(state, ask, view);

    let on_click = click_handler(state, view, selected, message);
    let loaded = Memo::new(move |_| view.with(Option::is_some));
    let head = Memo::new(move |_| {
        let may = state.may_operate();
        state.campaign_head.with(|c| {
            panel::head(
                c.as_ref().map(|c| (c.id, c.name.as_str(), c.state)),
                may,
                crate::base::base(),
            )
        })
    });
    // Each block is set only when its own HTML changed.
    let block = move |pick: fn(&CampaignView) -> &String| {
        Memo::new(move |_| {
            view.with(|v| v.as_ref().map(|v| pick(v).clone()))
                .unwrap_or_default()
        })
    };
    let (summary, side) = (block(|v| &v.summary), block(|v| &v.side));
    let side_el = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        let Some(el) = side_el.get() else { return };
        side.with(|html| redraw_keeping_focus(&el, html));
    });
    // The summary is set, then its clock-following times read as now; at
    // every tick of the page's clock they are read again.
    let summary_el = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        let Some(el) = summary_el.get() else { return };
        summary.with(|html| el.set_inner_html(html));
        tick(&el, state.now_ms.get_untracked() as u64);
    });
    Effect::new(move |_| {
        let now = state.now_ms.get() as u64;
        if let Some(el) = summary_el.get_untracked() {
            tick(&el, now);
        }
    });
    view! {
        <div class="proc-head" on:click=on_click on:keydown=press inner_html=head></div>
        <div class="notice-line" data-testid="campaign-message">{move || message.get()}</div>
        {move || match loaded.get() {
            false => view! {
                <p class="cpg-empty" data-testid="campaign-empty">
                    "No campaign yet. A campaign restarts the server into each flag set of a plan — a list, or a grid of values — "
                    "checks its answer and benchmarks it, unattended, every restart held to its guards; the results fill the ledger below."
                </p>
            }.into_any(),
            true => view! {
                <div class="cpg-summary" node_ref=summary_el></div>
                <div class="cpg-body" on:click=on_click on:keydown=press>
                    <div class="cpg-main">
                        {steps_table(view, win, scroll, view_px)}
                        <div class="cpg-live" data-testid="campaign-live">{live_view(state, view)}</div>
                    </div>
                    <div class="cpg-side" node_ref=side_el></div>
                </div>
            }.into_any(),
        }}
    }
}
