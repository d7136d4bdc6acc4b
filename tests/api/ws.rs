//! `/ws` with a real tokio-tungstenite client.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};

use shared::{ErrorCode, PROTOCOL_VERSION, ServerMsg};
use tests::ws::WsClient;
use tests::{GIB, SimHost, SimServer, spawn_app};

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn hello_then_snapshot_then_samples_in_order() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "50"])?;
    let mut ws = WsClient::connect(&app.addr).await?;

    match ws.next_msg(T).await? {
        ServerMsg::Hello {
            protocol_version, ..
        } => assert_eq!(protocol_version, PROTOCOL_VERSION),
        other => anyhow::bail!("expected hello, got {other:?}"),
    }
    let snap_seq = match ws.next_msg(T).await? {
        ServerMsg::Snapshot(s) => {
            assert_eq!(s.host.sample_interval_ms, 50);
            s.latest.map_or(0, |l| l.seq)
        }
        other => anyhow::bail!("expected snapshot, got {other:?}"),
    };
    let mut last = snap_seq;
    for _ in 0..10 {
        match ws.next_msg(T).await? {
            ServerMsg::Sample(s) => {
                assert_eq!(s.seq, last + 1, "no gap, no repeat");
                assert_eq!(s.gpus.len(), 8);
                last = s.seq;
            }
            other => anyhow::bail!("expected a sample, got {other:?}"),
        }
    }
    Ok(())
}

/// Skips hello and the first snapshot.
async fn connected(addr: &str) -> anyhow::Result<WsClient> {
    let mut ws = WsClient::connect(addr).await?;
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Hello { .. }));
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Snapshot(_)));
    Ok(ws)
}

/// Reads until a message other than a sample arrives.
async fn next_non_sample(ws: &mut WsClient) -> anyhow::Result<ServerMsg> {
    loop {
        match ws.next_msg(T).await? {
            ServerMsg::Sample(_) => continue,
            other => return Ok(other),
        }
    }
}

#[tokio::test]
async fn malformed_messages_get_an_error_and_the_connection_stays_up() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let app = spawn_app(&host, &["--sample-interval-ms", "50"])?;
    let mut ws = connected(&app.addr).await?;

    for bad in [
        "not json",
        "{\"type\":\"launch_missiles\"}",
        "{\"type\":\"ping\"}",
        "[]",
    ] {
        ws.send_text(bad).await?;
        match next_non_sample(&mut ws).await? {
            ServerMsg::Error { code, message } => {
                assert_eq!(code, ErrorCode::BadMessage);
                assert!(message.starts_with("cannot parse message"), "{message}");
            }
            other => anyhow::bail!("expected an error for {bad:?}, got {other:?}"),
        }
    }
    ws.socket
        .send(tokio_tungstenite::tungstenite::Message::Binary(
            vec![1, 2, 3].into(),
        ))
        .await?;
    assert!(matches!(
        next_non_sample(&mut ws).await?,
        ServerMsg::Error {
            code: ErrorCode::Unsupported,
            ..
        }
    ));
    // Still served: a ping is answered and samples keep coming.
    ws.send_text(r#"{"type":"ping","nonce":42}"#).await?;
    assert_eq!(
        next_non_sample(&mut ws).await?,
        ServerMsg::Pong { nonce: 42 }
    );
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Sample(_)));
    // And a resync request is a snapshot (one a second: the first came at connect).
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    ws.send_text(r#"{"type":"resync"}"#).await?;
    assert!(matches!(
        next_non_sample(&mut ws).await?,
        ServerMsg::Snapshot(_)
    ));
    Ok(())
}

#[tokio::test]
async fn a_client_that_stops_reading_is_resynced_by_snapshot() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    // A small per-client buffer and fast samples make the lag quick to reach.
    let app = spawn_app(
        &host,
        &["--sample-interval-ms", "10", "--client-buffer", "4"],
    )?;
    let mut ws = WsClient::connect_small_buffer(&app.addr).await?;
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Hello { .. }));
    assert!(matches!(ws.next_msg(T).await?, ServerMsg::Snapshot(_)));
    let first = match ws.next_msg(T).await? {
        ServerMsg::Sample(s) => s.seq,
        other => anyhow::bail!("expected a sample, got {other:?}"),
    };

    // Stop reading long enough for the socket buffers and the client's queue to fill.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Every sample after `first` either follows its predecessor, or comes after a
    // snapshot that covers the gap.
    let mut last = first;
    let mut resyncs = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while resyncs == 0 || last < first + 50 {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no resync seen (last seq {last})"
        );
        match ws.next_msg(T).await? {
            ServerMsg::Sample(s) => {
                assert_eq!(s.seq, last + 1, "silent gap after seq {last}");
                last = s.seq;
            }
            ServerMsg::Snapshot(snap) => {
                let seq = snap.latest.expect("latest").seq;
                assert!(seq >= last, "snapshot went back in time");
                last = seq;
                resyncs += 1;
            }
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn server_memory_ramp_is_seen_live() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    // The server starts once the socket is live, with a warm-up long enough
    // that a loaded machine still sees it in progress.
    let port = tests::managed::free_port();
    let app = spawn_app(&host, &["--server-port", &port.to_string()])?;
    let mut ws = connected(&app.addr).await?;
    let _server = SimServer::launch_on(&host, port, 1, 5_000)?;
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.last().copied().unwrap_or(0) < 88 * GIB {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "warm-up never finished: {seen:?}"
        );
        if let ServerMsg::Sample(s) = ws.next_msg(T).await? {
            seen.push(s.gpus[0].mem_used_bytes.unwrap_or(0));
        }
    }
    // The ramp went through intermediate values, never backwards.
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    let mid = seen.iter().filter(|&&b| b > GIB && b < 80 * GIB).count();
    assert!(mid >= 3, "too few intermediate samples: {seen:?}");
    Ok(())
}

#[tokio::test]
async fn sigterm_closes_sockets_with_going_away_and_exits_cleanly() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let mut app = spawn_app(&host, &["--sample-interval-ms", "50"])?;
    let mut ws = connected(&app.addr).await?;
    app.proc.signal_group(libc::SIGTERM);
    let close = loop {
        match tokio::time::timeout(T, ws.socket.next()).await? {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => anyhow::bail!("expected a close frame, got {other:?}"),
        }
    };
    let frame = close.expect("a close frame with a code");
    assert_eq!(u16::from(frame.code), 1001, "going away");
    let status = tokio::task::spawn_blocking(move || app.proc.child.wait()).await??;
    assert!(status.success(), "drainwatch exited with {status}");
    Ok(())
}
