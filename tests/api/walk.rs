//! One walk over the whole HTTP API with bad input, as a stranger, a viewer and
//! an operator: every refusal answers its exact status with a JSON `error`,
//! the audit log never keeps a body that was refused, and nothing changes —
//! the server, its history, the ledger and the model server's process stay
//! as they were.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shared::ProcId;
use shared::flags::Flags;
use shared::restart::Phase;
use tests::{TestApp, bearer_client};

use super::auth::managed_with_auth;

const JSON: Option<&'static str> = Some("application/json");
const CALLERS: [&str; 3] = ["stranger", "viewer", "operator"];
/// Over the router's 64 KiB body limit.
const OVERSIZED: usize = 70 * 1024;
/// drainwatch's resident memory after the walk stays under this.
const MAX_RSS_KIB: u64 = 150 * 1024;

/// One request, sent by each caller in turn, and the status each must get.
#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    /// For the stranger, the viewer and the operator.
    expect: [u16; 3],
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
        expect,
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

/// The four operations: wrong methods, bodies, guards and flags.
fn operations(g: u64, mark: &str, val: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ["/api/restart", "/api/start", "/api/stop", "/api/adopt"] {
        cases.push(call("GET", path, read(405)));
        cases.push(call("PUT", path, change(405)));
        cases.push(call("DELETE", path, change(405)));
        let flags = matches!(path, "/api/restart" | "/api/start");
        // The request for `generation`, with the right name (and a valid flag).
        let body = |gen_: u64| {
            let mut b = json!({"generation": gen_, "confirm": "sim"});
            if flags {
                b["flags"] = json!({"--tp": "2"});
            }
            b
        };
        let route = JsonRoute {
            method: "POST",
            path,
            expect: change,
            base: body(g + 7),
            wrong: json!({"generation": mark, "confirm": "sim"}),
        };
        cases.extend(malformed(&route, mark));
        // The guards, in the order the manager checks them.
        let mut refused = vec![
            (body(g + 1), 409),
            (body(g.wrapping_sub(1)), 409),
            (body(u64::MAX), 409),
            // A request as an array is not read as the object, field by field.
            (
                if flags {
                    json!([g + 7, {"--tp": "2"}, "sim"])
                } else {
                    json!([g + 7, "sim"])
                },
                400,
            ),
            (json!({"generation": -1, "confirm": "sim"}), 400),
            (json!({"generation": 1.5, "confirm": "sim"}), 400),
            (json!({"generation": g.to_string(), "confirm": "sim"}), 400),
            (json!({"generation": null, "confirm": "sim"}), 400),
            (json!({"confirm": "sim"}), 400),
            (json!({"generation": g}), 400),
        ];
        for confirm in [val, "", "SIM", "sim\u{0}", "s i m", "sim; reboot"] {
            let mut b = body(g);
            b["confirm"] = json!(confirm);
            refused.push((b, 400));
        }
        match path {
            // The server runs: a start is a conflict whatever its flags.
            "/api/start" => {
                refused.push((body(g), 409));
                refused.push((
                    json!({"generation": g, "flags": {val: "1"}, "confirm": "sim"}),
                    409,
                ));
            }
            "/api/stop" => {
                refused.push((
                    json!({"generation": g, "confirm": "sim", "contain": true}),
                    400,
                ));
                refused.push((json!({"generation": g, "confirm": "sim", "flags": {}}), 400));
            }
            "/api/adopt" => {
                refused.push((body(g), 409));
                refused.push((
                    json!({"generation": g, "confirm": "sim", "contain": "yes"}),
                    400,
                ));
                refused.push((json!({"generation": g, "confirm": "sim", "flags": {}}), 400));
            }
            _ => {}
        }
        cases.extend(
            refused
                .into_iter()
                .map(|(b, code)| send_json("POST", path, &b, change(code))),
        );
    }
    cases.extend(
        bad_flags(val)
            .into_iter()
            .map(|f| json!({"generation": g, "flags": f, "confirm": "sim"}))
            .map(|b| send_json("POST", "/api/restart", &b, change(400))),
    );
    cases
}

