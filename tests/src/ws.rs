//! A real WebSocket client (tokio-tungstenite) speaking drainwatch's protocol.

use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use shared::ServerMsg;
use tokio_tungstenite::tungstenite::Message;

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[derive(Debug)]
pub struct WsClient {
    pub socket: Socket,
}

impl WsClient {
    pub async fn connect(addr: &str) -> anyhow::Result<Self> {
        let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
            .await
            .context("websocket connect")?;
        Ok(Self { socket })
    }

    /// Connects with extra request headers (`Authorization`, `Origin`, …); a
    /// refused upgrade is `Err(Some(status))`.
    pub async fn connect_with(addr: &str, headers: &[(&str, &str)]) -> Result<Self, Option<u16>> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = format!("ws://{addr}/ws")
            .into_client_request()
            .map_err(|_| None)?;
        for (k, v) in headers {
            let name: tokio_tungstenite::tungstenite::http::HeaderName =
                k.parse().map_err(|_| None)?;
            req.headers_mut().insert(name, v.parse().map_err(|_| None)?);
        }
        match tokio_tungstenite::connect_async(req).await {
            Ok((socket, _)) => Ok(Self { socket }),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                Err(Some(resp.status().as_u16()))
            }
            Err(_) => Err(None),
        }
    }

    /// Connects from the local address `ip` (any of 127.0.0.0/8); a refused
    /// upgrade is `Err(Some(status))`.
    pub async fn connect_from(addr: &str, ip: &str) -> Result<Self, Option<u16>> {
        let local: std::net::IpAddr = ip.parse().map_err(|_| None)?;
        let sock = tokio::net::TcpSocket::new_v4().map_err(|_| None)?;
        sock.bind(std::net::SocketAddr::new(local, 0))
            .map_err(|_| None)?;
        let stream = sock
            .connect(addr.parse().map_err(|_| None)?)
            .await
            .map_err(|_| None)?;
        let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
        match tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream).await {
            Ok((socket, _)) => Ok(Self { socket }),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                Err(Some(resp.status().as_u16()))
            }
            Err(_) => Err(None),
        }
    }

    /// Connects with a tiny socket receive buffer: a client that stops reading then
    /// backs up the server within a few messages, as a slow browser on a bad link would.
    pub async fn connect_small_buffer(addr: &str) -> anyhow::Result<Self> {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.set_recv_buffer_size(4096)?;
        let stream = sock.connect(addr.parse()?).await?;
        let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
        let (socket, _) = tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
            .await
            .context("websocket handshake")?;
        Ok(Self { socket })
    }

    /// The next protocol message (skipping ping/pong frames), within `timeout`.
    pub async fn next_msg(&mut self, timeout: Duration) -> anyhow::Result<ServerMsg> {
        loop {
            let frame = tokio::time::timeout(timeout, self.socket.next())
                .await
                .context("timed out waiting for a message")?
                .context("socket closed")??;
            match frame {
                Message::Text(t) => {
                    return serde_json::from_str(t.as_str()).context("parsing a server message");
                }
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
                Message::Binary(_) => bail!("unexpected binary frame"),
                Message::Close(c) => bail!("server closed: {c:?}"),
            }
        }
    }

    pub async fn send_text(&mut self, text: &str) -> anyhow::Result<()> {
        self.socket.send(Message::Text(text.into())).await?;
        Ok(())
    }
}
