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

    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if raw.token.is_empty() {
            return Err(
                "no [[token]]: add one with `drainwatch token --name NAME --role operator`".into(),
            );
        }
        let mut tokens: Vec<TokenEntry> = Vec::new();
        for t in raw.token {
            let name = t.name.trim().to_owned();
            if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
                return Err(format!(
                    "token name `{}` must be 1–64 printable characters",
                    t.name.escape_debug()
                ));
            }
            if tokens.iter().any(|e| e.name == name) {
                return Err(format!("two tokens are named `{name}`"));
            }
            let hash = parse_hash(&t.sha256).map_err(|e| format!("token `{name}`: sha256 {e}"))?;
            if tokens.iter().any(|e| e.hash == hash) {
                return Err(format!("token `{name}` has the same secret as another"));
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
            Some(s) => crate::clock::parse_duration(&s).map_err(|e| format!("session_ttl: {e}"))?,
            None => Duration::from_secs(12 * 3_600),
        };
        if session_ttl < Duration::from_secs(60) || session_ttl > MAX_TTL {
            return Err("session_ttl must be from 1m to 720h".into());
        }
        let metrics_hash = raw
            .metrics_token_sha256
            .map(|h| parse_hash(&h).map_err(|e| format!("metrics_token_sha256 {e}")))
            .transpose()?;
        let trusted_proxies = raw
            .trusted_proxies
            .iter()
            .map(|p| {
                p.trim()
                    .parse::<IpAddr>()
                    .map(|ip| ip.to_canonical())
                    .map_err(|_| {
                        format!("trusted_proxies: `{p}` is not an IP address (e.g. \"127.0.0.1\")")
                    })
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

/// 64 hex digits.
fn parse_hash(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return Err("must be 64 hex digits (the SHA-256 of the token)".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "must be 64 hex digits (the SHA-256 of the token)".to_owned())?;
    }
    Ok(out)
}

/// `scheme://host[:port]`, lowercased, without a path or a trailing slash.
pub fn parse_origin(o: &str) -> Result<String, String> {
    let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
    let rest = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"))
        .ok_or_else(|| format!("public_origin `{o}` must start with http:// or https://"))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "public_origin `{o}` must be scheme://host[:port], e.g. https://gpu-07.example.com"
        ));
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
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
