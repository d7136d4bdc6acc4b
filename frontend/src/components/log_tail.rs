//! The newest lines of a log, monospace, in a box of fixed height (or at most
//! that) that scrolls and stays pinned to its bottom (the newest line) as
//! lines arrive.

use leptos::prelude::*;

use crate::ops::last_lines;

/// A log's last `max` lines.
#[component]
pub(crate) fn LogTail(
    /// The log, oldest line first.
    #[prop(into)]
    lines: Signal<Vec<String>>,
    /// How many of the newest lines to keep.
    max: usize,
    /// The box's `data-testid`.
    testid: &'static str,
    /// The box's height in lines of text…
    rows: u32,
    /// …or at most that, shrinking to a shorter log (for a log that is read
    /// once rather than watched grow).
    #[prop(optional)]
    fit: bool,
) -> impl IntoView {
    let text = move || {
        lines.with(|l| {
            if l.is_empty() {
                "(no log lines)".to_owned()
            } else {
                last_lines(l, max).join("\n")
            }
        })
    };
    // `column-reverse` keeps the scroll position at the bottom.
    let size = format!("calc({rows} * 1.35em + 0.9rem)");
    let (height, max_height) = if fit {
        (None, Some(size))
    } else {
        (Some(size), None)
    };
    view! {
        <div
            class="log-tail"
            data-testid=testid
            style:height=height
            style:max-height=max_height
        >
            <pre class="log-text">{text}</pre>
        </div>
    }
}