/// Flag changes the allow-list refuses, each sent with the right generation and
/// name: a change not refused would restart the server.
fn bad_flags(val: &str) -> Vec<Value> {
    let tp = |v: &str| json!({ "--tp": v });
    let mode = |v: &str| json!({ "SIMSERVER_MODE": v });
    vec![
        json!({ format!("--{val}"): "1" }),
        json!({"--model-path": format!("/etc/{val}")}),
        json!({"LD_PRELOAD": format!("/tmp/{val}.so")}),
        json!({"SIMSERVER_OWNER": val}),
        json!({"--tp": "2", format!("--{val}"): "x"}),
        tp("0"),
        tp("5"),
        tp(""),
        tp("0x2"),
        tp("1e1"),
        tp("99999999999999999999"),
        tp(&format!("2; rm -rf / #{val}")),
        tp(&format!("$(touch /tmp/{val})")),
        tp("`id`"),
        tp("2 && id"),
        tp("2 | tee /tmp/x"),
        tp("2\u{0}"),
        tp("2\n3"),
        tp(&format!("2\r\n--{val}")),
        json!({"--tp": 2}),
        json!({"--tp": ["2"]}),
        json!(["--tp", "2"]),
        mode(&format!("normal\nLD_PRELOAD=/tmp/{val}.so")),
        mode("normal && reboot"),
        mode("NORMAL"),
        mode("normal\u{0}"),
        json!({"--enable-torch-compile": format!("true; {val}")}),
        json!({"--enable-torch-compile": "yes"}),
        json!({"--speculative-algorithm": "EAGLE --trust-remote-code"}),
        json!({"--warmup-ms": "99"}),
        json!({"--warmup-ms": "60001"}),
    ]
}

/// The history: bad ids and query strings.
fn history(big: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ["/api/restarts", "/api/audit", "/api/bench/runs"] {
        for q in [
            "limit=0",
            "limit=abc",
            "nope=1",
            "limit=1001",
            "limit=-1",
            "limit=",
        ] {
            cases.push(call("GET", format!("{path}?{q}"), read(400)));
        }
        cases.push(call("POST", path, change(405)));
        cases.push(call("DELETE", path, change(405)));
    }
    for path in ["/api/restarts", "/api/bench/runs"] {
        for (id, code) in [
            ("notanumber", 400),
            ("999999", 404),
            ("-1", 404),
            ("0", 404),
            ("1.5", 400),
            ("99999999999999999999", 400),
            (big, 400),
        ] {
            cases.push(call("GET", format!("{path}/{id}"), read(code)));
        }
        cases.push(call("DELETE", format!("{path}/1"), change(405)));
        cases.push(call("PUT", format!("{path}/1"), change(405)));
    }
    cases
}

