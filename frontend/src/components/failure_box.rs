//! Why an operation failed or the server died: the failure's kind and one-line
//! summary, the processes that held GPU memory (ours or foreign), and the log
//! lines it carries (see [`crate::markup::failure_content`]).

use leptos::prelude::*;
use shared::restart::Failure;

use crate::markup::failure_content;
use crate::ops::failure_key;

/// The box of one failure.
#[component]
pub(crate) fn FailureBox(
    /// The failure to explain.
    failure: Failure,
    /// The box's `data-testid`.
    testid: &'static str,
) -> impl IntoView {
    view! {
        <div
            class="failure-box"
            data-testid=testid
            data-kind=failure_key(&failure)
            inner_html=failure_content(&failure)
        ></div>
    }
}
