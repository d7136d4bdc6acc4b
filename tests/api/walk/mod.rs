//! One walk over the whole HTTP API of the agent and of the hub with bad
//! input, as a stranger, a viewer and an operator. Each side's cases are
//! written by hand ([`agent`], [`hub`]) and checked against the side's own
//! route table (`drainwatch::api::routes`, `drainwatch::fleet::routes`, the
//! tables its router is built from): a route without cases fails the walk.
//! Every route also gets, derived from the table ([`derived`]), a query
//! parameter it does not read (refused, never ignored) and, where it takes a
//! body, one malformed, one oversized and one of the wrong type.

mod agent;
mod derived;
mod hub;

use serde_json::{Value, json};

const JSON: Option<&'static str> = Some("application/json");
const CALLERS: [&str; 3] = ["stranger", "viewer", "operator"];
/// Over the router's 64 KiB body limit.
const OVERSIZED: usize = 70 * 1024;

/// What each caller must get.
#[derive(Debug, Clone)]
enum Expect {
    /// These statuses, for the stranger, the viewer and the operator.
    Exact([u16; 3]),
    /// A refusal (4xx with a JSON error) or an answer that ignored what it
    /// does not read (2xx or 3xx); never a 5xx.
    NoHarm,
    /// What the same request without its query string gets when that is a
    /// refusal of the caller (401, 403) or a redirect to log in (3xx), or
    /// 400; else 400 (the query is refused, not ignored).
    QueryRefused,
}

/// One request, sent by each caller in turn.
#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    expect: Expect,
}

/// `/api/*` that changes something: a stranger 401, a viewer 403.
fn change(operator: u16) -> [u16; 3] {
    [401, 403, operator]
}

/// `/api/*` that reads: a stranger 401, the others alike.
fn read(code: u16) -> [u16; 3] {
    [401, code, code]
}

/// Open to anyone.
fn open(code: u16) -> [u16; 3] {
    [code; 3]
}

fn call(method: &'static str, path: impl Into<String>, expect: [u16; 3]) -> Case {
    raw(method, path, None, Vec::new(), expect)
}

fn raw(
    method: &'static str,
    path: impl Into<String>,
    content_type: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    expect: [u16; 3],
) -> Case {
    Case {
        method,
        path: path.into(),
        content_type,
        body: body.into(),
        expect: Expect::Exact(expect),
    }
}

fn send_json(method: &'static str, path: &str, body: &Value, expect: [u16; 3]) -> Case {
    raw(method, path, JSON, body.to_string(), expect)
}

/// A route that reads a JSON body, for the refusals all such routes share.
struct JsonRoute {
    method: &'static str,
    path: &'static str,
    expect: fn(u16) -> [u16; 3],
    /// The right shape, refused anyway (a stale generation, an unknown id).
    base: Value,
    /// The wrong shape, carrying the marker.
    wrong: Value,
}

/// Bodies that are not the JSON expected; each carries `mark` where it can.
fn malformed(r: &JsonRoute, mark: &str) -> Vec<Case> {
    let mut unknown = r.base.clone();
    unknown[mark] = json!(1);
    let big = json!({ "pad": format!("{mark}{}", "x".repeat(OVERSIZED)) });
    let bad_utf8 = [
        br#"{"confirm": "#.as_slice(),
        b"\xff\xfe",
        mark.as_bytes(),
        b"\"}",
    ]
    .concat();
    let c = |ct, body: Vec<u8>, code| raw(r.method, r.path, ct, body, (r.expect)(code));
    vec![
        c(JSON, format!("{{\"generation\": {mark}").into(), 400),
        c(JSON, json!(mark).to_string().into(), 400),
        c(JSON, json!([mark]).to_string().into(), 400),
        c(JSON, b"null".to_vec(), 400),
        c(JSON, unknown.to_string().into(), 400),
        c(JSON, r.wrong.to_string().into(), 400),
        c(JSON, Vec::new(), 400),
        c(JSON, bad_utf8, 400),
        c(None, Vec::new(), 415),
        c(None, r.base.to_string().into(), 415),
        c(Some("text/plain"), unknown.to_string().into(), 415),
        c(
            Some("application/x-www-form-urlencoded"),
            format!("generation=1&confirm={mark}").into(),
            415,
        ),
        c(JSON, big.to_string().into(), 413),
    ]
}

/// Logging in and out, the same routes at an agent and at the hub.
fn session_cases(mark: &str) -> Vec<Case> {
    let login = JsonRoute {
        method: "POST",
        path: "/api/login",
        expect: open,
        base: json!({"token": mark}),
        wrong: json!({"token": [mark]}),
    };
    let mut cases = malformed(&login, mark);
    cases.extend([
        send_json("POST", "/api/login", &json!({"token": 5}), open(400)),
        call("GET", "/api/login", open(405)),
        call("PUT", "/api/login", open(405)),
        call("GET", "/api/session", [401, 200, 200]),
        call("POST", "/api/session", open(405)),
        call("DELETE", "/api/session", open(405)),
        call("GET", "/api/logout", read(405)),
        // A bearer caller has no session to end; the body is not read.
        raw(
            "POST",
            "/api/logout",
            JSON,
            format!("{{{mark}"),
            [401, 204, 204],
        ),
        call("PUT", "/api/logout", read(405)),
        call("GET", "/login", open(200)),
        call("POST", "/login", open(405)),
        call("DELETE", "/login", open(405)),
        call("GET", "/login.js", open(200)),
        call("POST", "/login.js", open(405)),
        call("GET", "/login?next=/", open(400)),
    ]);
    cases
}

