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

/// The badge as HTML text: `data-state` = `live` | `stale` | `reconnecting` |
/// `connecting`; while reconnecting also `data-attempt` and `data-retry-ms`
/// (the delay before that attempt).
fn badge_markup(view: ConnView) -> String {
    let extra = match view {
        ConnView::Reconnecting {
            attempt, delay_ms, ..
        } => format!(r#" data-attempt="{attempt}" data-retry-ms="{delay_ms}""#),
        _ => String::new(),
    };
    format!(
        r#"<span class="conn-badge" data-testid="conn-badge" data-state="{}"{extra} title="{}"><span class="conn-dot" aria-hidden="true"></span><span class="conn-text">{}</span></span>"#,
        view.state(),
        tooltip(view),
        label(view)
    )
}

/// The connection badge, following the socket and the clock.
#[component]
pub(crate) fn ConnBadge() -> impl IntoView {
    let state = AppState::get();
    // `display: contents`: the badge is the bar's item.
    view! { <span class="conn-slot" inner_html=move || badge_markup(state.conn_view())></span> }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn badge_carries_its_state_and_the_retry() {
        assert_eq!(
            badge_markup(ConnView::Live),
            r#"<span class="conn-badge" data-testid="conn-badge" data-state="live" title="samples are arriving"><span class="conn-dot" aria-hidden="true"></span><span class="conn-text">live</span></span>"#
        );
        let html = badge_markup(ConnView::Reconnecting {
            attempt: 3,
            delay_ms: 2000,
            retry_in_ms: Some(1500),
        });
        assert!(html.contains(
            r#"data-state="reconnecting" data-attempt="3" data-retry-ms="2000" title="connection lost; retry 3 after 2.0 s"#
        ));
        assert!(html.contains(">offline · retry in 1.5 s</span>"));
    }
}
