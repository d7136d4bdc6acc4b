//! The hub's walk: every route of `drainwatch::fleet::routes` with bad
//! input, as a stranger, a viewer and an operator, with one agent behind it.
//! Nothing changes on the agent, and the hub keeps no refused body.

use std::time::Duration;

use serde_json::{Value, json};
use shared::restart::Phase;

use super::{
    Case, JSON, JsonRoute, call, change, malformed, open, quoting, raw, read, rss_kib, walk_all,
};

/// The hub's resident memory after the walk stays under this.
const MAX_RSS_KIB: u64 = 150 * 1024;

/// An HTTP client that shows redirects instead of following them.
fn client(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
            .expect("a token is a valid header value");
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

fn cases(generation: u64, mark: &str, val: &str, big: &str) -> Vec<Case> {
    let mut cases = super::session_cases(mark);
    let group = JsonRoute {
        method: "POST",
        path: "/api/groups/nosuch/restart",
        expect: change,
        base: json!({"confirm": "nosuch", "flags": {}}),
        wrong: json!({"confirm": [mark]}),
    };
    cases.extend(malformed(&group, mark));
    let stop = json!({"generation": generation + 7, "confirm": "sim"});
    cases.extend([
        call("GET", "/api/fleet", read(200)),
        call("POST", "/api/fleet", change(405)),
        call("GET", "/api/fleet/panel", read(200)),
        call("POST", "/api/fleet/panel", change(405)),
        call("GET", "/api/groups", read(200)),
        call("DELETE", "/api/groups", change(405)),
        super::send_json(
            "POST",
            "/api/groups/nosuch/restart",
            &json!({"confirm": "nosuch"}),
            change(404),
        ),
        super::send_json(
            "POST",
            &format!("/api/groups/{big}/restart"),
            &json!({"confirm": "x"}),
            change(404),
        ),
        call("GET", "/api/groups/nosuch/restart", read(405)),
        call("GET", "/api/coordinated", read(200)),
        call("GET", "/api/coordinated?limit=0", read(400)),
        call("GET", "/api/coordinated?limit=abc", read(400)),
        call("GET", "/api/coordinated/panel", read(200)),
        call("GET", "/api/coordinated/999999", read(404)),
        call("GET", "/api/coordinated/abc", read(400)),
        call("GET", format!("/api/coordinated/{big}"), read(400)),
        call("POST", "/api/coordinated/1", change(405)),
        // Nothing runs: nothing to cancel.
        call("POST", "/api/coordinated/999999/cancel", change(404)),
        call("POST", "/api/coordinated/abc/cancel", change(400)),
        call("GET", "/api/coordinated/1/cancel", read(405)),
        call("GET", "/metrics", read(200)),
        call("POST", "/metrics", read(405)),
        call("GET", format!("/api/{val}"), read(404)),
        call("POST", format!("/api/{val}"), change(404)),
        call("GET", "/ws", read(400)),
        call("GET", "/ws?max_hz=1", read(400)),
        call("GET", "/healthz", open(200)),
        call("GET", "/", open(303)),
        call("GET", "/fleet", [303, 200, 200]),
        // Each host's dashboard: a stranger is sent to log in.
        call("GET", "/agents/gpu-a", open(303)),
        call("GET", "/agents/gpu-a/", [303, 200, 200]),
        // A deep link is the page's to read.
        call(
            "GET",
            "/agents/gpu-a/?detail=3&dialog=restart",
            [303, 200, 200],
        ),
        call("GET", "/fleet?detail=3", [303, 200, 200]),
        call("GET", "/agents/nosuch/", [303, 404, 404]),
        call("GET", "/agents/gpu-a/api/session", [401, 200, 200]),
        raw(
            "POST",
            "/agents/gpu-a/api/logout",
            JSON,
            format!("{{{mark}"),
            [401, 204, 204],
        ),
        call("POST", "/agents/gpu-a/api/login", change(404)),
        call("GET", "/agents/gpu-a/api/state", read(200)),
        call("GET", "/agents/gpu-a/api/state?nope=1", read(400)),
        call("GET", "/agents/nosuch/api/state", read(404)),
        call("GET", format!("/agents/{big}/api/state"), read(404)),
        // Through the hub, the agent's own guards: a stale generation.
        super::send_json("POST", "/agents/gpu-a/api/stop", &stop, change(409)),
        call("GET", "/agents/gpu-a/ws", read(400)),
        call("GET", "/agents/gpu-a/nosuch.js", open(404)),
    ]);
    cases
}

#[tokio::test]
async fn the_whole_hub_refuses_bad_input_and_changes_nothing() -> anyhow::Result<()> {
    let h = crate::fleet::hub_with_agent().await?;
    let (agent, hub, hub_proc) = (&h.agent, h.hub.clone(), &h.hub_proc);
    let before = agent.server().await?;
    let (op, view) = (h.op.clone(), h.view.clone());
    let clients = [client(None), client(Some(&view)), client(Some(&op))];
    // The agent is in the fleet before the walk begins.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let f: Value = clients[1]
            .get(format!("{hub}/api/fleet"))
            .send()
            .await?
            .json()
            .await?;
        if f.to_string().contains("\"sim\"") {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the agent never joined: {f}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mark, val, big) = super::markers("HUBWALK");
    let fill = |p: &str| {
        p.replace("{name}", "gpu-a")
            .replace("{id}", "1")
            .replace("{*rest}", "nosuch")
    };
    let routes = drainwatch::fleet::routes();
    walk_all(
        &hub,
        &clients,
        &routes,
        &fill,
        cases(before.generation, &mark, &val, &big),
        &mark,
    )
    .await?;

    // Nothing changed on the agent; the agent's audit keeps no refused body.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = agent.server().await?;
    assert_eq!(
        (after.phase, after.root, after.generation),
        (Phase::Ready, before.root, before.generation)
    );
    let audit = agent.get_json("/api/audit?limit=1000").await?;
    let leaked = quoting(&audit, &mark);
    assert!(
        leaked.is_empty(),
        "refused bodies in the agent's audit log: {leaked:#?}"
    );
    let rss = rss_kib(hub_proc.pid())?;
    eprintln!("hub VmRSS after the walk: {rss} kB");
    assert!(rss < MAX_RSS_KIB, "the hub holds {rss} kB");
    Ok(())
}
