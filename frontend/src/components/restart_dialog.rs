//! The operation dialog, a modal: restart and start edit flags (limited to the
//! allow-list) with a live diff; restart and stop list what will be killed;
//! every operation waits for the server's name to be typed. The request carries
//! the generation of the status the dialog was opened with, so a stale view is
//! refused by the server (409) rather than acted on. A refusal's text is shown
//! as the server wrote it and the dialog stays open; an accepted request
//! closes it. Escape and Cancel close it without sending.

use std::collections::BTreeMap;

use leptos::ev;
use leptos::prelude::*;
use shared::failure::Failure;
use shared::flags::FlagSpec;
use shared::health::{HealthIssue, HealthReason, issues_now};
use shared::restart::{ContainmentKind, OpKind};

use crate::api;
use crate::components::close_button::close_button;
use crate::components::flag_row::FlagRow;
use crate::components::kill_list::KillList;
use crate::components::phase_badge::PhaseBadge;
use crate::fetch::send_from_dialog;
use crate::flags;
use crate::flags::prefill;
use crate::markup::diff_lines;
use crate::ops::{kind_title, takes_flags};
use crate::state::{AppState, DialogOpen};

/// What the operation does, in a sentence.
fn explain(open: &DialogOpen) -> String {
    let s = &open.status;
    match open.kind {
        OpKind::Restart => "Drains the server (SIGTERM, then SIGKILL after the grace period), \
             waits until every GPU is back at its idle baseline, then launches it with the \
             flags below."
            .to_owned(),
        OpKind::Stop => "Drains and kills the server, then waits until every GPU is back at its \
             idle baseline. Nothing is launched."
            .to_owned(),
        OpKind::Start => "Checks that every GPU is free, then launches the server with the flags \
             below."
            .to_owned(),
        OpKind::Adopt => format!(
            "drainwatch takes over the server listening on :{}{}: from now on it supervises, \
             stops and restarts it. Nothing is killed.",
            s.port,
            s.adoptable
                .map(|a| format!(" (pid {})", a.pid))
                .unwrap_or_default()
        ),
    }
}

/// The dialog, while one is open.
#[component]
pub(crate) fn RestartDialog() -> impl IntoView {
    let state = AppState::get();
    let handle = window_event_listener(ev::keydown, move |ev| {
        if ev.key() == "Escape" && state.dialog.get_untracked().is_some() {
            state.dialog.set(None);
        }
    });
    on_cleanup(move || handle.remove());

    move || state.dialog.get().map(|open| body(state, open))
}

/// The dialog's content for one opening.
fn body(state: AppState, open: DialogOpen) -> impl IntoView {
    let kind = open.kind;
    let status = open.status.clone();
    let name = status.name.clone();
    let generation = status.generation;
    let title = kind_title(kind);
    let with_flags = takes_flags(kind);
    let explanation = explain(&open);

    let FlagEditor {
        request,
        view: editor,
    } = flag_editor(&open, kind, with_flags);
    let refused = health_refusal(state, &status, with_flags);

    // Adoption only: move the server into drainwatch's cgroup (never unasked),
    // offered where cgroup containment is in force.
    let can_contain = kind == OpKind::Adopt
        && status
            .containment
            .as_ref()
            .is_some_and(|c| c.kind == ContainmentKind::Cgroup);
    let t = Typed::new(&name);
    let submit = move || t.submit(state, kind, generation, with_flags.then_some(request));
    let from_set = open.prefill.as_ref().filter(|_| with_flags).map(|p| {
        let text = format!("values from flag set {} ({})", p.name, p.id);
        view! {
            <div class="dlg-prefill" data-testid="dialog-prefill" data-flagset=p.id.clone()>
                {text}
            </div>
        }
    });
    let phase = status.phase;
    let heading = format!("{title} {name}");
    let aria = heading.clone();
    let confirm_label = format!("{title} {name}");

    view! {
        <div class="modal-backdrop">
            <div
                class="modal dialog"
                role="dialog"
                aria-modal="true"
                aria-label=aria
                data-testid="restart-dialog"
                data-kind=kind.as_str()
                data-generation=generation.to_string()
            >
                <form
                    on:submit=move |ev| {
                        ev.prevent_default();
                        submit();
                    }
                >
                    <header class="modal-head">
                        <h2 class="modal-title">{heading}</h2>
                        <PhaseBadge phase=phase />
                        <span class="dlg-muted num">{format!("gen {generation}")}</span>
                        {close_button(move || state.dialog.set(None), None)}
                    </header>
                    <p class="dlg-explain">{explanation}</p>
                    {from_set}
                    {stale_notice(state, generation)}
                    {editor}
                    {refused.map(|(last, issues)| health_override(last, kind, &issues, t.override_typed).into_any())}
                    {can_contain.then(|| contain_box(t.contain))}
                    <section class="dlg-section">
                        <h3 class="dlg-h">"will be stopped"</h3>
                        <KillList kind=kind />
                    </section>
                    {confirm_field(name, t.typed)}
                    {error_slot(t.error)}
                    {footer(state, confirm_label, move || t.confirmed.get(), t.sending)}
                </form>
            </div>
        </div>
    }
}