/// The ledger: benchmarks, flag sets, diffs, export.
fn ledger(mark: &str, val: &str, big: &str) -> Vec<Case> {
    let bench = JsonRoute {
        method: "POST",
        path: "/api/bench",
        expect: change,
        base: json!({"repeats": 0}),
        wrong: json!({"concurrency": mark}),
    };
    let mut cases = malformed(&bench, mark);
    cases.push(call("GET", "/api/bench", read(405)));
    cases.push(call("PUT", "/api/bench", change(405)));
    // Each would start a benchmark if it were not refused.
    for s in [
        json!({"concurrency": [0]}),
        json!({"concurrency": [1025]}),
        json!({"concurrency": []}),
        json!({ "concurrency": vec![1; 13] }),
        json!({"concurrency": [-1]}),
        json!({"concurrency": 4}),
        json!({"num_prompts": 0}),
        json!({"num_prompts": 100_001}),
        json!({"input_len": 0}),
        json!({"input_len": 131_073}),
        json!({"output_len": 0}),
        json!({"output_len": 32_769}),
        json!({"warmup": 10_001}),
        json!({"repeats": 2}),
        json!({"repeats": 21}),
        json!({"repeats": u64::MAX}),
        json!({"api": val}),
        json!({"correctness": {"prompt": " ", "expect": val}}),
        json!({"correctness": {"prompt": val}}),
        json!({val: 1}),
    ] {
        cases.push(send_json("POST", "/api/bench", &s, change(400)));
    }
    // Nothing runs: there is nothing to cancel, and the body is not read.
    cases.push(call("GET", "/api/bench/cancel", read(405)));
    cases.push(call("POST", "/api/bench/cancel", change(409)));
    cases.push(raw(
        "POST",
        "/api/bench/cancel",
        JSON,
        format!("{{{mark}"),
        change(409),
    ));
    cases.push(raw(
        "POST",
        "/api/bench/cancel",
        JSON,
        "x".repeat(OVERSIZED),
        change(409),
    ));

    let edit = JsonRoute {
        method: "PATCH",
        path: "/api/flagsets/nosuchset",
        expect: change,
        base: json!({"label": "x"}),
        wrong: json!({"label": [mark]}),
    };
    cases.extend(malformed(&edit, mark));
    let long = |n: usize| "x".repeat(n);
    for (body, code) in [
        (json!({"label": "x"}), 404),
        (json!({}), 404),
        (json!({"label": format!("a\u{0}b{val}")}), 400),
        (json!({"label": format!("line\nbreak{val}")}), 400),
        (json!({"label": format!("esc\u{1b}[31m{val}")}), 400),
        (json!({"label": long(81)}), 400),
        (json!({"notes": long(4001)}), 400),
        (json!({"notes": format!("nul\u{0}{val}")}), 400),
        (json!({"label": 5}), 400),
    ] {
        cases.push(send_json(
            "PATCH",
            "/api/flagsets/nosuchset",
            &body,
            change(code),
        ));
    }
    let label = json!({"label": "x"});
    cases.push(send_json(
        "PATCH",
        &format!("/api/flagsets/{big}"),
        &label,
        change(404),
    ));
    cases.push(send_json(
        "PATCH",
        "/api/flagsets/diff",
        &label,
        change(405),
    ));
    cases.push(call("GET", "/api/flagsets/nosuchset", read(405)));
    cases.push(call("POST", "/api/flagsets/nosuchset", change(405)));
    cases.push(call("DELETE", "/api/flagsets/nosuchset", change(405)));

    for q in ["", "?a=x", "?b=y", "?a=x&b=y&nope=1", "?a[]=x&b=y"] {
        cases.push(call("GET", format!("/api/flagsets/diff{q}"), read(400)));
    }
    cases.push(call(
        "GET",
        format!("/api/flagsets/diff?a={val}&b={val}"),
        read(404),
    ));
    cases.push(call(
        "GET",
        format!("/api/flagsets/diff?a={big}&b=y"),
        read(404),
    ));
    for path in [
        "/api/flagsets",
        "/api/flagsets/diff",
        "/api/export/bench.json",
        "/api/export/bench.csv",
    ] {
        cases.push(call("POST", path, change(405)));
        cases.push(call("DELETE", path, change(405)));
    }
    // Routes that take no query string ignore one.
    for path in [
        "/api/flagsets",
        "/api/export/bench.json",
        "/api/export/bench.csv",
    ] {
        cases.push(call("GET", format!("{path}?nope=1&limit=abc"), read(200)));
    }
    cases
}

/// Session, login, and what lies outside `/api/*`.
fn the_rest(mark: &str, val: &str, big: &str) -> Vec<Case> {
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
        call("GET", "/healthz?nope=1", open(200)),
        call("POST", "/healthz", open(405)),
        call("DELETE", "/healthz", open(405)),
        call("POST", "/login", open(405)),
        call("DELETE", "/login", open(405)),
        call("GET", "/metrics", read(200)),
        call("POST", "/metrics", read(405)),
        call("DELETE", "/metrics", read(405)),
        call("GET", "/api/state?nope=1", read(200)),
        call("POST", "/api/state", change(405)),
        call("PUT", "/api/state", change(405)),
        call("DELETE", "/api/state", change(405)),
        // A plain GET is no WebSocket handshake.
        call("GET", "/ws", read(400)),
        call("POST", "/ws", change(405)),
        call("GET", format!("/api/{val}"), read(404)),
        call("POST", format!("/api/{val}"), change(404)),
        call("DELETE", format!("/api/{val}"), change(404)),
        call("GET", format!("/api/{big}"), read(404)),
        call("GET", "/api/state/extra", read(404)),
        call("GET", "/api/", read(404)),
        call("GET", format!("/{val}"), open(404)),
        call("POST", format!("/{val}"), open(404)),
        call("GET", format!("/{big}"), open(404)),
    ]);
    cases
}

/// What the walk must leave as it found it.
#[derive(Debug, PartialEq)]
struct World {
    generation: u64,
    phase: Phase,
    root: Option<ProcId>,
    flags: Flags,
    busy: (bool, bool),
    restarts: Vec<Value>,
    flagsets: Value,
    bench_runs: Value,
}

