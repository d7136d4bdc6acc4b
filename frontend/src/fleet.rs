//! The hub's page (`/fleet`): every agent as a row of fixed height — its
//! name and host, whether the hub reaches it (and, when not, since when it was
//! last heard from), its GPUs compact, its server's phase and flags, its live
//! tok/s. The rows are rendered by the hub (`GET /api/fleet/panel`, from
//! the same state as its `/api/fleet`), which the page asks once a second and
//! sets as they come: the fleet's readers stay out of the UI's bundle. An agent
//! the hub cannot reach keeps its last known state, greyed and said to be old:
//! never shown as idle.

use leptos::prelude::*;
use leptos::task::spawn_local;

/// How often the page asks the hub.
const POLL_MS: u64 = 1_000;

/// Sets `signal` to `new` only when it differs: HTML the hub rendered is
/// set into the page only when it changed, so what is typed or selected in
/// it stays.
fn set_changed(signal: RwSignal<String>, new: &str) {
    if signal.with_untracked(|old| old != new) {
        signal.try_set(new.to_owned());
    }
}

/// Reads the hub's rows into `rows` (as the hub renders them), or says in
/// `error` why it could not; the rows stay as they were until new ones come.
fn fetch_fleet(rows: RwSignal<String>, error: RwSignal<Option<String>>) {
    spawn_local(async move {
        match crate::api::fleet_panel().await {
            Ok(html) => {
                set_changed(rows, &html);
                error.try_set(None);
            }
            Err(e) => {
                error.try_set(Some(e));
            }
        }
    });
}

/// A restart: the typed name and flag changes beside the button that was
/// clicked go to the hub; what it answered is said in `said`.
fn restart_clicked(
    ev: &web_sys::MouseEvent,
    said: RwSignal<String>,
    ask_records: impl Fn() + Copy + 'static,
) {
    use wasm_bindgen::JsCast;
    let Some(el) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .and_then(|t| t.closest("[data-act=coord-restart]").ok().flatten())
    else {
        return;
    };
    let target = el.get_attribute("data-target").unwrap_or_default();
    // The target's field of `class`, and what is typed in it.
    let field = |class: &str| {
        let input = document()
            .query_selector(&format!(".{class}[data-target='{target}']"))
            .ok()
            .flatten()
            .and_then(|i| i.dyn_into::<web_sys::HtmlInputElement>().ok());
        let text = input.as_ref().map(|i| i.value()).unwrap_or_default();
        (input, text)
    };
    let (typed, confirm) = field("coord-confirm");
    let (flags_input, flags) = field("coord-flags");
    spawn_local(async move {
        match crate::api::coord_restart(&target, &confirm, &flags).await {
            Ok(()) => {
                said.set(format!("{target}: restart begun"));
                // Typed for this restart: the next one starts afresh.
                for i in [typed, flags_input].into_iter().flatten() {
                    i.set_value("");
                }
            }
            Err(e) => said.set(format!("{target}: {e}")),
        }
        ask_records();
    });
}

/// The hub's whole page.
#[component]
pub(crate) fn FleetApp() -> impl IntoView {
    let rows = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let ask = move || fetch_fleet(rows, error);
    // The coordinated restarts' panel, as the hub renders it: its controls
    // and its records apart, each replaced only when it changed (what is
    // typed in the controls stays while the records move).
    let controls = RwSignal::new(String::new());
    let history = RwSignal::new(String::new());
    let said = RwSignal::new(String::new());
    spawn_local(async move {
        match crate::api::session().await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let _ = window().location().replace("/login");
            }
            Err(e) => said.set(e),
        }
    });
    let ask_records = move || {
        spawn_local(async move {
            if let Ok(html) = crate::api::coord_panel().await {
                let (c, h) = html.split_once("<!--records-->").unwrap_or((&html, ""));
                set_changed(controls, c);
                set_changed(history, h);
            }
        });
    };
    let ask = move || {
        ask();
        ask_records();
    };
    ask();
    set_interval(ask, std::time::Duration::from_millis(POLL_MS));
    document().set_title("fleet · drainwatch");
    let on_click = move |ev: web_sys::MouseEvent| restart_clicked(&ev, said, ask_records);
    view! {
        <header class="fleet-head">
            <span class="brand">"drainwatch"</span>
            <span class="fleet-title">"fleet"</span>
            <span class="fleet-error" data-testid="fleet-error">{move || error.get().unwrap_or_default()}</span>
        </header>
        <main
            class="fleet"
            data-testid="fleet"
            inner_html=move || rows.get()
        ></main>
        <section class="coord" data-testid="coord" on:click=on_click>
            <div inner_html=move || controls.get()></div>
            <div class="coord-said" data-testid="coord-said">{move || said.get()}</div>
            <div inner_html=move || history.get()></div>
        </section>
    }
}
