//! Who is calling and what they may do. Without an auth file (`--auth`)
//! drainwatch serves loopback only and every caller is an operator; with one,
//! a caller is a bearer token (`Authorization: Bearer …`, for scripts and the
//! CLI) or a browser session made by `/login` (an HttpOnly, SameSite=Strict
//! cookie, plus a CSRF token that state-changing requests carry in a header).
//!
//! Secrets are compared by their SHA-256 in constant time and never logged;
//! sessions live in memory (a restart of drainwatch logs everyone out).

pub mod file;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use sha2::{Digest, Sha256};
use shared::auth::Role;

pub use file::AuthConfig;

/// The session cookie's name over http.
pub const COOKIE_NAME: &str = "drainwatch_session";
/// Its name when the public origin is https: the browser then keeps it only if
/// it is `Secure`, for this host alone (no `Domain`), at `Path=/`, so no
/// sibling subdomain or plain-http page can set or shadow it.
pub const SECURE_COOKIE_NAME: &str = "__Host-drainwatch_session";
/// The header a browser session's state-changing requests carry.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Failed logins one address may make per window before it must wait.
const LOGIN_FAILURES: u32 = 5;
/// Failed logins from all addresses together per window: an attacker with
/// many addresses (all of 127.0.0.0/8 is loopback) still guesses slowly.
const LOGIN_FAILURES_ALL: u32 = 100;
const LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// Addresses whose failures are remembered at most.
const MAX_FAILING_ADDRESSES: usize = 10_000;
/// Sessions kept at most (oldest dropped first): logins cannot grow memory.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one token may hold; a new one ends that token's oldest, never
/// anyone else's.
pub const SESSIONS_PER_TOKEN: usize = 32;

/// A new random secret: `dw_` and 64 hex digits (256 bits).
pub fn new_secret() -> anyhow::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(format!("dw_{}", hex(&b)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Equal in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

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
        match &self.name {
            Some(n) => format!("{n} ({at})"),
            None => at,
        }
    }

    /// Who, without the port: one entry per person in "who is connected".
    pub fn presence_key(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => self.peer.ip().to_string(),
        }
    }
}

#[derive(Debug, Clone)]
struct Session {
    /// The SHA-256 of the token the session was made with: whose it is.
    token: [u8; 32],
    name: String,
    role: Role,
    csrf: String,
    expires: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// Why a login failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    Invalid,
    /// This address failed too often.
    TooMany {
        retry_after: Duration,
    },
    /// Every address together failed too often.
    TooManyAll {
        retry_after: Duration,
    },
}

/// A made session: the cookie's value and the CSRF token.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: String,
    pub csrf: String,
    pub name: String,
    pub role: Role,
    pub ttl: Duration,
}

#[derive(Debug, Default)]
pub struct Auth {
    cfg: Option<AuthConfig>,
    sessions: Mutex<HashMap<String, Session>>,
    failures: Mutex<LoginFailures>,
}

/// Failed logins in the current window, per address and all together.
#[derive(Debug, Default)]
struct LoginFailures {
    by_ip: HashMap<IpAddr, Failures>,
    all: Option<Failures>,
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

