//! Who is calling and what they may do. Without an auth file (`--auth`)
//! drainwatch serves loopback only and every caller is an operator; with one,
//! a caller is a bearer token (`Authorization: Bearer …`, for scripts and the
//! CLI) or a browser session made by `/login` (an HttpOnly, SameSite=Strict
//! cookie, plus a CSRF token that state-changing requests carry in a header).
//!
//! Secrets are compared by their SHA-256 in constant time and never logged;
//! sessions live in memory (a restart of drainwatch logs everyone out).

pub mod file;
mod headers;
mod login;
mod secret;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use shared::auth::Role;

pub use file::AuthConfig;
pub use headers::{cookie, csrf_ok};
pub use login::{LoginError, NewSession, SESSIONS_PER_TOKEN};
pub use secret::{hex, new_secret, sha256};

use login::{LoginFailures, Session};
use secret::same;

/// The session cookie's name over http.
pub const COOKIE_NAME: &str = "drainwatch_session";
/// Its name when the public origin is https: the browser then keeps it only if
/// it is `Secure`, for this host alone (no `Domain`), at `Path=/`, so no
/// sibling subdomain or plain-http page can set or shadow it.
pub const SECURE_COOKIE_NAME: &str = "__Host-drainwatch_session";
/// The header a browser session's state-changing requests carry.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// How a caller proved who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// No authentication configured.
    Open,
    /// A browser session; state changes must carry this CSRF token.
    Session { id: String, csrf: String },
    /// A bearer token (not sent by browsers on their own: no CSRF token needed).
    Bearer,
}

/// A bearer token that is not one of ours (or not a bearer token at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid token")]
pub struct InvalidToken;

/// The caller of one request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name; `None` without authentication.
    pub name: Option<String>,
    pub role: Role,
    pub via: Via,
    pub peer: SocketAddr,
    /// The person a hub acts for (`X-Drainwatch-For`), as the hub says: the
    /// audit names both, the caller that proved itself first.
    pub for_whom: Option<String>,
    /// A hub's token (`hub = true` in the auth file), or anyone without
    /// authentication: may name the person it acts for.
    pub may_act_for: bool,
}

/// A character `X-Drainwatch-For` may hold (see [`for_whom`]).
pub fn for_whom_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || " ._@+-():".contains(c)
}

/// The header a hub names the person it acts for with.
pub const FOR_HEADER: &str = "x-drainwatch-for";

/// The person named in `X-Drainwatch-For`, checked: a name of at most 64
/// letters, digits, spaces and `. _ @ + - ( ) :`. Only a hub's token (or
/// anyone without authentication) may name one: any other token, and a
/// browser session, speaks for itself.
pub fn for_whom(headers: &HeaderMap, caller: &Caller) -> Result<Option<String>, NotFor> {
    let Some(v) = headers.get(FOR_HEADER) else {
        return Ok(None);
    };
    if matches!(caller.via, Via::Session { .. }) {
        return Err(NotFor::Session);
    }
    if !caller.may_act_for {
        return Err(NotFor::NotHub(
            caller.name.as_deref().unwrap_or("?").to_owned(),
        ));
    }
    match v.to_str().map(str::trim) {
        Ok(s) if !s.is_empty() && s.len() <= 64 && s.chars().all(for_whom_char) => {
            Ok(Some(s.to_owned()))
        }
        _ => Err(NotFor::BadName),
    }
}

/// Why a caller may not name someone it acts for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFor {
    #[error("a browser session cannot act for someone else (X-Drainwatch-For)")]
    Session,
    /// The token's name.
    #[error(
        "token `{0}` may not act for someone else (X-Drainwatch-For): only a hub's, marked `hub = true` in the auth file"
    )]
    NotHub(String),
    #[error(
        "X-Drainwatch-For must be a name of 1 to 64 letters, digits, spaces and . _ @ + - ( ) :"
    )]
    BadName,
}

