//! The hub's coordinated restart of a server that spans two nodes, each node
//! an agent with its own simulated host on its own loopback address, and the
//! simulated server's rank 0 waiting for rank 1 to join (as NCCL's init
//! does): drain both, verify both, rank 0, rank 1, a completion through rank
//! 0; one record with a timeline per node. A node whose workers will not go
//! (an orphan, an escapee) is cleaned by its own agent before anything
//! launches anywhere; a foreign holder on one node fails the restart naming
//! it, with nothing launched; a node that cannot launch stops the other too.
//! The agents' audits name the hub's token and the person at the hub. Each
//! host's signal trace proves no foreign process was signalled.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use shared::fleet::{CoordRecord, CoordStep};
use shared::restart::{Outcome, Phase};
use tests::managed::{ServerSpec, free_port, spawn_managed};
use tests::{GIB, SimHost, TestApp, auth_file, bearer_client, sha256_hex, spawn_foreign};

/// Two agents (a: rank 0, with `--auth` and a token for the hub; b: rank 1,
/// open), a hub with its own `--auth` in front of them.
pub(crate) struct Fleet {
    pub(crate) hosts: [SimHost; 2],
    pub(crate) agents: [TestApp; 2],
    /// The hub's URL, its process, and its scratch folder.
    pub(crate) hub: String,
    pub(crate) _hub: tests::Proc,
    pub(crate) _dir: tempfile::TempDir,
    /// The hub's operator (olga) and viewer (victor).
    pub(crate) olga: reqwest::Client,
    pub(crate) victor: reqwest::Client,
    /// Olga's secret, for the CLI.
    pub(crate) olga_token: String,
    /// Node b's server port (to occupy it in a test).
    pub(crate) port_b: u16,
}

const HUB_TOKEN: &str = "dw_test_the_hub_secret";

pub(crate) fn spec(env: Vec<(&'static str, &'static str)>) -> ServerSpec {
    ServerSpec {
        tp: 2,
        warmup_ms: 300,
        drain: "3s",
        kill_grace: "2s",
        verify: "4s",
        warmup_timeout: "30s",
        env,
        nodes: true,
        ..ServerSpec::default()
    }
}

pub(crate) async fn fleet(env_b: Vec<(&'static str, &'static str)>) -> anyhow::Result<Fleet> {
    let hosts = [SimHost::new(150), SimHost::new(150)];
    let hub_token = format!(
        "[[token]]\nname = \"fleet-hub\"\nrole = \"operator\"\nsha256 = \"{}\"\nhub = true\n",
        sha256_hex(HUB_TOKEN)
    );
    let (auth_a, _, _) = auth_file(hosts[0].scratch(), &hub_token);
    let auth_a = auth_a.display().to_string();
    let spec_b = spec(env_b);
    let port_b = spec_b.port;
    let a = spawn_managed(
        &hosts[0],
        &spec(Vec::new()),
        &["--bind", "127.0.0.2:0", "--auth", &auth_a],
    )?
    .with_token(HUB_TOKEN);
    let b = spawn_managed(&hosts[1], &spec_b, &["--bind", "127.0.0.3:0"])?;
    let agents = [a, b];
    let dir = tempfile::tempdir()?;
    let (hub_auth, op, view) = auth_file(dir.path(), "");
    std::fs::write(dir.path().join("a.token"), format!("{HUB_TOKEN}\n"))?;
    let init = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[agent]]\nname = \"a\"\nurl = \"{}\"\ntoken_file = \"a.token\"\n\
             [[agent]]\nname = \"b\"\nurl = \"{}\"\n\
             [[group]]\nname = \"dsv3\"\nnodes = [\"a\", \"b\"]\ndist_init_addr = \"{init}\"\n\
             verify_timeout = \"8s\"\nlaunch_timeout = \"40s\"\n",
            agents[0].url(""),
            agents[1].url("")
        ),
    )?;
    let (proc, hub) = tests::spawn_hub_with(&config, &["--auth", &hub_auth.display().to_string()])?;
    Ok(Fleet {
        hosts,
        agents,
        hub,
        _hub: proc,
        _dir: dir,
        olga: bearer_client(&op),
        victor: bearer_client(&view),
        olga_token: op.clone(),
        port_b,
    })
}