/// The markers a walk carries: `mark` in bodies that are not the request
/// expected (never audited), `val` in well-formed requests and paths
/// (reported where quoted), and `big`, `val` made 10 KiB long.
fn markers(prefix: &str) -> (String, String, String) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    let mark = format!("{prefix}MARKER-{seed:08x}");
    let val = format!("{prefix}VALUE-{seed:08x}");
    let big = format!("{val}{}", "y".repeat(10 * 1024));
    (mark, val, big)
}

/// What one request got.
struct Answer {
    code: u16,
    content_type: String,
    text: String,
}

async fn send(
    base: &str,
    client: &reqwest::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Answer, reqwest::Error> {
    let mut req = client.request(method.parse().expect("a method"), format!("{base}{path}"));
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if !body.is_empty() {
        req = req.body(body.to_vec());
    }
    let resp = req.send().await?;
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = resp.text().await.unwrap_or_default();
    Ok(Answer {
        code,
        content_type,
        text,
    })
}

/// Sends `case` to `base` as each caller; returns what went wrong.
async fn walk(base: &str, clients: &[reqwest::Client; 3], case: &Case) -> Vec<String> {
    let mut wrong = Vec::new();
    let shown: String = case.path.chars().take(60).collect();
    let body: String = String::from_utf8_lossy(&case.body)
        .chars()
        .take(80)
        .collect();
    for (i, (client, who)) in clients.iter().zip(CALLERS).enumerate() {
        let what = format!(
            "{who} {} {shown} [{:?}] {body:?}",
            case.method, case.content_type
        );
        let a = match send(
            base,
            client,
            case.method,
            &case.path,
            case.content_type,
            &case.body,
        )
        .await
        {
            Ok(a) => a,
            Err(e) => {
                wrong.push(format!("{what}: no answer: {e:#}"));
                continue;
            }
        };
        let brief: String = a.text.chars().take(200).collect();
        let want = match &case.expect {
            Expect::Exact(codes) => Some(codes[i]),
            Expect::NoHarm => None,
            Expect::QueryRefused => {
                let bare = case.path.split('?').next().unwrap_or_default();
                match send(base, client, case.method, bare, None, &[]).await {
                    Ok(r) if matches!(r.code, 300..=399 | 401 | 403) && a.code != 400 => {
                        Some(r.code)
                    }
                    Ok(_) => Some(400),
                    Err(e) => {
                        wrong.push(format!("{what}: no answer without the query: {e:#}"));
                        continue;
                    }
                }
            }
        };
        match want {
            Some(want) if a.code != want => {
                wrong.push(format!("{what}: {}, expected {want}: {brief}", a.code));
            }
            None if a.code >= 500 => {
                wrong.push(format!("{what}: {}: {brief}", a.code));
            }
            _ => {}
        }
        if a.code >= 400 {
            let error = serde_json::from_str::<Value>(&a.text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned));
            if error.is_none() || !a.content_type.starts_with("application/json") {
                wrong.push(format!(
                    "{what}: {} without a JSON error ({}): {brief}",
                    a.code, a.content_type
                ));
            }
        }
    }
    wrong
}

/// Walks every case (the hand-written ones and those derived from `routes`)
/// against `base`; fails naming each wrong answer and each route without
/// cases.
async fn walk_all(
    base: &str,
    clients: &[reqwest::Client; 3],
    routes: &[drainwatch::http::Route],
    fill: &dyn Fn(&str) -> String,
    mut cases: Vec<Case>,
    mark: &str,
) -> anyhow::Result<()> {
    let missing = derived::uncovered(routes, &cases);
    anyhow::ensure!(
        missing.is_empty(),
        "routes the walk has no cases for (add them to the walk):\n{}",
        missing.join("\n")
    );
    cases.extend(derived::cases(routes, fill, mark));
    let started = std::time::Instant::now();
    let mut wrong = Vec::new();
    for case in &cases {
        wrong.extend(walk(base, clients, case).await);
    }
    eprintln!(
        "walked {} cases × 3 callers over {} routes in {:?}",
        cases.len(),
        routes.len(),
        started.elapsed()
    );
    anyhow::ensure!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    Ok(())
}

/// A process's resident memory, from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))?;
    Ok(line.trim().trim_end_matches("kB").trim().parse()?)
}

/// Audit entries quoting `needle` in their request or detail.
fn quoting(audit: &Value, needle: &str) -> Vec<String> {
    let entries = audit.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut found = Vec::new();
    for e in entries {
        for field in ["request", "detail"] {
            if let Some(text) = e[field].as_str().filter(|t| t.contains(needle)) {
                let text: String = text.chars().take(100).collect();
                found.push(format!("{} by {}, {field}: {text}", e["action"], e["peer"]));
            }
        }
    }
    found
}