impl Caller {
    /// For the audit log and presence: "alice (10.0.0.5:51234)", or the
    /// address alone without authentication. A client named by a proxy's
    /// `X-Forwarded-For` has no port: "alice (10.0.0.5)".
    pub fn who(&self) -> String {
        let at = match self.peer.port() {
            0 => self.peer.ip().to_string(),
            _ => self.peer.to_string(),
        };
        let me = match &self.name {
            Some(n) => format!("{n} ({at})"),
            None => at,
        };
        match &self.for_whom {
            Some(p) => format!("{me} for {p}"),
            None => me,
        }
    }

    /// Who, without the port: one entry per person in "who is connected"
    /// (a hub's people each their own: "fleet-hub for olga").
    pub fn presence_key(&self) -> String {
        let me = match &self.name {
            Some(n) => n.clone(),
            None => self.peer.ip().to_string(),
        };
        match &self.for_whom {
            Some(p) => format!("{me} for {p}"),
            None => me,
        }
    }
}

#[derive(Debug, Default)]
pub struct Auth {
    cfg: Option<AuthConfig>,
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<LoginFailures>,
}

impl Auth {
    /// No authentication: every caller is an operator.
    pub fn open() -> Self {
        Self::default()
    }

    pub fn new(cfg: AuthConfig) -> Self {
        Self {
            cfg: Some(cfg),
            ..Self::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.cfg.is_some()
    }

    pub fn public_origin(&self) -> Option<&str> {
        self.cfg.as_ref()?.public_origin.as_deref()
    }

    /// Whether cookies must be `Secure` (the public origin is https).
    pub fn secure_cookies(&self) -> bool {
        self.public_origin()
            .is_some_and(|o| o.starts_with("https://"))
    }

    /// The session cookie's name: `__Host-` prefixed when it is `Secure`.
    pub fn cookie_name(&self) -> &'static str {
        if self.secure_cookies() {
            SECURE_COOKIE_NAME
        } else {
            COOKIE_NAME
        }
    }

    fn token(&self, secret: &str) -> Option<&file::TokenEntry> {
        let h = sha256(secret.trim());
        // Every entry is compared, so the time does not say which matched.
        let mut found = None;
        for t in &self.cfg.as_ref()?.tokens {
            if same(&t.hash, &h) {
                found = Some(t);
            }
        }
        found
    }

    /// Who is calling, from the request's headers: `Ok(None)` for nobody
    /// (no credentials, or a session that ended); `Err` for a bearer token
    /// that is not one of ours.
    pub fn identify(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Option<Caller>, InvalidToken> {
        if !self.enabled() {
            return Ok(Some(Caller {
                name: None,
                role: Role::Operator,
                via: Via::Open,
                peer,
                for_whom: None,
                may_act_for: true,
            }));
        }
        if let Some(auth) = headers.get(AUTHORIZATION) {
            let secret = auth
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or(InvalidToken)?;
            let t = self.token(secret).ok_or(InvalidToken)?;
            return Ok(Some(Caller {
                name: Some(t.name.clone()),
                role: t.role,
                via: Via::Bearer,
                peer,
                for_whom: None,
                may_act_for: t.hub,
            }));
        }
        let Some(id) = cookie(headers, self.cookie_name()) else {
            return Ok(None);
        };
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let key = hex(&sha256(&id));
        match sessions.get(&key) {
            Some(s) if s.expires > now => Ok(Some(Caller {
                name: Some(s.name.clone()),
                role: s.role,
                via: Via::Session {
                    id,
                    csrf: s.csrf.clone(),
                },
                peer,
                for_whom: None,
                may_act_for: false,
            })),
            Some(_) => {
                sessions.remove(&key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Whether a scrape of `/metrics` may proceed: always without
    /// authentication; else with the scrape token or any valid token.
    pub fn may_scrape(&self, headers: &HeaderMap) -> bool {
        let Some(cfg) = &self.cfg else { return true };
        let Some(secret) = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        cfg.metrics_hash
            .is_some_and(|h| same(&h, &sha256(secret.trim())))
            || self.token(secret).is_some()
    }
}