impl Fleet {
    pub(crate) async fn ask(
        &self,
        who: &reqwest::Client,
        body: Value,
    ) -> anyhow::Result<(u16, Value)> {
        let r = who
            .post(format!("{}/api/groups/dsv3/restart", self.hub))
            .json(&body)
            .send()
            .await?;
        let code = r.status().as_u16();
        Ok((code, r.json().await.unwrap_or(Value::Null)))
    }

    pub(crate) async fn record(&self, id: i64) -> anyhow::Result<CoordRecord> {
        Ok(self
            .olga
            .get(format!("{}/api/coordinated/{id}", self.hub))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Olga restarts the group with `flags`; the record once it ended.
    pub(crate) async fn run(&self, flags: Value) -> anyhow::Result<CoordRecord> {
        let (code, body) = self
            .ask(&self.olga, json!({"confirm": "dsv3", "flags": flags}))
            .await?;
        anyhow::ensure!(code == 202, "{code} {body}");
        self.wait(body["id"].as_i64().unwrap_or_default()).await
    }

    /// The hub's records, newest first.
    async fn list(&self) -> anyhow::Result<Vec<CoordRecord>> {
        Ok(self
            .olga
            .get(format!("{}/api/coordinated", self.hub))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// Record `id` once it ended.
    pub(crate) async fn wait(&self, id: i64) -> anyhow::Result<CoordRecord> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let r = self.record(id).await?;
            if r.outcome != Outcome::Running {
                return Ok(r);
            }
            anyhow::ensure!(Instant::now() < deadline, "still running: {r:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Fleet {
    /// `drainwatch group <args> --url <hub>` as olga: exit code and stdout.
    async fn cli(&self, args: &[&str]) -> anyhow::Result<(i32, String)> {
        let out = tokio::process::Command::new(tests::bin("drainwatch"))
            .arg("group")
            .args(args)
            .args(["--url", &self.hub])
            .env("DRAINWATCH_TOKEN", &self.olga_token)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }
}

/// When member `m` first did `step` (ms), if it did.
fn first(r: &CoordRecord, m: usize, step: CoordStep) -> Option<u64> {
    r.members[m]
        .events
        .iter()
        .find(|e| e.step == step)
        .map(|e| e.at_ms)
}

fn last(r: &CoordRecord, m: usize, step: CoordStep) -> Option<u64> {
    r.members[m]
        .events
        .iter()
        .rev()
        .find(|e| e.step == step)
        .map(|e| e.at_ms)
}

fn notes(r: &CoordRecord, m: usize) -> String {
    r.members[m]
        .events
        .iter()
        .map(|e| format!("{:?}: {}", e.step, e.note))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every node drained and verified before the first launch anywhere, and
/// rank 1 launched only after rank 0.
fn assert_ordered(r: &CoordRecord) {
    let launch0 = first(r, 0, CoordStep::Launch).expect("rank 0 launched");
    let launch1 = first(r, 1, CoordStep::Launch).expect("rank 1 launched");
    for m in 0..2 {
        let verified = last(r, m, CoordStep::Verify).expect("verified");
        assert!(verified <= launch0, "{}", notes(r, m));
    }
    assert!(launch0 <= launch1, "{r:#?}");
}

/// The node's server command line, as its agent sees it.
async fn server_cmdline(app: &TestApp) -> anyhow::Result<String> {
    let s = app.state().await?;
    let sample = s.latest.expect("a sample");
    let root = s.server.and_then(|s| s.root).expect("a server");
    Ok(sample
        .processes
        .iter()
        .find(|p| p.pid == root.pid)
        .map(|p| p.cmdline.join(" "))
        .unwrap_or_default())
}

/// Waits until `app`'s samples show `pid` holding GPU memory.
async fn seen_holding(app: &TestApp, pid: u32) -> anyhow::Result<()> {
    app.wait_for_state("the foreign holder", Duration::from_secs(10), |s| {
        s.latest.as_ref().is_some_and(|l| {
            l.processes
                .iter()
                .any(|p| p.pid == pid && !p.gpu_mem.is_empty())
        })
    })
    .await
    .map(drop)
}

async fn audit(app: &TestApp) -> anyhow::Result<Vec<Value>> {
    let v = app.get_json("/api/audit?kind=action").await?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn a_group_restarts_node_by_node_and_answers_through_rank_0() -> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    // A viewer may not; a wrong confirmation is refused. Nothing is recorded.
    let (code, _) = f.ask(&f.victor, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 403);
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv"})).await?;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("`dsv3`"),
        "{body}"
    );
    let (code, body) = f
        .ask(&f.olga, json!({"confirm": "dsv3", "flags_text": "--tp"}))
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("not name=value"), "{body}");
    let listed = f.list().await?;
    assert!(listed.is_empty());
    // Each node alone refuses a launch without its place in the group.
    let (code, body) = f.agents[1]
        .post("/api/start", &json!({"generation": 0, "confirm": "sim"}))
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("spans nodes"), "{body}");

    // From stopped: nothing to drain, both verified, rank 0, rank 1, ready.
    let r = f.run(json!({"--warmup-ms": "400"})).await?;
    assert_eq!(r.outcome, Outcome::Succeeded, "{r:#?}");
    assert_eq!(r.requested_by, "olga");
    assert_ordered(&r);
    assert!(
        notes(&r, 0).contains("completion came back through rank 0"),
        "{}",
        notes(&r, 0)
    );
    for (m, app) in f.agents.iter().enumerate() {
        let s = app.server().await?;
        assert_eq!(s.phase, Phase::Ready, "node {m}");
        assert_eq!(s.flags.get("--warmup-ms").map(String::as_str), Some("400"));
        let cmd = server_cmdline(app).await?;
        assert!(
            cmd.contains(&format!(
                "--nnodes 2 --node-rank {m} --dist-init-addr 127.0.0.1:"
            )),
            "{cmd}"
        );
    }

    // From ready: each node's own server is stopped and verified first.
    let gens: Vec<u64> = [f.agents[0].server().await?, f.agents[1].server().await?]
        .iter()
        .map(|s| s.generation)
        .collect();
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().unwrap_or_default();
    // Meanwhile nobody changes a node of it through the hub, nor begins
    // another; looking is fine.
    let r = f
        .olga
        .post(format!("{}/agents/b/api/stop", f.hub))
        .json(&json!({"generation": gens[1], "confirm": "sim"}))
        .send()
        .await?;
    assert_eq!(r.status(), 409);
    assert!(
        r.text()
            .await?
            .contains(&format!("coordinated restart #{id}"))
    );
    let (code, _) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 409);
    let r = f
        .olga
        .get(format!("{}/agents/b/api/state", f.hub))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let r = f.wait(id).await?;
    assert_eq!(r.outcome, Outcome::Succeeded, "{r:#?}");
    assert_ordered(&r);
    for (m, gen_before) in gens.into_iter().enumerate() {
        let n = notes(&r, m);
        assert!(n.contains("stopped and verified by its agent"), "{n}");
        assert_eq!(r.members[m].agent_ops.len(), 2, "a stop and a start: {n}");
        assert_eq!(f.agents[m].server().await?.generation, gen_before + 1);
    }
    // The record is the hub's, and lasts.
    let listed = f.list().await?;
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, r.id);

    // Each agent's audit names the hub's caller and the person at the hub.
    let a = audit(&f.agents[0]).await?;
    assert!(
        a.iter().any(|e| {
            let peer = e["peer"].as_str().unwrap_or("");
            peer.starts_with("fleet-hub (")
                && peer.ends_with(" for olga")
                && e["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains("node rank 0 of 2")
        }),
        "{a:#?}"
    );
    let b = audit(&f.agents[1]).await?;
    assert!(
        b.iter()
            .any(|e| e["peer"].as_str().unwrap_or("").ends_with(" for olga")
                && e["action"] == "stop"),
        "{b:#?}"
    );
    // Flags a node's allow-list refuses are refused, naming the node, before
    // anything is recorded or stopped.
    let before = f.list().await?.len();
    for (flags, says) in [
        (json!({"--tp": "99"}), "`a`: flag `--tp`: out of range"),
        (
            json!({"--nope": "1"}),
            "`a`: flag `--nope` is not in its allow-list",
        ),
    ] {
        let (code, body) = f
            .ask(&f.olga, json!({"confirm": "dsv3", "flags": flags}))
            .await?;
        assert_eq!(code, 400, "{body}");
        assert!(
            body["error"].as_str().unwrap_or("").contains(says),
            "{body}"
        );
    }
    assert_eq!(f.list().await?.len(), before);
    assert_eq!(f.agents[0].server().await?.phase, Phase::Ready);
    // From a terminal: without --yes and no terminal to type on, nothing;
    // with it, followed node by node to the end.
    let (code, _) = f.cli(&["restart", "dsv3"]).await?;
    assert_eq!(code, 2);
    let (code, out) = f
        .cli(&["restart", "dsv3", "--yes", "--flag", "--warmup-ms=500"])
        .await?;
    assert_eq!(code, 0, "{out}");
    for want in [
        "a  ",
        "b  ",
        "node rank 1 of 2",
        "ready: a completion came back through rank 0",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert_eq!(
        f.agents[1]
            .server()
            .await?
            .flags
            .get("--warmup-ms")
            .map(String::as_str),
        Some("500")
    );
    let (code, out) = f.cli(&["list"]).await?;
    assert_eq!(code, 0);
    assert!(
        out.contains("dsv3") && out.contains("group") && out.contains("a, b"),
        "{out}"
    );
    // A name that is not one is refused, and nothing happens.
    let r = f.agents[1]
        .http
        .post(f.agents[1].url("/api/stop"))
        .header("x-drainwatch-for", "olga; DROP TABLE audit")
        .json(&json!({"generation": 0, "confirm": "sim"}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    assert_eq!(f.agents[1].server().await?.phase, Phase::Ready);
    Ok(())
}

#[tokio::test]
async fn workers_that_will_not_go_are_cleaned_on_their_node_before_anything_launches()
-> anyhow::Result<()> {
    for mode in ["orphan", "escape"] {
        let f = fleet(vec![("SIMSERVER_MODE", mode)]).await?;
        let r = f.run(json!({})).await?;
        assert_eq!(r.outcome, Outcome::Succeeded, "{mode}: {r:#?}");
        if mode == "escape" {
            // Its escapee appears a second after the server is warm.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
        }
        let r = f.run(json!({})).await?;
        assert_eq!(r.outcome, Outcome::Succeeded, "{mode}: {r:#?}");
        assert_ordered(&r);
        // Node b's agent stopped its leftovers itself; then every GPU of b
        // was proven idle before rank 0 launched on a.
        let verified_b = last(&r, 1, CoordStep::Verify).expect("b verified");
        let launch_a = first(&r, 0, CoordStep::Launch).expect("a launched");
        assert!(verified_b <= launch_a, "{mode}: {}", notes(&r, 1));
        // What holds memory on b now is its new server alone.
        let s = f.agents[1].state().await?;
        let sample = s.latest.expect("sample");
        for p in sample.processes.iter().filter(|p| !p.gpu_mem.is_empty()) {
            assert_eq!(p.role, shared::ProcessRole::Server, "{mode}: {p:#?}");
        }
        drop(f);
    }
    Ok(())
}

#[tokio::test]
async fn a_foreign_holder_on_one_node_fails_the_restart_naming_it_and_nothing_launches()
-> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    assert_eq!(f.run(json!({})).await?.outcome, Outcome::Succeeded);
    let gen_a = f.agents[0].server().await?.generation;
    let foreign = spawn_foreign(&f.hosts[1], 0, 2.0)?;
    seen_holding(&f.agents[1], foreign.pid()).await?;
    // Through the CLI: exit 28, naming the node.
    let (code, out) = f.cli(&["restart", "dsv3", "--yes"]).await?;
    assert_eq!(code, 28, "{out}");
    assert!(out.contains("FAILED on b"), "{out}");
    let r = f.list().await?.remove(0);
    assert_eq!(r.outcome, Outcome::Failed, "{r:#?}");
    // The hub's /metrics counts it, for the alert.
    let m = f
        .olga
        .get(format!("{}/metrics", f.hub))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    for want in [
        r#"drainwatch_hub_coordinated_total{target="dsv3",outcome="failed"} 1"#,
        r#"drainwatch_hub_coordinated_total{target="dsv3",outcome="succeeded"} 1"#,
        r#"drainwatch_hub_coordinated_total{target="dsv3",outcome="interrupted"} 0"#,
        r#"drainwatch_hub_agent_reachable{agent="b"} 1"#,
        "drainwatch_hub_coordinated_running 0",
    ] {
        assert!(m.contains(want), "{want}\n{m}");
    }
    assert!(
        f.victor
            .get(format!("{}/metrics", f.hub))
            .send()
            .await?
            .status()
            .is_success(),
        "a viewer's token may scrape"
    );
    assert_eq!(
        reqwest::get(format!("{}/metrics", f.hub)).await?.status(),
        401,
        "a stranger may not"
    );
    let failure = r.failure.clone().expect("a failure");
    assert_eq!(failure.member, "b");
    assert!(
        failure.reason.contains(&foreign.pid().to_string()),
        "{failure:?}"
    );
    // Nothing launched anywhere: a was drained and verified, then left stopped.
    for m in 0..2 {
        assert_eq!(first(&r, m, CoordStep::Launch), None, "{}", notes(&r, m));
    }
    assert!(notes(&r, 0).contains("nothing launched: node `b` is not clean"));
    let a = f.agents[0].server().await?;
    assert_eq!((a.phase, a.generation), (Phase::Stopped, gen_a));
    // The foreign process was never signalled (the host's trace checks it too).
    assert!(tests::alive(foreign.pid()));
    assert!(f.hosts[1].foreign_signals().is_empty());
    let held: u64 = simhost::observe(&f.hosts[1].path(), simhost::now_ms())?
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(|p| p.used_bytes))
        .sum();
    assert_eq!(
        held,
        2 * GIB,
        "only the foreign holder's memory is left on b"
    );
    Ok(())
}

#[tokio::test]
async fn a_node_that_cannot_launch_stops_and_verifies_the_other() -> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    // Something else listens on node b's server port: b cannot launch, and
    // rank 0 waits for a rank 1 that never joins.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", f.port_b))?;
    let r = f.run(json!({})).await?;
    assert_eq!(r.outcome, Outcome::Failed, "{r:#?}");
    let failure = r.failure.clone().expect("a failure");
    assert_eq!(failure.member, "b", "{r:#?}");
    assert!(failure.reason.starts_with("launch:"), "{failure:?}");
    // Rank 0 had launched; it was stopped (its warm-up cut short) and verified.
    assert!(first(&r, 0, CoordStep::Launch).is_some());
    let n = notes(&r, 0);
    assert!(n.contains("Unwind: stop #"), "{n}");
    assert!(n.contains("Unwind: verified"), "{n}");
    let a = f.agents[0].server().await?;
    assert_eq!(a.phase, Phase::Stopped, "{a:#?}");
    let start = r.members[0].agent_ops[0];
    let d = f.agents[0]
        .get_json(&format!("/api/restarts/{start}"))
        .await?;
    assert_eq!(d["summary"]["outcome"], "interrupted", "{d:#}");
    drop(squatter);
    Ok(())
}

/// Prefill, decode and router servers restarted in their declared order,
/// each with its own guarded restart; the first that fails stops the rest,
/// named.
#[tokio::test]
async fn a_deployment_restarts_in_its_declared_order_and_stops_at_the_first_failure()
-> anyhow::Result<()> {
    let names = ["prefill", "decode", "router"];
    let hosts = [SimHost::new(100), SimHost::new(100), SimHost::new(100)];
    let spec = || ServerSpec {
        tp: 2,
        warmup_ms: 200,
        verify: "3s",
        ..ServerSpec::default()
    };
    let mut agents = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let app = spawn_managed(host, &spec(), &["--bind", &format!("127.0.0.{}:0", i + 2)])?;
        app.start_server().await?;
        agents.push(app);
    }
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("fleet.toml");
    let mut text: String = names
        .iter()
        .zip(&agents)
        .map(|(n, a)| format!("[[agent]]\nname = \"{n}\"\nurl = \"{}\"\n", a.url("")))
        .collect();
    text.push_str("[[deployment]]\nname = \"pd\"\norder = [\"prefill\", \"decode\", \"router\"]\n");
    std::fs::write(&config, text)?;
    let (_hub, hub) = tests::spawn_hub(&config)?;
    let http = reqwest::Client::new();
    let run = || async {
        let r = http
            .post(format!("{hub}/api/groups/pd/restart"))
            .json(&json!({"confirm": "pd"}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 202, "{}", r.text().await?);
        let id = r.json::<Value>().await?["id"].as_i64().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let rec: CoordRecord = http
                .get(format!("{hub}/api/coordinated/{id}"))
                .send()
                .await?
                .json()
                .await?;
            if rec.outcome != Outcome::Running {
                return anyhow::Ok(rec);
            }
            anyhow::ensure!(Instant::now() < deadline, "{rec:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // A deployment takes no flags: each member keeps its own.
    let r = http
        .post(format!("{hub}/api/groups/pd/restart"))
        .json(&json!({"confirm": "pd", "flags": {"--tp": "1"}}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);

    async fn gens(agents: &[TestApp]) -> anyhow::Result<Vec<u64>> {
        let mut g = Vec::new();
        for a in agents {
            g.push(a.server().await?.generation);
        }
        Ok(g)
    }
    let before = gens(&agents).await?;
    let r = run().await?;
    assert_eq!(r.outcome, Outcome::Succeeded, "{r:#?}");
    // In order: each member ready before the next began.
    for m in 0..2 {
        let ready = first(&r, m, CoordStep::Ready).expect("ready");
        let next = first(&r, m + 1, CoordStep::Launch).expect("began");
        assert!(ready <= next, "{r:#?}");
    }
    let after = gens(&agents).await?;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(*a, b + 1);
    }
    // Each member's own restart was the agent's guarded one, to a completion.
    for (m, app) in agents.iter().enumerate() {
        let op = r.members[m].agent_ops[0];
        let d = app.get_json(&format!("/api/restarts/{op}")).await?;
        assert_eq!(d["summary"]["kind"], "restart");
        assert_eq!(d["summary"]["outcome"], "succeeded");
    }

    // Decode's GPUs are held by someone else: prefill restarts, decode fails
    // (its agent drains it and will not launch onto held memory), router is
    // not touched.
    let foreign = spawn_foreign(&hosts[1], 0, 1.0)?;
    seen_holding(&agents[1], foreign.pid()).await?;
    let r = run().await?;
    assert_eq!(r.outcome, Outcome::Failed, "{r:#?}");
    let failure = r.failure.clone().expect("failure");
    assert_eq!(failure.member, "decode");
    assert!(
        failure.reason.contains(&foreign.pid().to_string()),
        "{failure:?}"
    );
    let last = gens(&agents).await?;
    assert_eq!(last[0], after[0] + 1, "prefill restarted");
    assert_eq!(last[2], after[2], "router untouched");
    assert!(r.members[2].events.is_empty(), "{r:#?}");
    assert!(tests::alive(foreign.pid()));
    Ok(())
}

/// A node that cannot be reached is refused, naming it, before anything is
/// recorded or stopped anywhere.
#[tokio::test]
async fn a_node_that_is_not_fit_is_refused_before_anything_stops() -> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    assert_eq!(f.run(json!({})).await?.outcome, Outcome::Succeeded);
    let gen_a = f.agents[0].server().await?.generation;
    // Node b's drainwatch is gone (its server runs on, unwatched).
    tests::signal(f.agents[1].proc.pid(), libc::SIGKILL);
    let before = f.list().await?.len();
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 502, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("`b` cannot be reached"),
        "{body}"
    );
    assert_eq!(f.list().await?.len(), before, "nothing recorded");
    let a = f.agents[0].server().await?;
    assert_eq!((a.phase, a.generation), (Phase::Ready, gen_a));
    Ok(())
}

/// A hub asked to stop while a coordinated restart runs lets it end (a
/// group half launched hangs), then stops; its record says so when it is
/// back.
#[tokio::test]
async fn a_stopping_hub_lets_the_coordinated_restart_in_flight_end() -> anyhow::Result<()> {
    let f = fleet(Vec::new()).await?;
    let (code, body) = f.ask(&f.olga, json!({"confirm": "dsv3"})).await?;
    assert_eq!(code, 202, "{body}");
    let id = body["id"].as_i64().unwrap_or_default();
    tests::signal(f._hub.pid(), libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tests::alive(f._hub.pid()) {
        anyhow::ensure!(Instant::now() < deadline, "the hub did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for a in &f.agents {
        assert_eq!(a.server().await?.phase, Phase::Ready);
    }
    // Back on the same records: the restart ended well, not interrupted.
    let config = f._dir.path().join("fleet.toml");
    let auth = f._dir.path().join("auth.toml");
    let (_hub, hub) =
        tests::spawn_hub_with(&config, &["--auth", auth.to_str().expect("utf-8 path")])?;
    let r: CoordRecord = f
        .olga
        .get(format!("{hub}/api/coordinated/{id}"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(r.outcome, Outcome::Succeeded, "{r:#?}");
    Ok(())
}
