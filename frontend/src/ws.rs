//! The only user of the socket: opens `/ws` on the page's own host, feeds every
//! message into [`AppState`], retries with exponential backoff after a close,
//! and sends an application-level `ping` every few seconds.
//!
//! The browser's own `WebSocket`, through web-sys: the page needs its three
//! events and `send`, and a socket that is closed is replaced by a new one
//! after the backoff.

use std::time::Duration;

use leptos::prelude::*;
use leptos::wasm_bindgen::JsCast;
use leptos::wasm_bindgen::closure::Closure;
use shared::ClientMsg;
use web_sys::{MessageEvent, WebSocket};

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

/// The open socket and its event handlers (dropped with it).
struct Socket {
    ws: WebSocket,
    _handlers: [Closure<dyn FnMut(web_sys::Event)>; 3],
}

/// Opens the socket and keeps it open for as long as the page lives.
pub(crate) fn connect(state: AppState) {
    // The socket now; replaced after a close.
    let socket = StoredValue::new_local(None::<Socket>);
    // Consecutive failed connections; back to 0 once the server has spoken.
    let failures = StoredValue::new(0u32);
    open(state, socket, failures);

    let nonce = StoredValue::new(0u64);
    set_interval(
        move || {
            nonce.update_value(|n| *n += 1);
            let ping = ClientMsg::Ping {
                nonce: nonce.get_value(),
            };
            socket.with_value(|s| {
                if let (Some(s), Ok(text)) = (s, serde_json::to_string(&ping))
                    && s.ws.ready_state() == WebSocket::OPEN
                {
                    let _ = s.ws.send_with_str(&text);
                }
            });
        },
        Duration::from_millis(PING_EVERY_MS),
    );
}

/// A new socket into `socket`: its messages go to `state`, and its close
/// schedules the next one after the backoff.
fn open(
    state: AppState,
    socket: StoredValue<Option<Socket>, LocalStorage>,
    failures: StoredValue<u32>,
) {
    let Ok(ws) = WebSocket::new(&socket_url()) else {
        closed(state, socket, failures);
        return;
    };
    let on_open = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        state.link.set(Link::Open {
            since_ms: localtime::now_ms(),
        });
    });
    let on_message = Closure::<dyn FnMut(web_sys::Event)>::new(move |ev: web_sys::Event| {
        let Some(text) = ev
            .dyn_ref::<MessageEvent>()
            .and_then(|m| m.data().as_string())
        else {
            return;
        };
        match crate::wire::parse_msg(&text) {
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
        }
    });
    let on_close = Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
        closed(state, socket, failures);
    });
    ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    socket.set_value(Some(Socket {
        ws,
        _handlers: [on_open, on_message, on_close],
    }));
}

/// The socket closed (or could not be made): the session is checked, and a
/// new socket is opened after the backoff.
fn closed(
    state: AppState,
    socket: StoredValue<Option<Socket>, LocalStorage>,
    failures: StoredValue<u32>,
) {
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
            open(state, socket, failures);
        },
        Duration::from_millis(delay_ms),
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
