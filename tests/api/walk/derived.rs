//! What the route table gives the walk: which routes the hand-written cases
//! leave uncovered, and for every route a query parameter it does not read
//! and, where it takes a body, the bodies every such route must refuse or
//! ignore without harm.

use drainwatch::http::{Query, Route};

use super::{Case, Expect, JSON, OVERSIZED};

/// How specific one segment of a pattern is, as the router ranks them:
/// a literal before a `{param}` before a `{*rest}`.
fn rank(seg: &str) -> u8 {
    if seg.starts_with("{*") {
        0
    } else if seg.starts_with('{') {
        1
    } else {
        2
    }
}

/// Whether `pattern` matches `path` (no query string).
fn matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    for (i, seg) in p.iter().enumerate() {
        if seg.starts_with("{*") {
            return s.len() > i && s[i..].iter().any(|x| !x.is_empty());
        }
        let Some(have) = s.get(i) else { return false };
        if seg.starts_with('{') {
            if have.is_empty() {
                return false;
            }
        } else if seg != have {
            return false;
        }
    }
    p.len() == s.len()
}

/// The pattern the router picks for `path`: the most specific that matches.
fn picked<'a>(routes: &'a [Route], path: &str) -> Option<&'a str> {
    let path = path.split('?').next().unwrap_or_default();
    let mut best: Option<(&str, Vec<u8>)> = None;
    for r in routes.iter().filter(|r| matches(r.path, path)) {
        let key: Vec<u8> = r.path.split('/').map(rank).collect();
        if best.as_ref().is_none_or(|(_, k)| key > *k) {
            best = Some((r.path, key));
        }
    }
    best.map(|(p, _)| p)
}

/// Each route and method no hand-written case reaches, named.
pub(super) fn uncovered(routes: &[Route], cases: &[Case]) -> Vec<String> {
    routes
        .iter()
        .filter(|r| {
            !cases.iter().any(|c| {
                picked(routes, &c.path) == Some(r.path) && (r.method == "*" || r.method == c.method)
            })
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// For every route: a query parameter it does not read, and for one that
/// takes a body (POST, PATCH, any method), a malformed, an oversized and a
/// wrongly typed one carrying `mark`. `fill` makes a pattern a path.
pub(super) fn cases(routes: &[Route], fill: &dyn Fn(&str) -> String, mark: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for r in routes {
        let method = if r.method == "*" { "POST" } else { r.method };
        let path = fill(r.path);
        if let Query::Only(_) = r.query {
            out.push(Case {
                method,
                path: format!("{path}?{mark}=1"),
                content_type: None,
                body: Vec::new(),
                expect: Expect::QueryRefused,
            });
        }
        if matches!(method, "POST" | "PATCH" | "PUT") {
            for (ct, body) in [
                (JSON, format!("{{\"{mark}\": ").into_bytes()),
                (
                    JSON,
                    format!("\"{mark}{}\"", "x".repeat(OVERSIZED)).into_bytes(),
                ),
                (
                    Some("application/x-www-form-urlencoded"),
                    format!("a={mark}").into_bytes(),
                ),
            ] {
                out.push(Case {
                    method,
                    path: path.clone(),
                    content_type: ct,
                    body,
                    expect: Expect::NoHarm,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_router_s_pick_is_the_most_specific_pattern() {
        let r = |path, method| Route {
            path,
            method,
            query: drainwatch::http::routes::NONE,
        };
        let routes = [
            r("/api/flagsets/diff", "GET"),
            r("/api/flagsets/{id}", "PATCH"),
            r("/api/campaigns/{id}", "GET"),
            r("/api/campaigns/{id}/{verb}", "POST"),
            r("/api/{*rest}", "*"),
        ];
        assert_eq!(
            picked(&routes, "/api/flagsets/diff?a=1"),
            Some("/api/flagsets/diff")
        );
        assert_eq!(
            picked(&routes, "/api/flagsets/x"),
            Some("/api/flagsets/{id}")
        );
        assert_eq!(
            picked(&routes, "/api/campaigns/1/pause"),
            Some("/api/campaigns/{id}/{verb}")
        );
        assert_eq!(
            picked(&routes, "/api/campaigns/1"),
            Some("/api/campaigns/{id}")
        );
        assert_eq!(picked(&routes, "/api/nope/deeper"), Some("/api/{*rest}"));
        assert_eq!(picked(&routes, "/elsewhere"), None);
        let cases = [super::super::call("GET", "/api/flagsets/diff", [200; 3])];
        assert_eq!(
            uncovered(&routes, &cases),
            vec![
                "PATCH /api/flagsets/{id}",
                "GET /api/campaigns/{id}",
                "POST /api/campaigns/{id}/{verb}",
                "* /api/{*rest}"
            ]
        );
    }
}
