//! `/ws`: `hello`, then a `snapshot`, then every sample. A client that falls
//! further behind than its buffer gets a fresh `snapshot` instead of a silent gap;
//! one that stops reading altogether is dropped after a send timeout. Client
//! messages that do not parse get an `error` and the connection stays up.

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use shared::{ClientMsg, ErrorCode, PROTOCOL_VERSION, ServerMsg};
use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::state::AppState;
use crate::auth::Caller;
use crate::http::ApiError;
use crate::hub::{Full, Hub};

/// The connection's clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Ping frames keep proxies from closing an idle socket and find dead peers.
    ping_every: Duration,
    /// A peer silent for this long (no pong, no message) is gone.
    peer_timeout: Duration,
    /// A send that cannot complete in this time means the peer stopped reading.
    send_timeout: Duration,
    /// How long a closing handshake may take before the socket is simply dropped.
    close_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            ping_every: Duration::from_secs(15),
            peer_timeout: Duration::from_secs(45),
            send_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(1),
        }
    }
}
/// Largest client message accepted; ours are tiny.
const MAX_CLIENT_MESSAGE: usize = 16 * 1024;
/// Client messages per second before the socket is closed (ours send one
/// ping every few seconds).
const MAX_CLIENT_RATE: u32 = 20;
/// Open sockets per person (per token name; per address without
/// authentication): a tab each, with room, but not a flood.
const MAX_SOCKETS_PER_CLIENT: u32 = 32;
/// Open sockets in all: without authentication every loopback address
/// (127.0.0.0/8) is a person of its own.
pub(super) const MAX_SOCKETS: u32 = 256;
/// Snapshots a client may ask for (`resync`): one per this long. A snapshot
/// is the whole state with its history, the largest thing a socket sends.
const RESYNC_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let present = match state.hub.join(
        &caller.presence_key(),
        caller.role,
        MAX_SOCKETS_PER_CLIENT,
        MAX_SOCKETS,
    ) {
        Ok(p) => p,
        Err(Full::Client) => {
            return ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many open sockets for {} (at most {MAX_SOCKETS_PER_CLIENT})",
                    caller.presence_key()
                ),
            )
            .into_response();
        }
        Err(Full::Host) => {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("drainwatch serves {MAX_SOCKETS} sockets at most, and has them"),
            )
            .into_response();
        }
    };
    ws.max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
        .on_upgrade(move |socket: WebSocket| async move {
            let _open = state.sockets;
            let _present = present;
            let (sink, stream) = socket.split();
            serve(state.hub, sink, stream, state.shutdown, Timing::default()).await;
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
    TooChatty,
}

/// The hello and the first snapshot; the snapshot's sequence number.
async fn greet<S: Sink<Message> + Unpin>(
    hub: &Hub,
    sink: &mut S,
    timeout: Duration,
) -> Result<u64, ()> {
    let hello = ServerMsg::Hello {
        protocol_version: PROTOCOL_VERSION,
        server_version: hub.host().version.clone(),
    };
    send(sink, timeout, text(&hello)).await?;
    send_snapshot(hub, sink, timeout).await
}

/// How many frames a client sent in the current second.
struct Chatter {
    window: Instant,
    count: u32,
}

impl Chatter {
    fn new() -> Self {
        Self {
            window: Instant::now(),
            count: 0,
        }
    }

    /// One more frame heard at `now`: whether the client is now over
    /// [`MAX_CLIENT_RATE`] frames a second.
    fn too_much(&mut self, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            (self.window, self.count) = (now, 0);
        }
        self.count += 1;
        self.count > MAX_CLIENT_RATE
    }
}

/// What a frame from the client asks for; `Err` when it ends the connection.
fn on_frame(incoming: Option<Result<Message, axum::Error>>) -> Result<Option<Reply>, End> {
    match incoming {
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => Err(End::ClientClosed),
        Some(Ok(Message::Text(t))) => Ok(on_text(t.as_str())),
        Some(Ok(Message::Binary(_))) => Ok(Some(Reply::Msg(text(&ServerMsg::Error {
            code: ErrorCode::Unsupported,
            message: "binary frames are not part of this protocol; send JSON text".into(),
        })))),
        // Pings are answered by the socket layer; pongs only prove liveness.
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(None),
    }
}

