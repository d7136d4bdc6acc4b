//! The page's layout: header on top, then the managed server's panel (when
//! drainwatch manages one), the GPU grid, the process table, the restart
//! history and the throughput per flag set; the operation dialog and a restart's detail open over it as
//! modals. Creates the state, starts the socket and the clock, and keeps the
//! deep links (`?dialog=`, `?detail=`) in step.

use leptos::prelude::*;
use shared::restart::OpKind;

use crate::api;
use crate::components::campaign_panel::CampaignPanel;
use crate::components::gpu_grid::GpuGrid;
use crate::components::header::Header;
use crate::components::history_table::HistoryTable;
use crate::components::plan_builder::PlanBuilder;
use crate::components::process_table::ProcessTable;
use crate::components::restart_detail::RestartDetailPanel;
use crate::components::restart_dialog::RestartDialog;
use crate::components::server_panel::ServerPanel;
use crate::components::throughput_view::ThroughputView;
use crate::deeplink;
use crate::localtime;
use crate::ops::kind_from_key;
use crate::state::{AppState, DialogOpen};
use crate::ws;

/// How often the clock behind ages and countdowns ticks.
const CLOCK_TICK_MS: u64 = 250;

/// Opens what the page's query asks for: a detail at once, a dialog as soon as
/// the server's status is known (once). Then mirrors both into the query.
fn deep_links(state: AppState) {
    let search = window().location().search().unwrap_or_default();
    if let Some(id) = deeplink::param(&search, "detail").and_then(|v| v.parse::<i64>().ok()) {
        state.detail.set(Some(id));
    }
    let mut wanted: Option<OpKind> =
        deeplink::param(&search, "dialog").and_then(|k| kind_from_key(&k));
    Effect::new(move |_| {
        let Some(kind) = wanted else { return };
        if let Some(status) = state.server.get() {
            wanted = None;
            state.dialog.set(Some(DialogOpen::new(kind, status)));
        }
    });
    Effect::new(move |prev: Option<(Option<i64>, Option<OpKind>)>| {
        let now = (
            state.detail.get(),
            state.dialog.with(|d| d.as_ref().map(|d| d.kind)),
        );
        if prev.is_some_and(|p| p != now) {
            deeplink::replace_query(&[
                ("detail", now.0.map(|id| id.to_string())),
                ("dialog", now.1.map(|k| k.as_str().to_owned())),
            ]);
        }
        now
    });
}

/// The whole page.
#[component]
pub(crate) fn App() -> impl IntoView {
    let state = AppState::provide(localtime::now_ms());
    api::check_session(state);
    ws::connect(state);
    set_interval(
        move || state.now_ms.set(localtime::now_ms()),
        std::time::Duration::from_millis(CLOCK_TICK_MS),
    );
    deep_links(state);

    // The tab's title names the host, so several open dashboards stay apart.
    Effect::new(move |_| {
        let title = state.host.with(|h| match h {
            Some(h) => format!("{} · drainwatch", h.hostname),
            None => "drainwatch".to_owned(),
        });
        document().set_title(&title);
    });
    let managed = Memo::new(move |_| state.server.with(Option::is_some));

    view! {
        <div class="app">
            <Header />
            <div class="notice-slot">
                {move || {
                    state
                        .notice
                        .get()
                        .map(|text| {
                            view! {
                                <div class="notice" data-testid="notice" title=text.clone()>
                                    {text.clone()}
                                </div>
                            }
                        })
                }}
            </div>
            <main class="content">
                <Show when=move || managed.get()>
                    <ServerPanel />
                </Show>
                <section class="panel gpus" aria-label="GPUs">
                    <GpuGrid />
                </section>
                <section class="panel processes" aria-label="processes">
                    <ProcessTable />
                </section>
                <Show when=move || managed.get()>
                    <section class="panel campaign" data-testid="campaign" aria-label="campaign">
                        <CampaignPanel />
                    </section>
                    <section class="panel history" aria-label="restart history">
                        <HistoryTable />
                    </section>
                    <section class="panel throughput" data-testid="throughput" aria-label="throughput per flag set">
                        <ThroughputView />
                    </section>
                </Show>
            </main>
            <Show when=move || managed.get()>
                <RestartDialog />
                <PlanBuilder />
            </Show>
            <RestartDetailPanel />
        </div>
    }
}
