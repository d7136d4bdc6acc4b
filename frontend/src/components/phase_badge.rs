//! A phase as a coloured pill: ready green, launching and warming up blue,
//! draining, killing and verifying amber, failed and crashed red, stopped grey
//! (the colours live in `style.css`, keyed by `data-phase`).

use leptos::prelude::*;
use shared::restart::Phase;

/// The pill of one phase.
#[component]
pub(crate) fn PhaseBadge(
    /// The phase to show.
    #[prop(into)]
    phase: Signal<Phase>,
    /// The pill's `data-testid`, if it needs one.
    #[prop(optional)]
    testid: Option<&'static str>,
) -> impl IntoView {
    view! {
        <span
            class="phase"
            data-testid=testid
            data-phase=move || phase.get().as_str()
        >
            {move || phase.get().label()}
        </span>
    }
}