    /// Where a request really comes from: `peer`, or when `peer` is a trusted
    /// proxy, the last address in `X-Forwarded-For` that is not one of the
    /// trusted proxies (the one the outermost trusted proxy saw), with port 0.
    /// Anyone else's `X-Forwarded-For` is ignored: it is only a header.
    pub fn client(&self, peer: SocketAddr, headers: &HeaderMap) -> SocketAddr {
        let Some(trusted) = self.cfg.as_ref().map(|c| &c.trusted_proxies) else {
            return peer;
        };
        // An IPv4 proxy reaching a listener on `[::]` arrives as ::ffff:a.b.c.d.
        let is_trusted = |ip: IpAddr| trusted.contains(&ip.to_canonical());
        if !is_trusted(peer.ip()) {
            return peer;
        }
        let hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect::<Vec<_>>();
        for hop in hops.iter().rev() {
            match hop.parse::<IpAddr>() {
                Ok(ip) if is_trusted(ip) => continue,
                Ok(ip) => return SocketAddr::new(ip.to_canonical(), 0),
                // A hop that is not an address: what came before it is not to be trusted.
                Err(_) => return peer,
            }
        }
        peer
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
            })),
            Some(_) => {
                sessions.remove(&key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Exchanges a token for a session, counting failures per address.
    pub fn login(&self, ip: IpAddr, secret: &str) -> Result<NewSession, LoginError> {
        let Some(cfg) = &self.cfg else {
            return Err(LoginError::Invalid);
        };
        let now = Instant::now();
        {
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            f.by_ip
                .retain(|_, v| now.duration_since(v.since) < LOGIN_WINDOW);
            if f.all
                .is_some_and(|v| now.duration_since(v.since) >= LOGIN_WINDOW)
            {
                f.all = None;
            }
            let wait = |v: &Failures| LOGIN_WINDOW.saturating_sub(now.duration_since(v.since));
            if let Some(v) = f.by_ip.get(&ip)
                && v.count >= LOGIN_FAILURES
            {
                return Err(LoginError::TooMany {
                    retry_after: wait(v),
                });
            }
        }
        let Some(t) = self.token(secret) else {
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            // Past the bound for everyone, a wrong token is not even counted or
            // logged. A right one still logs in: a 256-bit token is not guessed,
            // and a stranger's flood must not lock the team out.
            if let Some(v) = &f.all
                && v.count >= LOGIN_FAILURES_ALL
            {
                return Err(LoginError::TooManyAll {
                    retry_after: LOGIN_WINDOW.saturating_sub(now.duration_since(v.since)),
                });
            }
            let fresh = Failures {
                count: 0,
                since: now,
            };
            f.all.get_or_insert(fresh).count += 1;
            // Past the bound, a new address is not remembered: the global count
            // (already past its own bound by then) holds everyone back.
            if f.by_ip.len() < MAX_FAILING_ADDRESSES || f.by_ip.contains_key(&ip) {
                f.by_ip.entry(ip).or_insert(fresh).count += 1;
            }
            return Err(LoginError::Invalid);
        };
        let (id, csrf) = match (new_secret(), new_secret()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(LoginError::Invalid),
        };
        let session = Session {
            token: t.hash,
            name: t.name.clone(),
            role: t.role,
            csrf: csrf.clone(),
            expires: now + cfg.session_ttl,
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.expires > now);
        // A token's holder who logs in again and again ends only their own
        // oldest session; everyone else's stay.
        let theirs = sessions.values().filter(|s| s.token == t.hash).count();
        let oldest = |mine: bool| {
            sessions
                .iter()
                .filter(|(_, s)| !mine || s.token == t.hash)
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        };
        let evict = if theirs >= SESSIONS_PER_TOKEN {
            oldest(true)
        } else if sessions.len() >= MAX_SESSIONS {
            oldest(false)
        } else {
            None
        };
        if let Some(k) = evict {
            sessions.remove(&k);
        }
        // Stored by the hash of the cookie: a memory dump shows no live cookie.
        sessions.insert(hex(&sha256(&id)), session);
        Ok(NewSession {
            id,
            csrf,
            name: t.name.clone(),
            role: t.role,
            ttl: cfg.session_ttl,
        })
    }

    pub fn logout(&self, session_id: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.remove(&hex(&sha256(session_id)));
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

    /// Whether a browser's `Origin` (when it sent one) is ours: the public
    /// origin when configured, else the origin of the `Host` it asked for.
    /// Requests without `Origin` come from scripts, not from another site.
    pub fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if let Some(public) = self.public_origin() {
            return origin == public;
        }
        let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        origin == format!("http://{host}") || origin == format!("https://{host}")
    }

    /// Without authentication, only loopback names may be asked for:
    /// a page elsewhere cannot point a DNS name at 127.0.0.1 and read us.
    pub fn host_ok(&self, headers: &HeaderMap) -> bool {
        if self.enabled() {
            return true;
        }
        let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
            // HTTP/1.0 without Host: not a browser.
            return true;
        };
        let name = match host.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => host,
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// A cookie's value from the `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// Whether a request with `headers` carries the session's CSRF token.
pub fn csrf_ok(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| same(v.as_bytes(), expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn auth() -> (Auth, String, String) {
        let (op, view) = (new_secret().expect("rng"), new_secret().expect("rng"));
        let text = format!(
            "[[token]]\nname = \"op\"\nrole = \"operator\"\nsha256 = \"{}\"\n\
             [[token]]\nname = \"view\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
            hex(&sha256(&op)),
            hex(&sha256(&view))
        );
        (
            Auth::new(AuthConfig::parse(&text).expect("valid")),
            op,
            view,
        )
    }

    fn peer() -> SocketAddr {
        "10.0.0.5:5000".parse().expect("addr")
    }

    #[test]
    fn bearer_tokens_and_sessions_identify_their_holder() {
        let (a, op, view) = auth();
        let mut h = HeaderMap::new();
        assert!(a.identify(&h, peer()).expect("no creds").is_none());
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {view}")).expect("hv"),
        );
        let c = a.identify(&h, peer()).expect("ok").expect("caller");
        assert_eq!((c.name.as_deref(), c.role), (Some("view"), Role::Viewer));
        assert_eq!(c.who(), "view (10.0.0.5:5000)");
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer dw_nope"));
        assert!(a.identify(&h, peer()).is_err());

        let s = a.login(peer().ip(), &op).expect("login");
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("x=1; {COOKIE_NAME}={}", s.id)).expect("hv"),
        );
        let c = a.identify(&h, peer()).expect("ok").expect("caller");
        assert_eq!(c.role, Role::Operator);
        let Via::Session { csrf, .. } = &c.via else {
            panic!("a session")
        };
        assert_eq!(csrf, &s.csrf);
        a.logout(&s.id);
        assert!(a.identify(&h, peer()).expect("ok").is_none());
    }

    #[test]
    fn failed_logins_are_limited_per_address() {
        let (a, op, _) = auth();
        let ip = peer().ip();
        for _ in 0..LOGIN_FAILURES {
            assert_eq!(a.login(ip, "dw_wrong").err(), Some(LoginError::Invalid));
        }
        assert!(matches!(a.login(ip, &op), Err(LoginError::TooMany { .. })));
        // Another address is not held up.
        assert!(a.login("10.0.0.6".parse().expect("ip"), &op).is_ok());
    }

    #[test]
    fn failed_logins_are_limited_for_every_address_together() {
        let (a, op, _) = auth();
        for i in 0..LOGIN_FAILURES_ALL {
            let ip = IpAddr::from([127, 0, (i / 250) as u8, (i % 250) as u8 + 1]);
            assert_eq!(a.login(ip, "dw_wrong").err(), Some(LoginError::Invalid));
        }
        let fresh: IpAddr = "127.9.9.9".parse().expect("ip");
        assert!(matches!(
            a.login(fresh, "dw_wrong"),
            Err(LoginError::TooManyAll { .. })
        ));
        // The flood locks nobody out: a right token still logs in.
        assert!(a.login(fresh, &op).is_ok());
    }

    #[test]
    fn a_token_ends_only_its_own_oldest_sessions() {
        let (a, op, view) = auth();
        let ip = peer().ip();
        let first_op = a.login(ip, &op).expect("login");
        let first_view = a.login(ip, &view).expect("login");
        let mut last = None;
        for _ in 0..SESSIONS_PER_TOKEN * 3 {
            last = Some(a.login(ip, &view).expect("login"));
        }
        let with = |id: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                COOKIE,
                HeaderValue::from_str(&format!("{COOKIE_NAME}={id}")).expect("hv"),
            );
            a.identify(&h, peer()).expect("ok")
        };
        assert!(
            with(&first_op.id).is_some(),
            "another token's session stays"
        );
        assert!(with(&first_view.id).is_none(), "the token's oldest went");
        assert!(with(&last.expect("made").id).is_some());
        let held = a
            .sessions
            .lock()
            .expect("lock")
            .values()
            .filter(|s| s.name == "view")
            .count();
        assert_eq!(held, SESSIONS_PER_TOKEN);
    }

    #[test]
    fn origins_and_hosts() {
        let open = Auth::open();
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:7878"));
        assert!(open.origin_ok(&h) && open.host_ok(&h));
        h.insert(ORIGIN, HeaderValue::from_static("http://127.0.0.1:7878"));
        assert!(open.origin_ok(&h));
        h.insert(ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!open.origin_ok(&h));
        h.insert(HOST, HeaderValue::from_static("evil.example:7878"));
        assert!(!open.host_ok(&h));
        h.insert(HOST, HeaderValue::from_static("[::1]:7878"));
        assert!(open.host_ok(&h));
        h.insert(HOST, HeaderValue::from_static("localhost"));
        assert!(open.host_ok(&h));
        let with_origin = Auth::new(
            AuthConfig::parse(&format!(
                "public_origin = \"https://gpu.example\"\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
                hex(&sha256("x"))
            ))
            .expect("valid"),
        );
        h.insert(ORIGIN, HeaderValue::from_static("https://gpu.example"));
        assert!(with_origin.origin_ok(&h) && with_origin.secure_cookies());
        assert_eq!(with_origin.cookie_name(), "__Host-drainwatch_session");
        assert_eq!(open.cookie_name(), "drainwatch_session");
        h.insert(ORIGIN, HeaderValue::from_static("http://gpu.example"));
        assert!(!with_origin.origin_ok(&h));
    }

    #[test]
    fn a_trusted_proxy_names_the_client_and_nobody_else_can() {
        let a = Auth::new(
            AuthConfig::parse(&format!(
                "trusted_proxies = [\"127.0.0.1\", \"10.0.0.2\"]\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"{}\"\n",
                hex(&sha256("x"))
            ))
            .expect("valid"),
        );
        let proxy: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        let xff = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", HeaderValue::from_str(v).expect("hv"));
            h
        };
        let ip = |s: &str| SocketAddr::new(s.parse().expect("ip"), 0);
        assert_eq!(a.client(proxy, &xff("203.0.113.9")), ip("203.0.113.9"));
        // Through two proxies we trust: the address the outer one saw.
        assert_eq!(
            a.client(proxy, &xff("198.51.100.1, 203.0.113.9, 10.0.0.2")),
            ip("203.0.113.9")
        );
        // An IPv4 proxy seen through a dual-stack listener is still the proxy.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:40000".parse().expect("addr");
        assert_eq!(a.client(mapped, &xff("203.0.113.9")), ip("203.0.113.9"));
        // A client cannot pose as another by sending the header itself.
        let stranger: SocketAddr = "203.0.113.9:5555".parse().expect("addr");
        assert_eq!(a.client(stranger, &xff("10.9.9.9")), stranger);
        // Nothing, or nonsense, from the proxy: the proxy.
        assert_eq!(a.client(proxy, &HeaderMap::new()), proxy);
        assert_eq!(a.client(proxy, &xff("unknown")), proxy);
        // Without trusted proxies the header means nothing.
        let (plain, _, _) = auth();
        assert_eq!(plain.client(proxy, &xff("203.0.113.9")), proxy);
        let c = Caller {
            name: Some("olga".into()),
            role: Role::Operator,
            via: Via::Bearer,
            peer: ip("203.0.113.9"),
        };
        assert_eq!(c.who(), "olga (203.0.113.9)");
        assert!(
            AuthConfig::parse("trusted_proxies = [\"nginx\"]\n[[token]]\nname = \"a\"\nrole = \"viewer\"\nsha256 = \"00\"\n")
                .is_err()
        );
    }
}
