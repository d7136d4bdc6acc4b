//! The auth file (`--auth`): tokens by the SHA-256 of their secret, each with a
//! name and a role; the public origin; the session lifetime; an optional
//! scrape token for `/metrics`; the reverse proxies whose `X-Forwarded-For`
//! names the client. Validated whole at start; nothing in it is ever logged.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use shared::auth::Role;

/// A parsed and checked auth file.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub tokens: Vec<TokenEntry>,
    /// `scheme://host[:port]` as browsers send it in `Origin`.
    pub public_origin: Option<String>,
    pub session_ttl: Duration,
    pub metrics_hash: Option<[u8; 32]>,
    /// Reverse proxies in front of drainwatch: a request from one of them is
    /// from the client its `X-Forwarded-For` names.
    pub trusted_proxies: Vec<IpAddr>,
}

/// One token: who holds it and what it may do.
#[derive(Clone)]
pub struct TokenEntry {
    pub name: String,
    pub role: Role,
    pub hash: [u8; 32],
    /// A hub's token (`hub = true`): its requests may name the person they
    /// act for.
    pub hub: bool,
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    public_origin: Option<String>,
    session_ttl: Option<String>,
    metrics_token_sha256: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    token: Vec<RawToken>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    role: Role,
    sha256: String,
    /// A hub's token: it may name the person it acts for (`X-Drainwatch-For`).
    #[serde(default)]
    hub: bool,
}

/// Longest session a file may ask for.
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3_600);

impl AuthConfig {
    /// Reads and checks `path`; the error names the file and what is wrong.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the auth file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("auth file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, AuthFileError> {
        let raw: Raw =
            toml::from_str(text).map_err(|e| AuthFileError::Syntax(e.message().to_owned()))?;
        if raw.token.is_empty() {
            return Err(AuthFileError::NoToken);
        }
        let mut tokens: Vec<TokenEntry> = Vec::new();
        for t in raw.token {
            let name = t.name.trim().to_owned();
            if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
                return Err(AuthFileError::BadName(t.name.escape_debug().to_string()));
            }
            if tokens.iter().any(|e| e.name == name) {
                return Err(AuthFileError::SameName(name));
            }
            let Ok(hash) = parse_hash(&t.sha256) else {
                return Err(AuthFileError::BadHash(name));
            };
            if tokens.iter().any(|e| e.hash == hash) {
                return Err(AuthFileError::SameSecret(name));
            }
            tokens.push(TokenEntry {
                name,
                role: t.role,
                hash,
                hub: t.hub,
            });
        }
        let public_origin = raw.public_origin.map(|o| parse_origin(&o)).transpose()?;
        let session_ttl = match raw.session_ttl {
            Some(s) => crate::clock::parse_duration(&s).map_err(AuthFileError::Ttl)?,
            None => Duration::from_secs(12 * 3_600),
        };
        if session_ttl < Duration::from_secs(60) || session_ttl > MAX_TTL {
            return Err(AuthFileError::TtlRange);
        }
        let metrics_hash = raw
            .metrics_token_sha256
            .map(|h| parse_hash(&h).map_err(|BadHash| AuthFileError::BadMetricsHash))
            .transpose()?;
        let trusted_proxies = raw
            .trusted_proxies
            .iter()
            .map(|p| {
                p.trim()
                    .parse::<IpAddr>()
                    .map(|ip| ip.to_canonical())
                    .map_err(|_| AuthFileError::BadProxy(p.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            tokens,
            public_origin,
            session_ttl,
            metrics_hash,
            trusted_proxies,
        })
    }
}

/// Why an auth file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    /// Not TOML, or a value not of its key's type (TOML's own words).
    #[error("{0}")]
    Syntax(String),
    #[error("no [[token]]: add one with `drainwatch token --name NAME --role operator`")]
    NoToken,
    /// The name as written, escaped.
    #[error("token name `{0}` must be 1–64 printable characters")]
    BadName(String),
    #[error("two tokens are named `{0}`")]
    SameName(String),
    #[error("token `{0}`: sha256 {BadHash}")]
    BadHash(String),
    #[error("token `{0}` has the same secret as another")]
    SameSecret(String),
    #[error("metrics_token_sha256 {BadHash}")]
    BadMetricsHash,
    #[error(transparent)]
    Origin(#[from] BadOrigin),
    #[error("session_ttl: {0}")]
    Ttl(crate::clock::DurationError),
    #[error("session_ttl must be from 1m to 720h")]
    TtlRange,
    #[error("trusted_proxies: `{0}` is not an IP address (e.g. \"127.0.0.1\")")]
    BadProxy(String),
}

/// A token's hash that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 64 hex digits (the SHA-256 of the token)")]
pub struct BadHash;

/// A `public_origin` that is not an origin (lowercased, as written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadOrigin {
    #[error("public_origin `{0}` must start with http:// or https://")]
    Scheme(String),
    #[error("public_origin `{0}` must be scheme://host[:port], e.g. https://gpu-07.example.com")]
    Shape(String),
}

/// 64 hex digits.
fn parse_hash(hex: &str) -> Result<[u8; 32], BadHash> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return Err(BadHash);
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| BadHash)?;
    }
    Ok(out)
}

/// `scheme://host[:port]`, lowercased, without a path or a trailing slash.
pub fn parse_origin(o: &str) -> Result<String, BadOrigin> {
    let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
    let Some(rest) = (o.strip_prefix("https://")).or_else(|| o.strip_prefix("http://")) else {
        return Err(BadOrigin::Scheme(o));
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(BadOrigin::Shape(o));
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_good_file() {
        let c = AuthConfig::parse(&format!(
            "public_origin = \"https://GPU-07.example.com/\"\nsession_ttl = \"2h\"\n\
             [[token]]\nname = \"alice\"\nrole = \"operator\"\nsha256 = \"{H}\"\n"
        ))
        .expect("valid");
        assert_eq!(
            c.public_origin.as_deref(),
            Some("https://gpu-07.example.com")
        );
        assert_eq!(c.session_ttl, Duration::from_secs(7200));
        assert_eq!(c.tokens[0].role, Role::Operator);
        assert_eq!(c.tokens[0].hash[0], 0x9f);
        assert!(!format!("{:?}", c.tokens[0]).contains("9f"));
    }

    #[test]
    fn mistakes_are_named() {
        let tok = |name: &str, role: &str, h: &str| {
            format!("[[token]]\nname = \"{name}\"\nrole = \"{role}\"\nsha256 = \"{h}\"\n")
        };
        let bad = [
            (String::new(), "no [[token]]"),
            (tok("a", "admin", H), "unknown variant"),
            (tok("a", "viewer", "abc"), "64 hex digits"),
            (tok("", "viewer", H), "1–64 printable"),
            (
                tok("a", "viewer", H) + &tok("a", "operator", &H.replace('9', "8")),
                "two tokens",
            ),
            (
                tok("a", "viewer", H) + &tok("b", "operator", H),
                "same secret",
            ),
            (
                format!("public_origin = \"gpu\"\n{}", tok("a", "viewer", H)),
                "http://",
            ),
            (
                format!("public_origin = \"https://x/y\"\n{}", tok("a", "viewer", H)),
                "scheme://host",
            ),
            (
                format!("session_ttl = \"1s\"\n{}", tok("a", "viewer", H)),
                "session_ttl",
            ),
            (
                format!("colour = 1\n{}", tok("a", "viewer", H)),
                "unknown field",
            ),
        ];
        for (text, want) in bad {
            let e = AuthConfig::parse(&text).expect_err(&text);
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }
}
