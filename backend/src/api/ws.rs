//! `/ws`: `hello`, then a `snapshot`, then every sample. A client that falls
//! further behind than its buffer gets a fresh `snapshot` instead of a silent gap;
//! one that stops reading altogether is dropped after [`SEND_TIMEOUT`]. Client
//! messages that do not parse get an `error` and the connection stays up.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use shared::{ClientMsg, ErrorCode, PROTOCOL_VERSION, ServerMsg};
use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::AppState;
use crate::hub::Hub;

/// Ping frames keep proxies from closing an idle socket and find dead peers.
const PING_EVERY: Duration = Duration::from_secs(15);
/// A peer silent for this long (no pong, no message) is gone.
const PEER_TIMEOUT: Duration = Duration::from_secs(45);
/// A send that cannot complete in this time means the peer stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest client message accepted; ours are tiny.
const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

pub(super) async fn upgrade(ws: WebSocketUpgrade, State(state): State<AppState>) -> Response {
    ws.max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
        .on_upgrade(move |socket: WebSocket| async move {
            let (sink, stream) = socket.split();
            serve(state.hub, sink, stream, state.shutdown).await;
        })
}

fn text(msg: &ServerMsg) -> Message {
    match serde_json::to_string(msg) {
        Ok(s) => Message::Text(Utf8Bytes::from(s)),
        // Our own types always serialize; an empty object keeps the socket honest.
        Err(_) => Message::Text(Utf8Bytes::from_static("{}")),
    }
}

/// Why a connection ended (for the log).
#[derive(Debug)]
enum End {
    ClientClosed,
    Shutdown,
    SendFailed,
    PeerSilent,
}

/// Serves one client over any sink/stream pair (a real socket, or channels in tests).
pub(crate) async fn serve<S, R>(
    hub: Arc<Hub>,
    mut sink: S,
    mut stream: R,
    mut shutdown: watch::Receiver<bool>,
) where
    S: Sink<Message> + Unpin,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    // Subscribe before the snapshot: nothing published in between is lost.
    let mut rx = hub.subscribe();
    let hello = ServerMsg::Hello {
        protocol_version: PROTOCOL_VERSION,
        server_version: hub.host().version.clone(),
    };
    let mut last_seq;
    let end = 'conn: {
        if *shutdown.borrow_and_update() {
            break 'conn End::Shutdown;
        }
        if send(&mut sink, text(&hello)).await.is_err() {
            break 'conn End::SendFailed;
        }
        match send_snapshot(&hub, &mut sink).await {
            Ok(seq) => last_seq = seq,
            Err(()) => break 'conn End::SendFailed,
        }
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(p) if p.sample.seq <= last_seq => {}
                    Ok(p) => {
                        last_seq = p.sample.seq;
                        if send(&mut sink, Message::Text(p.json.clone())).await.is_err() {
                            break End::SendFailed;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "client lagged; resyncing");
                        rx = rx.resubscribe();
                        match send_snapshot(&hub, &mut sink).await {
                            Ok(seq) => last_seq = seq,
                            Err(()) => break End::SendFailed,
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break End::Shutdown,
                },
                incoming = stream.next() => {
                    last_heard = Instant::now();
                    let reply = match incoming {
                        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break End::ClientClosed,
                        Some(Ok(Message::Text(t))) => on_text(t.as_str()),
                        Some(Ok(Message::Binary(_))) => Some(Reply::Msg(text(&ServerMsg::Error {
                            code: ErrorCode::Unsupported,
                            message: "binary frames are not part of this protocol; send JSON text".into(),
                        }))),
                        // Pings are answered by the socket layer; pongs only prove liveness.
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                    };
                    if let Some(reply) = reply {
                        let reply = match reply {
                            Reply::Msg(m) => send(&mut sink, m).await,
                            Reply::Snapshot => send_snapshot(&hub, &mut sink).await.map(|seq| {
                                last_seq = last_seq.max(seq);
                            }),
                        };
                        if reply.is_err() {
                            break End::SendFailed;
                        }
                    }
                }
                _ = ping.tick() => {
                    if last_heard.elapsed() > PEER_TIMEOUT {
                        break End::PeerSilent;
                    }
                    if send(&mut sink, Message::Ping(Default::default())).await.is_err() {
                        break End::SendFailed;
                    }
                }
                _ = shutdown.changed() => break End::Shutdown,
            }
        }
    };
    if matches!(end, End::Shutdown | End::PeerSilent) {
        let close = CloseFrame {
            code: if matches!(end, End::Shutdown) {
                1001
            } else {
                1000
            },
            reason: Utf8Bytes::from_static("drainwatch is going away"),
        };
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            sink.send(Message::Close(Some(close))),
        )
        .await;
    }
    tracing::debug!(?end, "websocket closed");
}

enum Reply {
    Msg(Message),
    Snapshot,
}

impl From<Message> for Reply {
    fn from(m: Message) -> Self {
        Self::Msg(m)
    }
}

fn on_text(body: &str) -> Option<Reply> {
    match serde_json::from_str::<ClientMsg>(body) {
        Ok(ClientMsg::Ping { nonce }) => Some(text(&ServerMsg::Pong { nonce }).into()),
        Ok(ClientMsg::Resync) => Some(Reply::Snapshot),
        Err(e) => Some(
            text(&ServerMsg::Error {
                code: ErrorCode::BadMessage,
                message: format!("cannot parse message: {e}"),
            })
            .into(),
        ),
    }
}

async fn send<S: Sink<Message> + Unpin>(sink: &mut S, msg: Message) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, sink.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Sends a snapshot; returns the seq of the sample it contains.
async fn send_snapshot<S: Sink<Message> + Unpin>(hub: &Hub, sink: &mut S) -> Result<u64, ()> {
    let snap = hub.snapshot();
    let seq = snap.latest.as_ref().map_or(0, |s| s.seq);
    send(sink, text(&ServerMsg::Snapshot(snap))).await?;
    Ok(seq)
}
