//! The only user of the socket: opens `/ws` on the page's own host, feeds every
//! message into [`AppState`], retries with exponential backoff after a close,
//! and sends an application-level `ping` every few seconds.
//!
//! leptos-use's own reconnect waits a fixed interval, so it is switched off
//! (`ReconnectLimit::Limited(0)`) and retries are scheduled here by calling its
//! `open` again once the old socket is closed.

use std::sync::Arc;
use std::time::Duration;

use codee::string::FromToStringCodec;
use leptos::prelude::*;
use leptos_use::core::ConnectionReadyState;
use leptos_use::{
    ReconnectLimit, UseWebSocketOptions, UseWebSocketReturn, use_interval_fn,
    use_websocket_with_options,
};
use shared::ClientMsg;

use crate::localtime;
use crate::state::{AppState, Link};

/// The first retry's delay; each further one doubles it, up to [`BACKOFF_MAX_MS`].
const BACKOFF_FIRST_MS: u64 = 500;
const BACKOFF_MAX_MS: u64 = 8000;
/// How often to ping the server while connected.
const PING_EVERY_MS: u64 = 5000;

/// The delay before retry number `attempt` (1-based): 0.5 s, 1 s, 2 s, 4 s, then 8 s.
pub(crate) fn backoff_ms(attempt: u32) -> u64 {
    let doublings = attempt.saturating_sub(1).min(16);
    (BACKOFF_FIRST_MS << doublings).min(BACKOFF_MAX_MS)
}

/// `ws://host/ws`, or `wss://` when the page came over https.
fn socket_url() -> String {
    let location = window().location();
    let scheme = match location.protocol() {
        Ok(p) if p == "https:" => "wss",
        _ => "ws",
    };
    let host = location.host().unwrap_or_default();
    format!("{scheme}://{host}{}/ws", crate::base::base())
}

/// Opens the socket and keeps it open for as long as the calling component lives.
pub(crate) fn connect(state: AppState) {
    // Set once `open` exists; called by the retry timer.
    let reopen: StoredValue<Option<Arc<dyn Fn() + Send + Sync>>> = StoredValue::new(None);
    // Consecutive failed connections; back to 0 once the server has spoken.
    let failures = StoredValue::new(0u32);

    let options = UseWebSocketOptions::default()
        .reconnect_limit(ReconnectLimit::Limited(0))
        .on_open(move |_| {
            state.link.set(Link::Open {
                since_ms: localtime::now_ms(),
            });
        })
        .on_message_raw(move |text: &str| match crate::wire::parse_msg(text) {
            Ok(msg) => {
                failures.set_value(0);
                state.apply(msg, localtime::now_ms());
            }
            Err(err) => {
                leptos::logging::warn!("unreadable message from the server: {err}");
                state.notice.set(Some(format!(
                    "could not read a message from the server: {err}"
                )));
            }
        })
        .on_close(move |_| {
            // A session that ended closes the socket too: log in again.
            crate::api::check_session(state);
            let attempt = failures.get_value().saturating_add(1);
            failures.set_value(attempt);
            let delay_ms = backoff_ms(attempt);
            state.link.set(Link::Waiting {
                attempt,
                delay_ms,
                retry_at_ms: localtime::now_ms() + delay_ms as f64,
            });
            set_timeout(
                move || {
                    state.link.set(Link::Connecting { attempt, delay_ms });
                    if let Some(open) = reopen.get_value() {
                        open();
                    }
                },
                Duration::from_millis(delay_ms),
            );
        });

    let UseWebSocketReturn {
        ready_state,
        open,
        send,
        ..
    } = use_websocket_with_options::<String, String, FromToStringCodec, _, _>(
        &socket_url(),
        options,
    );
    reopen.set_value(Some(Arc::new(open)));

    let nonce = StoredValue::new(0u64);
    use_interval_fn(
        move || {
            if ready_state.get_untracked() != ConnectionReadyState::Open {
                return;
            }
            nonce.update_value(|n| *n += 1);
            let ping = ClientMsg::Ping {
                nonce: nonce.get_value(),
            };
            if let Ok(text) = serde_json::to_string(&ping) {
                send(&text);
            }
        },
        PING_EVERY_MS,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_eight_seconds() {
        let delays: Vec<u64> = (1..=7).map(backoff_ms).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(backoff_ms(u32::MAX), 8000);
    }
}
