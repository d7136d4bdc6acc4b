//! Two ticked flag sets compared, as the agent drew them with the ledger:
//! their flag diff, their results per concurrency, and a button per set that
//! opens the guarded restart dialog at that set's flags; a hint while fewer
//! than two are ticked.

use leptos::prelude::*;
use shared::campaign::ChosenSet;

use crate::ops::relaunch_kind;
use crate::state::{AppState, DialogOpen, Prefill};

/// The comparison of the two ticked sets, or a hint while fewer are ticked.
#[component]
pub(crate) fn ComparePanel(
    /// The ids of the ticked sets, oldest pick first; Clear empties it.
    compare: RwSignal<Vec<String>>,
) -> impl IntoView {
    let state = AppState::get();
    // The two sets, once the agent drew them for the pair ticked now.
    let pair = Memo::new(move |_| {
        let ticked = compare.get();
        state.ledger.with(|l| {
            l.as_ref()?
                .compared
                .clone()
                .filter(|c| ticked == [c.a.flagset.as_str(), c.b.flagset.as_str()])
        })
    });
    move || match pair.get() {
        None => {
            let n = compare.with(Vec::len);
            let text = if n == 1 {
                "tick one more flag set to compare the two"
            } else {
                "tick two flag sets to compare their flags and results"
            };
            view! { <div class="cmp-hint" data-testid="compare-hint">{text}</div> }.into_any()
        }
        Some(c) => {
            let title = format!("compare A {} with B {}", c.a.name, c.b.name);
            // Only an operator's page offers to relaunch.
            let actions = state.may_operate().then(|| {
                view! { <div class="cmp-actions">{restart_with(state, c.a.clone(), "A")} {restart_with(state, c.b.clone(), "B")}</div> }
            });
            view! {
                <section class="cmp-panel" data-testid="compare-panel" data-a=c.a.flagset.clone() data-b=c.b.flagset.clone()>
                    <div class="cmp-head">
                        <h3 class="dlg-h cmp-title">{title}</h3>
                        <button type="button" class="btn btn-small" data-testid="compare-clear" on:click=move |_| compare.set(Vec::new())>
                            "Clear"
                        </button>
                    </div>
                    <div class="flag-diff" data-testid="compare-diff">
                        <span class="dlg-label">"flags A → B"</span>
                        <span class="diff-lines" inner_html=c.diff></span>
                    </div>
                    <div class="cmp-results" inner_html=c.table></div>
                    {actions}
                </section>
            }
            .into_any()
        }
    }
}

/// "Restart with A (…)…": opens the restart dialog at `set`'s flags while the
/// server can be relaunched.
fn restart_with(state: AppState, set: ChosenSet, which: &'static str) -> impl IntoView {
    let relaunch = Memo::new(move |_| state.server.with(|s| s.as_ref().and_then(relaunch_kind)));
    let text = format!("Restart with {which} ({})…", set.name);
    let id = set.flagset.clone();
    let open = move |_| {
        let Some(status) = state.server.get_untracked() else {
            return;
        };
        let Some(kind) = relaunch_kind(&status) else {
            return;
        };
        state.dialog.set(Some(DialogOpen {
            kind,
            status,
            prefill: Some(Prefill {
                id: set.flagset.clone(),
                name: set.name.clone(),
                flags: set.flags.clone(),
            }),
        }));
    };
    view! {
        <button
            class="btn btn-danger"
            data-testid="restart-with"
            data-flagset=id
            disabled=move || relaunch.get().is_none()
            title="opens the restart dialog at this set's flags; nothing happens until you confirm"
            on:click=open
        >
            {text}
        </button>
    }
}
