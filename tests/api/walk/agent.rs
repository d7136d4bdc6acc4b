//! The agent's walk: every route of `drainwatch::api::routes` with bad
//! input, as a stranger, a viewer and an operator. Every refusal answers its
//! exact status with a JSON `error`, the audit log never keeps a body that
//! was refused, and nothing changes: the server, its history, the ledger,
//! the campaigns and the model server's process stay as they were.

use std::time::Duration;

use serde_json::{Value, json};
use shared::ProcId;
use shared::flags::Flags;
use shared::restart::Phase;
use tests::{TestApp, bearer_client};

use super::{
    Case, JSON, JsonRoute, OVERSIZED, call, change, malformed, open, quoting, raw, read, rss_kib,
    send_json, walk_all,
};
use crate::auth::managed_with_auth;

/// drainwatch's resident memory after the walk stays under this.
const MAX_RSS_KIB: u64 = 150 * 1024;

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
    // The hub's coordinated restarts: none holds this node, and only a
    // hub's token may name one.
    cases.extend([
        call("POST", "/api/coordinated/7/release", change(204)),
        call("POST", "/api/coordinated/abc/release", change(400)),
        call("GET", "/api/coordinated/7/release", read(405)),
        send_json(
            "POST",
            "/api/stop",
            &json!({"generation": g, "confirm": "sim", "coordinated": 7}),
            change(403),
        ),
    ]);
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
    // A restart's drain chart: the same ids, read the same way.
    for (id, code) in [
        ("notanumber", 400),
        ("999999", 404),
        ("0", 404),
        ("1.5", 400),
        (big, 400),
    ] {
        cases.push(call("GET", format!("/api/restarts/{id}/chart"), read(code)));
    }
    cases.push(call("GET", "/api/restarts/1/chart?nope=1", read(400)));
    cases.push(call("POST", "/api/restarts/1/chart", change(405)));
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
    for q in [
        "?sort=x",
        "?target=0",
        "?target=nan",
        "?c=-1",
        "?compare=a,b,c",
        "?nope=1",
        "?filter[]=x",
    ] {
        cases.push(call("GET", format!("/api/flagsets/view{q}"), read(400)));
    }
    cases.push(call(
        "GET",
        format!("/api/flagsets/view?filter={big}"),
        read(400),
    ));
    cases.push(call(
        "GET",
        format!("/api/flagsets/view?baseline={big}"),
        read(400),
    ));
    cases.push(call(
        "GET",
        "/api/flagsets/view?c=4&sort=first&filter=x",
        read(200),
    ));
    cases.push(call("POST", "/api/flagsets/view", change(405)));
    // Routes that read no query string refuse one.
    for path in [
        "/api/flagsets",
        "/api/export/bench.json",
        "/api/export/bench.csv",
    ] {
        cases.push(call("GET", format!("{path}?nope=1&limit=abc"), read(400)));
    }
    cases
}

