//! drainwatch's API as a client sees it: JSON over HTTP with a bearer token, and
//! the `/ws` stream. Every refusal keeps drainwatch's own message and maps to an
//! [`Exit`] by its class (status code), so scripts can tell "busy" from "denied".

use futures_util::StreamExt;
use reqwest::{StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shared::protocol::{PROTOCOL_VERSION, ServerMsg};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{CliError, Exit, Remote};

/// Connects to one drainwatch.
pub(crate) struct Client {
    http: reqwest::Client,
    /// Always ends in `/`, so a proxy's path prefix is kept by `join`.
    base: Url,
    token: Option<String>,
    /// The person a hub acts for (`X-Drainwatch-For`).
    for_whom: Option<String>,
}

impl Client {
    pub(crate) fn new(remote: &Remote) -> Result<Self, CliError> {
        let mut base = Url::parse(remote.url.trim()).map_err(|e| {
            CliError::new(
                Exit::Usage,
                format!(
                    "--url `{}` is not a URL ({e}); e.g. http://127.0.0.1:7878",
                    remote.url
                ),
            )
        })?;
        match base.scheme() {
            "http" | "https" => {}
            other => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!("--url must start with http:// or https:// (not {other}://)"),
                ));
            }
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        base.set_fragment(None);
        let token = remote
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .timeout(std::time::Duration::from_secs(60))
            .user_agent(concat!("drainwatch-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::new(Exit::Error, format!("cannot set up HTTP: {e}")))?;
        Ok(Self {
            http,
            base,
            token,
            for_whom: None,
        })
    }

    /// Names the person this client acts for on every request: the agent's
    /// audit names both this client's token and them.
    pub(crate) fn acting_for(mut self, who: &str) -> Self {
        self.for_whom = Some(who.to_owned());
        self
    }

    fn url(&self, path: &str) -> Url {
        // `path` is one of ours and relative: joining cannot fail.
        self.base.join(path).unwrap_or_else(|_| self.base.clone())
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, self.url(path));
        if let Some(p) = &self.for_whom {
            req = req.header(crate::auth::FOR_HEADER, p);
        }
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// A GET's body as text (for `--json`, passed on as drainwatch wrote it).
    pub(super) async fn get_text(&self, path: &str) -> Result<String, CliError> {
        let resp = self.send(self.request(reqwest::Method::GET, path)).await?;
        resp.text().await.map_err(|e| self.lost(&e))
    }

    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        let text = self.get_text(path).await?;
        parse(path, &text)
    }

    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, CliError> {
        let resp = self
            .send(self.request(reqwest::Method::POST, path).json(body))
            .await?;
        let text = resp.text().await.map_err(|e| self.lost(&e))?;
        parse(path, &text)
    }

    /// POSTs nothing; any success will do.
    pub(crate) async fn post_empty(&self, path: &str) -> Result<(), CliError> {
        self.send(self.request(reqwest::Method::POST, path))
            .await
            .map(drop)
    }

    /// POSTs `body` as `content_type` (a plan's TOML or JSON).
    pub(super) async fn post_text<T: DeserializeOwned>(
        &self,
        path: &str,
        content_type: &str,
        body: String,
    ) -> Result<T, CliError> {
        let resp = self
            .send(
                self.request(reqwest::Method::POST, path)
                    .header(reqwest::header::CONTENT_TYPE, content_type)
                    .body(body),
            )
            .await?;
        let text = resp.text().await.map_err(|e| self.lost(&e))?;
        parse(path, &text)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, CliError> {
        let resp = req.send().await.map_err(|e| self.lost(&e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str::<serde_json::Value>(&body).ok();
        let message = json
            .as_ref()
            .and_then(|v| v.get("error")?.as_str().map(str::to_owned))
            .unwrap_or_else(|| body.trim().chars().take(300).collect());
        let mut e = refusal(status, &message);
        // A launch the health gate refused before anything stopped.
        if json.as_ref().and_then(|v| v.get("code")?.as_str()) == Some("unhealthy") {
            e.exit = Exit::Unhealthy;
        }
        Err(e)
    }

    /// The base URL as messages show it: without a user or password.
    fn shown(url: &Url) -> Url {
        let mut u = url.clone();
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u
    }

    /// `text` without the base URL's user and password (reqwest's errors
    /// name the URL they were sending to).
    fn scrub(&self, text: String) -> String {
        let (user, pass) = (self.base.username(), self.base.password());
        match (user, pass) {
            ("", None) => text,
            (u, Some(p)) => text.replace(&format!("{u}:{p}@"), ""),
            (u, None) => text.replace(&format!("{u}@"), ""),
        }
    }

    fn lost(&self, e: &reqwest::Error) -> CliError {
        let mut message = format!(
            "cannot reach drainwatch at {}: {e}",
            Self::shown(&self.base)
        );
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        CliError::new(Exit::Unreachable, self.scrub(message))
    }

    /// Opens `/ws` and reads past `hello` (checking the protocol version).
    pub(crate) async fn events(&self) -> Result<Events, CliError> {
        let mut url = self.url("ws");
        // http → ws, https → wss; the scheme was checked in `new`.
        let ws = if url.scheme() == "https" { "wss" } else { "ws" };
        let _ = url.set_scheme(ws);
        let mut req = url
            .as_str()
            .into_client_request()
            .map_err(|e| CliError::new(Exit::Usage, format!("bad WebSocket URL {url}: {e}")))?;
        if let Some(t) = &self.token {
            let value = format!("Bearer {t}").parse().map_err(|_| {
                CliError::new(Exit::Usage, "the token holds characters a header cannot")
            })?;
            req.headers_mut().insert("authorization", value);
        }
        let (socket, _) = tokio_tungstenite::connect_async(req)
            .await
            .map_err(|e| match e {
                tungstenite::Error::Http(resp) => {
                    let body = resp
                        .body()
                        .as_deref()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
                        .and_then(|v| v.get("error")?.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "WebSocket upgrade refused".to_owned());
                    refusal(resp.status(), &body)
                }
                other => CliError::new(
                    Exit::Unreachable,
                    format!("cannot open {}: {other}", Self::shown(&url)),
                ),
            })?;
        let mut events = Events { socket };
        match events.next().await? {
            Some((
                _,
                ServerMsg::Hello {
                    protocol_version, ..
                },
            )) if protocol_version == PROTOCOL_VERSION => Ok(events),
            Some((
                _,
                ServerMsg::Hello {
                    protocol_version,
                    server_version,
                },
            )) => Err(CliError::new(
                Exit::Error,
                format!(
                    "drainwatch {server_version} speaks protocol {protocol_version}; this client speaks {PROTOCOL_VERSION}: use the same version on both sides"
                ),
            )),
            _ => Err(CliError::new(
                Exit::Error,
                "drainwatch did not say hello on /ws",
            )),
        }
    }
}

/// The `/ws` stream of one client.
pub(crate) struct Events {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Events {
    /// The next message, as sent and as read; `None` when drainwatch closed the
    /// stream (shutting down). Messages this client does not know are skipped.
    pub(crate) async fn next(&mut self) -> Result<Option<(String, ServerMsg)>, CliError> {
        loop {
            let Some(frame) = self.socket.next().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| {
                CliError::new(Exit::Unreachable, format!("lost the connection: {e}"))
            })?;
            match frame {
                Message::Text(text) => {
                    if let Ok(msg) = serde_json::from_str::<ServerMsg>(text.as_str()) {
                        return Ok(Some((text.as_str().to_owned(), msg)));
                    }
                }
                Message::Close(frame) => {
                    if let Some(f) = frame
                        && u16::from(f.code) != 1000
                        && u16::from(f.code) != 1001
                    {
                        return Err(CliError::new(
                            Exit::Unreachable,
                            format!("drainwatch closed the connection: {}", f.reason),
                        ));
                    }
                    return Ok(None);
                }
                // Pings are answered by tungstenite as they are read.
                _ => {}
            }
        }
    }

    /// Closes politely (errors are moot: we are leaving).
    pub(super) async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// A refused request: drainwatch's message, classed by status.
fn refusal(status: StatusCode, message: &str) -> CliError {
    let exit = match status.as_u16() {
        401 | 403 => Exit::NotAllowed,
        409 | 429 => Exit::Busy,
        400..=499 => Exit::Usage,
        _ => Exit::Error,
    };
    let hint = match status.as_u16() {
        401 => " (give a token with --token or DRAINWATCH_TOKEN)",
        _ => "",
    };
    CliError::new(
        exit,
        format!("drainwatch refused ({status}): {message}{hint}"),
    )
}

pub(super) fn parse<T: DeserializeOwned>(path: &str, text: &str) -> Result<T, CliError> {
    serde_json::from_str(text).map_err(|e| {
        CliError::new(
            Exit::Error,
            format!(
                "unexpected answer from /{path}: {e} (is --url a drainwatch of the same version?)"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_s_password_is_never_in_a_message() {
        // Nothing listens on port 9 of 127.0.0.9.
        let c = Client::new(&remote("http://hub:s3cret-pw@127.0.0.9:9/")).expect("client");
        let e = c.get_text("api/state").await.expect_err("unreachable");
        assert!(e.message.contains("127.0.0.9"), "{}", e.message);
        assert!(!e.message.contains("s3cret-pw"), "{}", e.message);
        let e = c.events().await.err().expect("unreachable");
        assert!(!e.message.contains("s3cret-pw"), "{}", e.message);
    }

    fn remote(url: &str) -> Remote {
        Remote {
            url: url.to_owned(),
            token: None,
            json: false,
        }
    }

    #[test]
    fn urls_keep_a_proxy_prefix_and_refuse_other_schemes() {
        let c = Client::new(&remote("http://host:8080/drainwatch")).expect("valid");
        assert_eq!(
            c.url("api/state").as_str(),
            "http://host:8080/drainwatch/api/state"
        );
        let c = Client::new(&remote("http://127.0.0.1:7878")).expect("valid");
        assert_eq!(
            c.url("api/state").as_str(),
            "http://127.0.0.1:7878/api/state"
        );
        let c = Client::new(&remote("https://gpu-07.example.com/")).expect("valid");
        assert_eq!(
            c.url("api/state").as_str(),
            "https://gpu-07.example.com/api/state"
        );
        for bad in [
            "ftp://x",
            "127.0.0.1:7878",
            "not a url",
            "ws://127.0.0.1:7878",
        ] {
            let e = Client::new(&remote(bad)).err().expect(bad);
            assert_eq!(e.exit, Exit::Usage, "{bad}");
        }
    }

    #[test]
    fn refusals_are_classed_by_status() {
        let class = |s: u16| refusal(StatusCode::from_u16(s).expect("status"), "x").exit;
        assert_eq!(class(400), Exit::Usage);
        assert_eq!(class(404), Exit::Usage);
        assert_eq!(class(413), Exit::Usage);
        assert_eq!(class(401), Exit::NotAllowed);
        assert_eq!(class(403), Exit::NotAllowed);
        assert_eq!(class(409), Exit::Busy);
        assert_eq!(class(429), Exit::Busy);
        assert_eq!(class(500), Exit::Error);
    }
}
