//! Logging in: a token exchanged for a browser session (kept in memory by the
//! hash of its cookie), sessions bounded per token and in all, and failed
//! logins limited per address and for every address together.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use shared::auth::Role;

use super::Auth;
use super::secret::{hex, new_secret, sha256};

/// Failed logins one address may make per window before it must wait.
pub(super) const LOGIN_FAILURES: u32 = 5;
/// Failed logins from all addresses together per window: an attacker with
/// many addresses (all of 127.0.0.0/8 is loopback) still guesses slowly.
pub(super) const LOGIN_FAILURES_ALL: u32 = 100;
const LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// Addresses whose failures are remembered at most.
const MAX_FAILING_ADDRESSES: usize = 10_000;
/// Sessions kept at most (oldest dropped first): logins cannot grow memory.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one token may hold; a new one ends that token's oldest, never
/// anyone else's.
pub const SESSIONS_PER_TOKEN: usize = 32;

#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The SHA-256 of the token the session was made with: whose it is.
    token: [u8; 32],
    pub(super) name: String,
    pub(super) role: Role,
    pub(super) csrf: String,
    pub(super) expires: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

impl Failures {
    /// How long until this window's failures are forgotten.
    fn retry_after(&self, now: Instant) -> Duration {
        LOGIN_WINDOW.saturating_sub(now.duration_since(self.since))
    }
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

/// Failed logins in the current window, per address and all together.
#[derive(Debug, Default)]
pub(super) struct LoginFailures {
    by_ip: HashMap<IpAddr, Failures>,
    all: Option<Failures>,
}

impl LoginFailures {
    /// Forgets the failures of past windows; refuses an address that failed
    /// too often in this one.
    fn admit(&mut self, ip: IpAddr, now: Instant) -> Result<(), LoginError> {
        self.by_ip
            .retain(|_, v| now.duration_since(v.since) < LOGIN_WINDOW);
        if self
            .all
            .is_some_and(|v| now.duration_since(v.since) >= LOGIN_WINDOW)
        {
            self.all = None;
        }
        if let Some(v) = self.by_ip.get(&ip)
            && v.count >= LOGIN_FAILURES
        {
            return Err(LoginError::TooMany {
                retry_after: v.retry_after(now),
            });
        }
        Ok(())
    }

    /// Counts a wrong token from `ip`; returns what its sender is told.
    fn failed(&mut self, ip: IpAddr, now: Instant) -> LoginError {
        // Past the bound for everyone, a wrong token is not even counted or
        // logged. A right one still logs in: a 256-bit token is not guessed,
        // and a stranger's flood must not lock the team out.
        if let Some(v) = &self.all
            && v.count >= LOGIN_FAILURES_ALL
        {
            return LoginError::TooManyAll {
                retry_after: v.retry_after(now),
            };
        }
        let fresh = Failures {
            count: 0,
            since: now,
        };
        self.all.get_or_insert(fresh).count += 1;
        // Past the bound, a new address is not remembered: the global count
        // (already past its own bound by then) holds everyone back.
        if self.by_ip.len() < MAX_FAILING_ADDRESSES || self.by_ip.contains_key(&ip) {
            self.by_ip.entry(ip).or_insert(fresh).count += 1;
        }
        LoginError::Invalid
    }
}

impl Auth {
    /// Exchanges a token for a session, counting failures per address.
    pub fn login(&self, ip: IpAddr, secret: &str) -> Result<NewSession, LoginError> {
        let Some(cfg) = &self.cfg else {
            return Err(LoginError::Invalid);
        };
        let now = Instant::now();
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(ip, now)?;
        let Some(t) = self.token(secret) else {
            let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            return Err(f.failed(ip, now));
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
        keep(&mut sessions, &id, session, now);
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
}

/// Keeps `session` as the session with cookie `id`, after the ended ones go
/// and, at a bound, the oldest of its token's (or of everyone's).
fn keep(sessions: &mut HashMap<String, Session>, id: &str, session: Session, now: Instant) {
    sessions.retain(|_, s| s.expires > now);
    // A token's holder who logs in again and again ends only their own
    // oldest session; everyone else's stay.
    let token = session.token;
    let theirs = sessions.values().filter(|s| s.token == token).count();
    let oldest = |mine: bool| {
        sessions
            .iter()
            .filter(|(_, s)| !mine || s.token == token)
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
    sessions.insert(hex(&sha256(id)), session);
}