/// Campaigns and webhooks: none runs, none is configured; each plan is
/// refused whole, and a dry run changes nothing.
fn campaigns(mark: &str, val: &str, big: &str) -> Vec<Case> {
    const TOML: Option<&str> = Some("application/toml");
    let plan = |text: String, code| raw("POST", "/api/campaigns", TOML, text, change(code));
    let mut cases = vec![
        call("GET", "/api/campaigns", read(200)),
        call("GET", "/api/campaigns?limit=0", read(400)),
        call("GET", "/api/campaigns?limit=abc", read(400)),
        call("DELETE", "/api/campaigns", change(405)),
        plan(
            format!("name = \"{val}\"\n[[sets]]\nflags = {{ \"--tp\" = \"9\" }}\n"),
            400,
        ),
        plan(
            format!("name = \"{val}\"\n[[sets]]\nflags = {{ \"--{val}\" = \"1\" }}\n"),
            400,
        ),
        plan(format!("name = \"{val}\"\n"), 400),
        plan(format!("[[sets]\n{mark}"), 400),
        plan(format!("{mark} = 1\n[[sets]]\n"), 400),
        plan(format!("name = \"{mark}{}\"\n", "x".repeat(OVERSIZED)), 413),
        raw(
            "POST",
            "/api/campaigns",
            TOML,
            [
                b"name = \"".as_slice(),
                b"\xff\xfe",
                mark.as_bytes(),
                b"\"\n",
            ]
            .concat(),
            change(400),
        ),
        raw(
            "POST",
            "/api/campaigns",
            JSON,
            format!("{{\"name\": {mark}"),
            change(400),
        ),
        raw(
            "POST",
            "/api/campaigns",
            Some("application/x-www-form-urlencoded"),
            format!("name={mark}"),
            change(415),
        ),
        raw("POST", "/api/campaigns", None, Vec::new(), change(415)),
        // A dry run lays the plan out and starts nothing.
        raw(
            "POST",
            "/api/campaigns?dry_run=true",
            TOML,
            "name = \"dry\"\n[[sets]]\n[[sets]]\nflags = { \"--tp\" = \"2\" }\n",
            change(200),
        ),
        raw(
            "POST",
            "/api/campaigns?dry_run=maybe",
            TOML,
            "name = \"dry\"\n[[sets]]\n",
            change(400),
        ),
    ];
    for (id, code) in [
        ("999999", 404),
        ("0", 404),
        ("abc", 400),
        (big, 400),
        ("1.5", 400),
    ] {
        for suffix in ["", "/view", "/export.json", "/export.csv"] {
            cases.push(call(
                "GET",
                format!("/api/campaigns/{id}{suffix}"),
                read(code),
            ));
        }
        for verb in ["pause", "resume", "cancel"] {
            cases.push(call(
                "POST",
                format!("/api/campaigns/{id}/{verb}"),
                change(code),
            ));
        }
    }
    cases.extend([
        call("POST", "/api/campaigns/999999/delete", change(404)),
        call("POST", format!("/api/campaigns/1/{val}"), change(404)),
        call("GET", "/api/campaigns/1/pause", read(405)),
        call("DELETE", "/api/campaigns/1", change(405)),
        call("POST", "/api/campaigns/1/export.csv", change(405)),
        call("POST", "/api/campaigns/1/view", change(405)),
        call("GET", "/api/campaigns/1/view?from=5&to=2", read(400)),
        call("GET", "/api/campaigns/1/view?to=100000", read(400)),
        call(
            "GET",
            format!("/api/campaigns/1/view?selected={val}"),
            read(400),
        ),
        call("GET", "/api/campaigns/1/view?from=-1", read(400)),
        call("GET", "/api/campaigns/1/view?rows=9", read(400)),
        // No webhooks in this config: nothing to test.
        call("POST", "/api/webhooks/test", change(409)),
        raw(
            "POST",
            "/api/webhooks/test",
            JSON,
            format!("{{{mark}"),
            change(409),
        ),
        call("GET", "/api/webhooks/test", read(405)),
    ]);
    cases
}

/// Session, login, and what lies outside `/api/*`.
fn the_rest(mark: &str, val: &str, big: &str) -> Vec<Case> {
    let mut cases = super::session_cases(mark);
    cases.extend([
        call("GET", "/healthz", open(200)),
        call("GET", "/healthz?nope=1", open(400)),
        call("POST", "/healthz", open(405)),
        call("DELETE", "/healthz", open(405)),
        call("GET", "/metrics", read(200)),
        call("POST", "/metrics", read(405)),
        call("DELETE", "/metrics", read(405)),
        call("GET", "/api/state", read(200)),
        call("GET", "/api/state?nope=1", read(400)),
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
    campaigns: Value,
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
        campaigns: app.get_json("/api/campaigns").await?,
    })
}

#[tokio::test]
async fn the_whole_api_refuses_bad_input_and_changes_nothing() -> anyhow::Result<()> {
    let (_host, app, op, view) = managed_with_auth("").await?;
    let before = world(&app).await?;
    let audited = |a: &Value| a.as_array().map_or(0, Vec::len);
    let audit_before = audited(&app.get_json("/api/audit?limit=1000").await?);
    let root = before.root.expect("the server runs");
    let (mark, val, big) = super::markers("WALK");

    let mut cases = operations(before.generation, &mark, &val);
    cases.extend(history(&big));
    cases.extend(ledger(&mark, &val, &big));
    cases.extend(campaigns(&mark, &val, &big));
    cases.extend(the_rest(&mark, &val, &big));
    let clients = [
        reqwest::Client::new(),
        bearer_client(&view),
        bearer_client(&op),
    ];
    let fill = |p: &str| {
        p.replace("{id}", "1")
            .replace("{verb}", "pause")
            .replace("{*rest}", "nosuch")
    };
    let routes = drainwatch::api::routes();
    walk_all(&app.url(""), &clients, &routes, &fill, cases, &mark).await?;

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
