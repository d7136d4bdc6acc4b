//! What a request's headers say about it: where it really comes from (behind
//! a trusted proxy), whether its `Origin` and `Host` are ours, its session
//! cookie and its CSRF token.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use axum::http::header::{COOKIE, HOST, ORIGIN};

use super::secret::same;
use super::{Auth, CSRF_HEADER};

impl Auth {
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
