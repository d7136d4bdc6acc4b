//! Two ticked flag sets compared: their flag diff (`GET /api/flagsets/diff`),
//! their results per concurrency, and a button per set that opens the
//! guarded restart dialog at that set's flags; a hint while fewer than two
//! are ticked.

use leptos::prelude::*;
use leptos::task::spawn_local;
use shared::bench::FlagSetResults;

use crate::api::{self, SetDiff};
use crate::ledger::compare::compare_table;
use crate::ledger::set_name;
use crate::markup::{diff_lines, escape};
use crate::ops::relaunch_kind;
use crate::state::{AppState, DialogOpen, Prefill};

/// The comparison of the two ticked sets, or a hint while fewer are ticked.
#[component]
pub(crate) fn ComparePanel(
    /// The ids of the ticked sets, oldest pick first; Clear empties it.
    compare: RwSignal<Vec<String>>,
) -> impl IntoView {
    let state = AppState::get();
    // The two sets, when both are in the ledger.
    let pair = Memo::new(move |_| {
        compare.with(|c| match c.as_slice() {
            [a, b] => state.ledger.with(|l| {
                let find = |id: &str| l.iter().find(|r| r.set.id == id).cloned();
                find(a).zip(find(b))
            }),
            _ => None,
        })
    });
    let ids = Memo::new(move |_| {
        pair.with(|p| {
            p.as_ref()
                .map(|(a, b)| (a.set.id.clone(), b.set.id.clone()))
        })
    });
    let diff = RwSignal::new(None::<Result<SetDiff, String>>);
    Effect::new(move |_| {
        let Some((a, b)) = ids.get() else { return };
        diff.set(None);
        spawn_local(async move {
            let r = api::set_diff(&a, &b).await;
            // Only if the pair is still the one asked about.
            if ids.try_get_untracked().flatten() == Some((a, b)) {
                diff.try_set(Some(r));
            }
        });
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
        Some((a, b)) => panel(state, compare, diff, a, b).into_any(),
    }
}

/// The panel for sets `a` and `b`.
fn panel(
    state: AppState,
    compare: RwSignal<Vec<String>>,
    diff: RwSignal<Option<Result<SetDiff, String>>>,
    a: FlagSetResults,
    b: FlagSetResults,
) -> impl IntoView {
    let table = compare_table(&a, &b);
    let diff_html = move || {
        diff.with(|d| match d {
            None => r#"<span class="dlg-muted">loading…</span>"#.to_owned(),
            Some(Err(e)) => format!(r#"<span class="diff-removed">{}</span>"#, escape(e)),
            Some(Ok(d)) => diff_lines(&d.changes, "no difference"),
        })
    };
    let title = format!("compare A {} with B {}", set_name(&a.set), set_name(&b.set));
    // Only an operator's page offers to relaunch.
    let actions = state.may_operate().then(|| {
        view! { <div class="cmp-actions">{restart_with(state, a.clone(), "A")} {restart_with(state, b.clone(), "B")}</div> }
    });
    let (aid, bid) = (a.set.id.clone(), b.set.id.clone());
    view! {
        <section class="cmp-panel" data-testid="compare-panel" data-a=aid data-b=bid>
            <div class="cmp-head">
                <h3 class="dlg-h cmp-title">{title}</h3>
                <button type="button" class="btn btn-small" data-testid="compare-clear" on:click=move |_| compare.set(Vec::new())>
                    "Clear"
                </button>
            </div>
            <div class="flag-diff" data-testid="compare-diff">
                <span class="dlg-label">"flags A → B"</span>
                <span class="diff-lines" inner_html=diff_html></span>
            </div>
            <div class="cmp-results" inner_html=table></div>
            {actions}
        </section>
    }
}

/// "Restart with A (…)…": opens the restart dialog at `r`'s flags while the
/// server can be relaunched.
fn restart_with(state: AppState, r: FlagSetResults, which: &'static str) -> impl IntoView {
    let relaunch = Memo::new(move |_| state.server.with(|s| s.as_ref().and_then(relaunch_kind)));
    let open = move |r: &FlagSetResults| {
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
                id: r.set.id.clone(),
                name: set_name(&r.set).to_owned(),
                flags: r.set.flags.clone(),
            }),
        }));
    };
    let id = r.set.id.clone();
    let text = format!("Restart with {which} ({})…", set_name(&r.set));
    view! {
        <button
            class="btn btn-danger"
            data-testid="restart-with"
            data-flagset=id
            disabled=move || relaunch.get().is_none()
            title="opens the restart dialog at this set's flags; nothing happens until you confirm"
            on:click=move |_| open(&r)
        >
            {text}
        </button>
    }
}
