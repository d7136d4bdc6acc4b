//! The page's layout: header on top, then the GPU grid, then the process table.
//! Creates the state, starts the socket and the clock.

use leptos::prelude::*;
use leptos_use::use_interval_fn;

use crate::components::gpu_grid::GpuGrid;
use crate::components::header::Header;
use crate::components::process_table::ProcessTable;
use crate::localtime;
use crate::state::AppState;
use crate::ws;

/// How often the clock behind ages and countdowns ticks.
const CLOCK_TICK_MS: u64 = 250;

/// The whole page.
#[component]
pub(crate) fn App() -> impl IntoView {
    let state = AppState::provide(localtime::now_ms());
    ws::connect(state);
    use_interval_fn(move || state.now_ms.set(localtime::now_ms()), CLOCK_TICK_MS);

    // The tab's title names the host, so several open dashboards stay apart.
    Effect::new(move |_| {
        let title = state.host.with(|h| match h {
            Some(h) => format!("{} · drainwatch", h.hostname),
            None => "drainwatch".to_owned(),
        });
        document().set_title(&title);
    });

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
                <section class="panel gpus" aria-label="GPUs">
                    <GpuGrid />
                </section>
                <section class="panel processes" aria-label="processes">
                    <ProcessTable />
                </section>
            </main>
        </div>
    }
}