/// Serves one client over any sink/stream pair (a real socket, or channels in tests).
pub(crate) async fn serve<S, R>(
    hub: Arc<Hub>,
    mut sink: S,
    mut stream: R,
    mut shutdown: watch::Receiver<bool>,
    timing: Timing,
) where
    S: Sink<Message> + Unpin,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    // Subscribe before the snapshot: nothing published in between is lost.
    let mut rx = hub.subscribe();
    let mut events = hub.subscribe_events();
    let mut last_seq;
    let end = 'conn: {
        if *shutdown.borrow_and_update() {
            break 'conn End::Shutdown;
        }
        match greet(&hub, &mut sink, timing.send_timeout).await {
            Ok(seq) => last_seq = seq,
            Err(()) => break 'conn End::SendFailed,
        }
        let mut ping =
            tokio::time::interval_at(Instant::now() + timing.ping_every, timing.ping_every);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        let mut chatter = Chatter::new();
        let mut last_snapshot = Instant::now();
        loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(p) if p.sample.seq <= last_seq => {}
                    Ok(p) => {
                        last_seq = p.sample.seq;
                        if send(&mut sink, timing.send_timeout, Message::Text(p.json.clone())).await.is_err() {
                            break End::SendFailed;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "client lagged; resyncing");
                        rx = rx.resubscribe();
                        match send_snapshot(&hub, &mut sink, timing.send_timeout).await {
                            Ok(seq) => last_seq = seq,
                            Err(()) => break End::SendFailed,
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break End::Shutdown,
                },
                incoming = stream.next() => {
                    last_heard = Instant::now();
                    if chatter.too_much(last_heard) {
                        break End::TooChatty;
                    }
                    let reply = match on_frame(incoming) {
                        Ok(reply) => reply,
                        Err(end) => break end,
                    };
                    if let Some(reply) = reply
                        && answer(&hub, &mut sink, timing.send_timeout, reply, &mut last_snapshot, &mut last_seq).await.is_err()
                    {
                        break End::SendFailed;
                    }
                }
                event = events.recv() => match event {
                    Ok(json) => {
                        if send(&mut sink, timing.send_timeout, Message::Text(json)).await.is_err() {
                            break End::SendFailed;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        events = events.resubscribe();
                        match send_snapshot(&hub, &mut sink, timing.send_timeout).await {
                            Ok(seq) => last_seq = last_seq.max(seq),
                            Err(()) => break End::SendFailed,
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => break End::Shutdown,
                },
                _ = ping.tick() => {
                    if last_heard.elapsed() > timing.peer_timeout {
                        break End::PeerSilent;
                    }
                    if send(&mut sink, timing.send_timeout, Message::Ping(Default::default())).await.is_err() {
                        break End::SendFailed;
                    }
                }
                _ = shutdown.changed() => break End::Shutdown,
            }
        }
    };
    close(sink, stream, &end, timing.close_timeout).await;
    tracing::debug!(?end, "websocket closed");
}

/// Sends what a client's message asked for: a reply, or a fresh snapshot (at
/// most one a second; sooner, an error says the last one is current).
async fn answer<S: Sink<Message> + Unpin>(
    hub: &Hub,
    sink: &mut S,
    limit: Duration,
    reply: Reply,
    last_snapshot: &mut Instant,
    last_seq: &mut u64,
) -> Result<(), ()> {
    match reply {
        Reply::Msg(m) => send(sink, limit, m).await,
        Reply::Snapshot if last_snapshot.elapsed() < RESYNC_EVERY => {
            let too_soon = ServerMsg::Error {
                code: ErrorCode::TooSoon,
                message: "one resync a second: the last snapshot is current".into(),
            };
            send(sink, limit, text(&too_soon)).await
        }
        Reply::Snapshot => {
            *last_snapshot = Instant::now();
            let seq = send_snapshot(hub, sink, limit).await?;
            *last_seq = (*last_seq).max(seq);
            Ok(())
        }
    }
}

/// Ends the connection: with a close frame that says why, where drainwatch
/// ended it, and the close handshake flushed, all within `limit`.
async fn close<S, R>(mut sink: S, mut stream: R, end: &End, limit: Duration)
where
    S: Sink<Message> + Unpin,
    R: Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    let close = match end {
        End::Shutdown => Some((1001, "drainwatch is shutting down")),
        End::PeerSilent => Some((1000, "no answer to pings")),
        End::TooChatty => Some((1008, "too many messages")),
        End::ClientClosed | End::SendFailed => None,
    };
    let goodbye = async {
        if let Some((code, reason)) = close {
            let frame = CloseFrame {
                code,
                reason: Utf8Bytes::from_static(reason),
            };
            let _ = sink.send(Message::Close(Some(frame))).await;
            // Read on until the client answers our close: dropping a socket with
            // unread input makes the kernel reset it, and the client would see
            // "connection reset" instead of our code and reason.
            while let Some(Ok(msg)) = stream.next().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
            }
        }
        // Flushes the close handshake (our frame, or the reply to the client's).
        let _ = sink.close().await;
    };
    let _ = tokio::time::timeout(limit, goodbye).await;
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