/// What is typed and chosen in the dialog, and its request's state.
#[derive(Clone, Copy)]
struct Typed {
    /// The server's name, typed to confirm.
    typed: RwSignal<String>,
    /// The GPUs typed to launch on although the health gate refuses them.
    override_typed: RwSignal<String>,
    /// With an adoption: move the server into drainwatch's cgroup.
    contain: RwSignal<bool>,
    sending: RwSignal<bool>,
    error: RwSignal<Option<String>>,
    /// The typed name is the server's.
    confirmed: Memo<bool>,
}

impl Typed {
    fn new(name: &str) -> Self {
        let typed = RwSignal::new(String::new());
        let name = name.to_owned();
        Self {
            typed,
            override_typed: RwSignal::new(String::new()),
            contain: RwSignal::new(false),
            sending: RwSignal::new(false),
            error: RwSignal::new(None),
            confirmed: Memo::new(move |_| typed.with(|t| *t == name)),
        }
    }

    /// Sends the request once confirmed (and not already sent); closes the
    /// dialog when drainwatch takes it, else says why not. `flags`: the
    /// flag changes, for the kinds that take them.
    fn submit(
        self,
        state: AppState,
        kind: OpKind,
        generation: u64,
        flags: Option<Memo<BTreeMap<String, Option<String>>>>,
    ) {
        let Self {
            typed,
            override_typed,
            contain,
            sending,
            error,
            confirmed,
        } = self;
        if !confirmed.get_untracked() || sending.get_untracked() {
            return;
        }
        let confirm = typed.get_untracked();
        let with_flags = flags.is_some();
        let flags = flags.map(|f| f.get_untracked()).unwrap_or_default();
        let contain = contain.get_untracked();
        let override_health = Some(override_typed.get_untracked().trim().to_owned())
            .filter(|t| with_flags && !t.is_empty());
        let request = api::submit(kind, generation, confirm, flags, contain, override_health);
        send_from_dialog(sending, error, request, move || state.dialog.set(None));
    }
}

/// The flag editor of a restart or start: a row per allowed flag, starting at
/// its current value (or the flag set's the dialog opened with), and the live
/// diff; the changes to request as they are edited.
struct FlagEditor {
    request: Memo<BTreeMap<String, Option<String>>>,
    view: Option<AnyView>,
}

