//! The connection badge: live, stale (with the data's age), reconnecting (with
//! the attempt and the retry countdown) or connecting.

use leptos::prelude::*;
use shared::units::fmt_age_ms;

use crate::state::{AppState, ConnView};

/// The badge's text.
fn label(view: ConnView) -> String {
    match view {
        ConnView::Connecting => "connecting…".to_owned(),
        ConnView::Live => "live".to_owned(),
        ConnView::Stale { age_ms } => format!("stale · {}", fmt_age_ms(age_ms)),
        // The attempt's number is in the tooltip: the badge stays narrow.
        ConnView::Reconnecting {
            retry_in_ms: Some(ms),
            ..
        } => format!("offline · retry in {}", fmt_age_ms(ms)),
        ConnView::Reconnecting {
            retry_in_ms: None, ..
        } => "offline · reconnecting…".to_owned(),
    }
}

/// The badge's tooltip.
fn tooltip(view: ConnView) -> String {
    match view {
        ConnView::Connecting => "opening the connection to drainwatch".to_owned(),
        ConnView::Live => "samples are arriving".to_owned(),
        ConnView::Stale { age_ms } => format!(
            "connected, but the last sample came {} ago",
            fmt_age_ms(age_ms)
        ),
        ConnView::Reconnecting {
            attempt, delay_ms, ..
        } => format!(
            "connection lost; retry {attempt} after {} (backoff 0.5 s doubling to 8 s)",
            fmt_age_ms(delay_ms)
        ),
    }
}

/// The connection state, `data-state` = `live` | `stale` | `reconnecting` |
/// `connecting`; while reconnecting also `data-attempt` and `data-retry-ms` (the
/// delay before that attempt).
#[component]
pub(crate) fn ConnBadge() -> impl IntoView {
    let state = AppState::get();
    let view_now = Memo::new(move |_| state.conn_view());
    let attempt = move || match view_now.get() {
        ConnView::Reconnecting { attempt, .. } => Some(attempt.to_string()),
        _ => None,
    };
    let retry_ms = move || match view_now.get() {
        ConnView::Reconnecting { delay_ms, .. } => Some(delay_ms.to_string()),
        _ => None,
    };

    view! {
        <span
            class="conn-badge"
            data-testid="conn-badge"
            data-state=move || view_now.get().state()
            data-attempt=attempt
            data-retry-ms=retry_ms
            title=move || tooltip(view_now.get())
        >
            <span class="conn-dot" aria-hidden="true"></span>
            <span class="conn-text">{move || label(view_now.get())}</span>
        </span>
    }
}