async fn send<S: Sink<Message> + Unpin>(
    sink: &mut S,
    limit: Duration,
    msg: Message,
) -> Result<(), ()> {
    match tokio::time::timeout(limit, sink.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Sends a snapshot; returns the seq of the sample it contains.
async fn send_snapshot<S: Sink<Message> + Unpin>(
    hub: &Hub,
    sink: &mut S,
    limit: Duration,
) -> Result<u64, ()> {
    let snap = hub.snapshot();
    let seq = snap.latest.as_ref().map_or(0, |s| s.seq);
    send(sink, limit, text(&ServerMsg::Snapshot(snap))).await?;
    Ok(seq)
}

#[cfg(test)]
mod tests {
    //! `serve` over channels: the socket's edge cases without a socket.

    use std::future::pending;

    use futures_util::{sink, stream};
    use tokio::sync::mpsc;

    use super::*;
    use crate::hub::fixtures::{host, sample};

    fn hub(client_buffer: usize) -> Arc<Hub> {
        Arc::new(Hub::new(host(10_000), client_buffer))
    }

    fn fast() -> Timing {
        Timing {
            ping_every: Duration::from_millis(20),
            peer_timeout: Duration::from_millis(60),
            send_timeout: Duration::from_millis(100),
            close_timeout: Duration::from_millis(100),
        }
    }

    /// A sink that hands every message to a bounded channel (capacity 1: a
    /// client that does not read blocks the server's sends).
    fn channel_sink(tx: mpsc::Sender<Message>) -> impl Sink<Message> + Unpin {
        Box::pin(sink::unfold(tx, |tx, m: Message| async move {
            tx.send(m).await.map(|()| tx).map_err(|_| ())
        }))
    }

    fn parse(m: &Message) -> Option<ServerMsg> {
        match m {
            Message::Text(t) => serde_json::from_str(t.as_str()).ok(),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_silent_peer_is_pinged_then_closed() {
        let (tx, mut rx) = mpsc::channel(64);
        let (_stop, shutdown) = watch::channel(false);
        let silent = stream::pending::<Result<Message, axum::Error>>();
        // Several ping periods before the peer counts as gone, so a late
        // first tick on a loaded machine still pings first.
        let timing = Timing {
            peer_timeout: Duration::from_millis(300),
            ..fast()
        };
        let done = tokio::time::timeout(
            Duration::from_secs(5),
            serve(hub(4), channel_sink(tx), silent, shutdown, timing),
        )
        .await;
        assert!(done.is_ok(), "serve did not end");
        let mut got = Vec::new();
        while let Ok(m) = rx.try_recv() {
            got.push(m);
        }
        assert!(matches!(parse(&got[0]), Some(ServerMsg::Hello { .. })));
        assert!(matches!(parse(&got[1]), Some(ServerMsg::Snapshot(_))));
        assert!(got.iter().any(|m| matches!(m, Message::Ping(_))));
        assert!(matches!(got.last(), Some(Message::Close(Some(f))) if f.code == 1000));
    }

    #[tokio::test]
    async fn a_client_that_never_reads_is_dropped_after_the_send_timeout() {
        let (_stop, shutdown) = watch::channel(false);
        let stuck = Box::pin(sink::unfold((), |(), _m: Message| {
            pending::<Result<(), ()>>()
        }));
        let done = tokio::time::timeout(
            Duration::from_secs(5),
            serve(hub(4), stuck, stream::pending(), shutdown, fast()),
        )
        .await;
        assert!(done.is_ok(), "a stuck send held the connection open");
    }

    #[tokio::test]
    async fn a_lagging_client_gets_a_snapshot_and_no_silent_gap() {
        let hub = hub(2);
        let (tx, mut rx) = mpsc::channel(1);
        let (_stop, shutdown) = watch::channel(false);
        let timing = Timing {
            send_timeout: Duration::from_secs(5),
            peer_timeout: Duration::from_secs(60),
            ..fast()
        };
        let (_client, incoming) = mpsc::channel::<Result<Message, axum::Error>>(1);
        let incoming = stream::unfold(incoming, |mut rx| async move {
            rx.recv().await.map(|m| (m, rx))
        });
        let task = tokio::spawn(serve(
            Arc::clone(&hub),
            channel_sink(tx),
            Box::pin(incoming),
            shutdown,
            timing,
        ));
        assert!(matches!(
            rx.recv().await.as_ref().and_then(parse),
            Some(ServerMsg::Hello { .. })
        ));
        // While the client reads nothing, ten samples are published into a buffer of two.
        for seq in 1..=10 {
            hub.publish(sample(seq, seq * 100));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut last = 0;
        let mut resynced = false;
        while last < 10 {
            let m = tokio::time::timeout(Duration::from_secs(2), rx.recv())
                .await
                .expect("a message")
                .expect("open");
            match parse(&m) {
                Some(ServerMsg::Sample(s)) => {
                    assert_eq!(s.seq, last + 1, "silent gap after {last}");
                    last = s.seq;
                }
                Some(ServerMsg::Snapshot(s)) => {
                    let seq = s.latest.map_or(0, |l| l.seq);
                    if last > 0 {
                        resynced = true;
                    }
                    assert!(seq >= last);
                    last = seq;
                }
                Some(ServerMsg::Hello { .. }) | None => {}
                Some(other) => panic!("unexpected {other:?}"),
            }
        }
        assert!(resynced, "the lag was not answered with a snapshot");
        task.abort();
    }
}