async fn world(app: &TestApp) -> anyhow::Result<World> {
    let s = app.server().await?;
    let restarts = app.get_json("/api/restarts?limit=1000").await?;
    Ok(World {
        generation: s.generation,
        phase: s.phase,
        root: s.root,
        flags: s.flags,
        busy: (s.operation.is_some(), s.bench.is_some()),
        restarts: restarts.as_array().cloned().unwrap_or_default(),
        flagsets: app.get_json("/api/flagsets").await?,
        bench_runs: app.get_json("/api/bench/runs").await?,
    })
}

/// Sends `case` as each caller; returns what went wrong.
async fn walk(app: &TestApp, clients: &[reqwest::Client; 3], case: &Case) -> Vec<String> {
    let mut wrong = Vec::new();
    let shown: String = case.path.chars().take(60).collect();
    let body: String = String::from_utf8_lossy(&case.body)
        .chars()
        .take(80)
        .collect();
    for ((client, who), want) in clients.iter().zip(CALLERS).zip(case.expect) {
        let what = format!(
            "{who} {} {shown} [{:?}] {body:?}",
            case.method, case.content_type
        );
        let mut req = client.request(case.method.parse().expect("a method"), app.url(&case.path));
        if let Some(ct) = case.content_type {
            req = req.header("content-type", ct);
        }
        if !case.body.is_empty() {
            req = req.body(case.body.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                wrong.push(format!("{what}: no answer: {e:#}"));
                continue;
            }
        };
        let code = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.unwrap_or_default();
        let brief: String = text.chars().take(200).collect();
        if code != want {
            wrong.push(format!("{what}: {code}, expected {want}: {brief}"));
        }
        if code >= 400 {
            let error = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned));
            if error.is_none() || !ct.starts_with("application/json") {
                wrong.push(format!(
                    "{what}: {code} without a JSON error ({ct}): {brief}"
                ));
            }
        }
    }
    wrong
}

/// drainwatch's resident memory, from `/proc/<pid>/status`.
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

#[tokio::test]
async fn the_whole_api_refuses_bad_input_and_changes_nothing() -> anyhow::Result<()> {
    let (_host, app, op, view) = managed_with_auth("").await?;
    let before = world(&app).await?;
    let audited = |a: &Value| a.as_array().map_or(0, Vec::len);
    let audit_before = audited(&app.get_json("/api/audit?limit=1000").await?);
    let root = before.root.expect("the server runs");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos()
        ^ std::process::id();
    // In bodies that are not the request expected: never audited.
    let mark = format!("WALKMARKER-{seed:08x}");
    // In well-formed requests and paths: reported where they are quoted.
    let val = format!("WALKVALUE-{seed:08x}");
    let big = format!("{val}{}", "y".repeat(10 * 1024));

    let mut cases = operations(before.generation, &mark, &val);
    cases.extend(history(&big));
    cases.extend(ledger(&mark, &val, &big));
    cases.extend(the_rest(&mark, &val, &big));
    let clients = [
        reqwest::Client::new(),
        bearer_client(&view),
        bearer_client(&op),
    ];
    let started = Instant::now();
    let mut wrong = Vec::new();
    for case in &cases {
        wrong.extend(walk(&app, &clients, case).await);
    }
    let took = started.elapsed();
    eprintln!("walked {} cases × 3 callers in {took:?}", cases.len());
    assert!(
        wrong.is_empty(),
        "{} wrong answers:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // Nothing changed: the server, its history, the ledger, its process.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = world(&app).await?;
    assert_eq!(after, before, "the walk changed something");
    let st = simhost::read_proc_stat(root.pid)?.expect("the model server is alive");
    assert!(
        st.start_ticks == root.start_ticks && !st.has_exited(),
        "the model server's process changed: {st:?}"
    );
    let rss = rss_kib(app.proc.pid())?;
    eprintln!("drainwatch VmRSS after the walk: {rss} kB");
    assert!(rss < MAX_RSS_KIB, "drainwatch holds {rss} kB");

    // The audit log grew, and keeps no refused body (values are reported).
    let audit = app.get_json("/api/audit?limit=1000").await?;
    eprintln!(
        "audit rows: {audit_before} before, {} after",
        audited(&audit)
    );
    assert!(audited(&audit) > audit_before, "refusals were not audited");
    let quoted = quoting(&audit, &val);
    eprintln!("well-formed values quoted by the audit log: {quoted:#?}");
    let leaked = quoting(&audit, &mark);
    assert!(
        leaked.is_empty(),
        "refused bodies in the audit log: {leaked:#?}"
    );
    Ok(())
}
