//! The × in a modal's head that closes it.

use leptos::prelude::*;

/// The close button of a modal: `on_close` on a click; `testid` is where a
/// test presses it.
pub(crate) fn close_button(
    on_close: impl Fn() + Send + Sync + 'static,
    testid: Option<&'static str>,
) -> impl IntoView {
    view! {
        <button
            type="button"
            class="modal-x"
            data-testid=testid
            aria-label="close"
            on:click=move |_| on_close()
        >
            "×"
        </button>
    }
}