fn flag_editor(open: &DialogOpen, kind: OpKind, with_flags: bool) -> FlagEditor {
    let status = &open.status;
    let start_at = open
        .prefill
        .as_ref()
        .map(|p| prefill(&status.allowed, &p.flags));
    let rows: Vec<(FlagSpec, RwSignal<Option<String>>)> = if with_flags {
        status
            .allowed
            .iter()
            .map(|s| {
                let v = match &start_at {
                    Some(p) => p.get(&s.name).cloned().flatten(),
                    None => flags::initial(&status.flags, &s.name),
                };
                (s.clone(), RwSignal::new(v))
            })
            .collect()
    } else {
        Vec::new()
    };
    let values = rows
        .iter()
        .map(|(s, v)| (s.name.clone(), *v))
        .collect::<Vec<_>>();
    let request = {
        let (specs, current, defaults) = (
            status.allowed.clone(),
            status.flags.clone(),
            status.default_flags.clone(),
        );
        Memo::new(move |_| {
            let edited: BTreeMap<String, Option<String>> =
                crate::sort::map_of(values.iter().map(|(n, v)| (n.clone(), v.get())));
            flags::request_flags(&specs, &current, &defaults, &edited)
        })
    };
    let diff = {
        let (specs, current, defaults) = (
            status.allowed.clone(),
            status.flags.clone(),
            status.default_flags.clone(),
        );
        Memo::new(move |_| {
            request.with(|req| {
                let after = flags::resolve(&specs, &current, &defaults, req);
                flags::diff(&current, &after)
            })
        })
    };

    let flag_rows = rows
        .into_iter()
        .map(|(spec, value)| {
            let current = status.flags.get(&spec.name).cloned();
            let default = status.default_flags.get(&spec.name).cloned();
            view! { <FlagRow spec=spec value=value current=current default=default /> }
        })
        .collect::<Vec<_>>();
    let no_change = if kind == OpKind::Start {
        "none: the server starts with the flags it last ran with"
    } else {
        "none: the server comes back with the flags it has"
    };
    let view = with_flags.then(|| {
        let editor_empty = flag_rows.is_empty();
        view! {
            <section class="dlg-section">
                <h3 class="dlg-h">"flags"</h3>
                <div class="flag-editor" data-testid="flag-editor">
                    {flag_rows}
                    {editor_empty.then(|| view! { <div class="dlg-muted">"this server allows no flag changes"</div> })}
                </div>
                <div class="flag-diff" data-testid="flag-diff" data-changes=move || diff.with(|d| d.len().to_string())>
                    <span class="dlg-label">"change"</span>
                    <span
                        class="diff-lines"
                        inner_html=move || {
                            diff.with(|d| diff_lines(d, no_change))
                        }
                    ></span>
                </div>
            </section>
        }
        .into_any()
    });

    FlagEditor { request, view }
}

/// Why the health check may refuse this launch: the issues it refused last
/// time (`true`: the operator may type the refused GPUs to launch anyway,
/// once, audited by the server), or what the server's GPUs show wrong now
/// (`false`; the server's `[health]` may warn or ignore some of it).
fn health_refusal(
    state: AppState,
    status: &shared::restart::ServerStatus,
    with_flags: bool,
) -> Option<(bool, Vec<HealthIssue>)> {
    match &status.failure {
        Some(Failure::Unhealthy { issues }) if with_flags && !issues.is_empty() => {
            Some((true, issues.clone()))
        }
        _ if with_flags => {
            let now = state.latest.with_untracked(|l| {
                l.as_ref().map_or_else(Vec::new, |s| {
                    s.gpus
                        .iter()
                        .filter(|g| status.gpus.contains(&g.index))
                        .flat_map(|g| issues_now(g.index, &g.health))
                        .filter(|i| i.reason != HealthReason::Throttle)
                        .collect()
                })
            });
            (!now.is_empty()).then_some((false, now))
        }
        _ => None,
    }
}

/// Said when the server changed since the dialog opened: the request would
/// be refused as stale.
fn stale_notice(state: AppState, generation: u64) -> impl IntoView {
    let now_generation = move || state.server.with(|s| s.as_ref().map(|s| s.generation));
    move || {
        now_generation().filter(|g| *g != generation).map(|g| {
            view! {
                <div class="dlg-stale" data-testid="dialog-stale">
                    {format!(
                        "the server changed since this dialog opened (generation {generation} → {g}): drainwatch will refuse; close and review",
                    )}
                </div>
            }
        })
    }
}

/// Adoption only: move the server into drainwatch's cgroup (never unasked).
fn contain_box(contain: RwSignal<bool>) -> impl IntoView {
    view! {
        <label class="dlg-contain" data-testid="adopt-contain">
            <input
                type="checkbox"
                prop:checked=move || contain.get()
                on:change=move |ev| contain.set(event_target_checked(&ev))
            />
            " move it into drainwatch's cgroup, so that stopping it ends with cgroup.kill"
        </label>
    }
}

/// The server's name, to be typed before anything is sent.
fn confirm_field(name: String, typed: RwSignal<String>) -> impl IntoView {
    let placeholder = name.clone();
    view! {
        <section class="dlg-section dlg-confirm">
            <label class="dlg-label" for="confirm-input">
                "type " <code class="dlg-name">{name}</code> " to confirm"
            </label>
            {typed_field("confirm-input", placeholder, typed)}
        </section>
    }
}

/// A field for words to be typed exactly (the server's name, the refused
/// GPUs), its id also its test id.
fn typed_field(id: &'static str, placeholder: String, typed: RwSignal<String>) -> impl IntoView {
    view! {
        <input
            id=id
            class="confirm-input"
            data-testid=id
            type="text"
            autocomplete="off"
            spellcheck="false"
            placeholder=placeholder
            prop:value=move || typed.get()
            on:input=move |ev| typed.set(event_target_value(&ev))
        />
    }
}

/// Cancel, and the action itself once the name is typed (`confirmed`).
fn footer(
    state: AppState,
    label: String,
    confirmed: impl Fn() -> bool + Send + Sync + 'static,
    sending: RwSignal<bool>,
) -> impl IntoView {
    view! {
        <footer class="modal-foot">
            <button
                type="button"
                class="btn"
                data-testid="cancel-action"
                on:click=move |_| state.dialog.set(None)
            >
                "Cancel"
            </button>
            <button
                type="submit"
                class="btn btn-danger"
                data-testid="confirm-action"
                disabled=move || !confirmed() || sending.get()
            >
                {move || if sending.get() { "sending…".to_owned() } else { label.clone() }}
            </button>
        </footer>
    }
}

/// Where a refusal's text is shown, as the server wrote it.
fn error_slot(error: RwSignal<Option<String>>) -> impl IntoView {
    view! {
        <div class="dialog-error-slot">
            {move || {
                error.get().map(|text| {
                    view! {
                        <div class="dialog-error" data-testid="dialog-error" role="alert">
                            {text}
                        </div>
                    }
                })
            }}
        </div>
    }
}

/// "GPU 2, 5": what an operator types to override a refusal of those GPUs.
fn override_phrase(issues: &[HealthIssue]) -> String {
    let mut gpus: Vec<u32> = issues.iter().map(|i| i.gpu_index).collect();
    crate::sort::sort_dedup(&mut gpus);
    let list = gpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    format!("GPU {list}")
}

/// The last launch's health refusal (`last`), or what may refuse this one,
/// and the field that overrides it once.
fn health_override(
    last: bool,
    kind: OpKind,
    issues: &[HealthIssue],
    typed: RwSignal<String>,
) -> impl IntoView + use<> {
    let phrase = override_phrase(issues);
    let lines = issues
        .iter()
        .map(|i| view! { <li>{i.line()}</li> })
        .collect::<Vec<_>>();
    let text = match (last, kind) {
        (true, _) => {
            "The last launch was refused because of these GPUs. Launching onto them risks a \
             failed warm-up; the health check runs again before this launch."
        }
        (false, OpKind::Restart) => {
            "The health check may refuse to launch onto these GPUs. It runs before anything \
             stops: if it refuses, the server goes on serving as it is."
        }
        (false, _) => "The health check may refuse to launch onto these GPUs.",
    };
    view! {
        <section class="dlg-section dlg-health" data-testid="health-override" data-last=last.to_string()>
            <h3 class="dlg-h">"health check"</h3>
            <p class="dlg-explain">{text}</p>
            <ul class="health-issues">{lines}</ul>
            <label class="dlg-label" for="override-input">
                "to launch anyway, this once, type " <code class="dlg-name">{phrase.clone()}</code>
                " (recorded in the audit log); leave empty to keep the check"
            </label>
            {typed_field("override-input", phrase, typed)}
        </section>
    }
}
