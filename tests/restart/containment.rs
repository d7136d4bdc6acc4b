//! Containment: each launch in a cgroup v2 leaf of drainwatch's, signals only
//! through proof (pidfds, the leader's pidfd for the group, `cgroup.kill` for
//! the leaf), an adopted server's group never signalled, and a visible fallback
//! where cgroups cannot be had. The simulated host's signal trace (checked
//! when each test's host is dropped) proves no stranger got a signal; these
//! tests also check the strangers themselves.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use shared::restart::{ContainmentKind, Origin, Phase};
use tests::managed::{ServerSpec, notes, spawn_managed};
use tests::{GIB, Proc, SimHost, TestApp, alive, spawn_foreign};

const T: Duration = Duration::from_secs(40);

/// The cgroup v2 path of `pid`, as `/proc/<pid>/cgroup` names it.
fn cgroup_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
}

/// `pid` and its descendants now.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    all.extend(simhost::descendants(pid).iter().map(|d| d.pid));
    all
}

async fn confirmed(app: &TestApp, path: &str, extra: Value) -> anyhow::Result<()> {
    let g = app.server().await?.generation;
    let mut body = json!({"generation": g, "confirm": "sim"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (code, reply) = app.post(path, &body).await?;
    anyhow::ensure!(code == 202, "{path} refused: {code} {reply}");
    Ok(())
}

async fn restart_into(app: &TestApp, mode: &str) -> anyhow::Result<Value> {
    let id = app.restart(json!({"SIMSERVER_MODE": mode})).await?;
    let d = app.finished_restart(id, T).await?;
    anyhow::ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
    Ok(d)
}

/// The newest restart record.
async fn newest(app: &TestApp) -> anyhow::Result<Value> {
    let list = app.get_json("/api/restarts").await?;
    let id = list[0]["id"].as_i64().context("a restart")?;
    app.finished_restart(id, T).await
}

/// Waits until `what` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + T;
    while !f() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// What processes of roster `role` (launched by drainwatch) exist or existed.
fn enlisted(host: &SimHost, role: &str) -> Vec<simhost::Enlisted> {
    simhost::roster(&host.path())
        .into_iter()
        .filter(|e| e.role == role && e.owner.as_deref() == Some("drainwatch"))
        .collect()
}

fn lives(e: &simhost::Enlisted) -> bool {
    simhost::read_proc_stat(e.pid)
        .ok()
        .flatten()
        .is_some_and(|s| s.start_ticks == e.start_ticks && !s.has_exited())
}

/// Memory the host shows for `pid`, in bytes, over all GPUs.
fn held_by(host: &SimHost, pid: u32) -> u64 {
    simhost::observe(&host.path(), simhost::now_ms())
        .map(|v| {
            v.gpus
                .iter()
                .flat_map(|g| g.processes.iter())
                .filter(|p| p.pid == pid)
                .map(|p| p.used_bytes)
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_launched_server_runs_in_a_cgroup_leaf_of_its_own_and_a_stop_empties_it()
-> anyhow::Result<()> {
    let host = SimHost::new(200);
    let cg = host.require_cgroup();
    let decoy = spawn_foreign(&host, 6, 1.0)?;
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    let s = app.start_server().await?;

    let c = s.containment.clone().context("containment")?;
    assert_eq!(c.kind, ContainmentKind::Cgroup, "{c:?}");
    assert_eq!(c.cgroup.as_deref(), Some(cg.name().as_str()));
    assert!(c.pidfd && c.reason.is_none(), "{c:?}");
    let leaf = s.server_cgroup.clone().context("the server's cgroup")?;
    assert_eq!(
        leaf,
        format!("{}/server-{}-{}", cg.name(), s.port, s.generation)
    );
    assert!(s.server_contained);
    assert_eq!(s.origin, Some(Origin::Launched));
    // drainwatch moved itself into a leaf of its own: servers are its siblings.
    assert_eq!(
        cgroup_of(app.proc.pid()),
        Some(format!("{}/supervisor", cg.name()))
    );
    let root = s.root.context("root")?.pid;
    let server = tree(root);
    assert_eq!(server.len(), 5, "launcher and 4 workers: {server:?}");
    for pid in &server {
        assert_eq!(cgroup_of(*pid).as_deref(), Some(leaf.as_str()), "pid {pid}");
    }
    assert_ne!(cgroup_of(decoy.pid()).as_deref(), Some(leaf.as_str()));

    confirmed(&app, "/api/stop", json!({})).await?;
    app.wait_phase(Phase::Stopped, T).await?;
    let d = newest(&app).await?;
    assert_eq!(d["summary"]["kind"], "stop", "{d}");
    assert_eq!(d["containment"], format!("cgroup {leaf}"), "{d}");
    assert!(
        notes(&d).contains(&format!("in cgroup {leaf}; cgroup.kill ends the stop")),
        "{}",
        notes(&d)
    );
    for pid in &server {
        assert!(!alive(*pid), "server process {pid} survived the stop");
    }
    // Each of the server's processes got exactly one SIGTERM (a second one
    // means "quit now" to some servers), and nothing else got one.
    let mut terms: Vec<u32> = host
        .signals_sent()
        .iter()
        .filter(|s| s.sig == libc::SIGTERM)
        .map(|s| s.target)
        .collect();
    terms.sort_unstable();
    let mut want = server.clone();
    want.sort_unstable();
    assert_eq!(terms, want, "SIGTERMs sent");
    until("the empty leaf to be removed", || {
        !cg.dir_of(&leaf).exists()
    })
    .await?;
    assert!(alive(decoy.pid()), "the look-alike was touched");
    Ok(())
}

#[tokio::test]
async fn an_adopted_server_is_never_signalled_by_its_group_even_after_drainwatch_restarts()
-> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec::default();
    // A shell's group: the server, and a sleep that is none of its business.
    let sh = host.shell_with_server(spec.port)?;
    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.wait_adoptable(T).await?;
    let launcher = s.adoptable.context("adoptable")?.pid;
    let sleep = simhost::descendants(sh.pid())
        .into_iter()
        .find(|d| d.ppid == sh.pid() && d.pid != launcher)
        .context("the shell's sleep")?
        .pid;
    host.allow_signals_to(launcher);
    confirmed(&app, "/api/adopt", json!({})).await?;
    let adopted = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(adopted.origin, Some(Origin::Adopted));
    assert!(!adopted.server_contained, "moved without being asked");
    assert_eq!(adopted.server_cgroup, cgroup_of(launcher));
    let server = tree(launcher);

    // drainwatch dies and comes back: the record says the server was adopted.
    app.proc.kill_alone();
    let app = spawn_managed(&host, &spec, &[])?;
    let again = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(again.root, adopted.root);
    assert_eq!(again.origin, Some(Origin::Adopted));

    confirmed(&app, "/api/stop", json!({})).await?;
    app.wait_phase(Phase::Stopped, T).await?;
    for pid in &server {
        assert!(!alive(*pid), "server process {pid} survived the stop");
    }
    assert!(alive(sleep), "the shell's sleep was signalled");
    assert!(alive(sh.pid()), "the shell was signalled");
    let d = newest(&app).await?;
    assert!(
        notes(&d).contains("never its process group"),
        "{}",
        notes(&d)
    );
    assert!(
        d["containment"]
            .as_str()
            .is_some_and(|c| c.starts_with("adopted, in cgroup")
                && c.ends_with("(not drainwatch's): only its tracked processes are signalled")),
        "{d}"
    );
    Ok(())
}

/// Spawns `sleep` as a group leader with exactly `pid` (the kernel hands out
/// `ns_last_pid + 1` next; other processes may fork in between, so try again).
fn take_pid(pid: u32) -> anyhow::Result<Proc> {
    for _ in 0..500 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .context("setting ns_last_pid (needs root)")?;
        let p = Proc::spawn(Command::new("sleep").arg("60"))?;
        if p.pid() == pid {
            return Ok(p);
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        bail!("pid {pid} was taken by someone else");
    }
    bail!("could not get pid {pid}")
}

/// Whether any process is in process group `pgid` or session `pgid`.
fn number_in_use(pgid: i32) -> bool {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| simhost::read_proc_stat(p).ok().flatten())
                .any(|s| s.pid as i32 == pgid || s.pgid == pgid)
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_group_whose_leader_was_reaped_is_never_signalled_by_its_number() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let spec = ServerSpec {
        drain: "8s",
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    restart_into(&app, "orphan").await?;
    let root = app.server().await?.root.context("root")?.pid;

    // The leftover ignores SIGTERM: the drain runs its 8 s. Meanwhile the old
    // root is reaped, its group empties, and a stranger takes the number.
    let id = app.restart(json!({"SIMSERVER_MODE": "normal"})).await?;
    until("the old group to empty", || !number_in_use(root as i32)).await?;
    let stranger = take_pid(root)?;
    assert_eq!(
        simhost::read_proc_stat(stranger.pid())?.map(|s| s.pgid),
        Some(root as i32)
    );
    let d = app.finished_restart(id, T).await?;
    assert_eq!(d["summary"]["outcome"], "succeeded", "{d}");
    assert!(
        d["markers"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["kind"] == "sigkill")),
        "the drain was meant to end in SIGKILL: {d}"
    );
    assert!(
        alive(stranger.pid()),
        "the group's old number was signalled"
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_that_escapes_while_drainwatch_is_down_is_caught_by_the_cgroup()
-> anyhow::Result<()> {
    let host = SimHost::new(200);
    host.require_cgroup();
    let decoy = spawn_foreign(&host, 6, 1.0)?;
    let spec = ServerSpec::default();
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    restart_into(&app, "escape=1500").await?;
    let before = app.server().await?;
    let root = before.root.context("root")?.pid;
    let old = tree(root);
    // drainwatch dies; 1.5 s after warming up, rank 0 setsids and double-forks.
    app.proc.kill_alone();
    until("the escape", || {
        enlisted(&host, "escapee").iter().any(lives)
    })
    .await?;
    let escapee = enlisted(&host, "escapee")
        .into_iter()
        .find(lives)
        .context("escapee")?;
    until("the escapee's memory", || {
        held_by(&host, escapee.pid) == 4 * GIB
    })
    .await?;
    assert!(
        !tree(root).contains(&escapee.pid),
        "the escapee is still the server's descendant"
    );

    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(s.root, before.root);
    restart_into(&app, "normal").await?;
    assert!(!lives(&escapee), "the escapee survived the restart");
    assert_eq!(
        held_by(&host, escapee.pid),
        0,
        "the escapee's memory is held"
    );
    for pid in &old {
        assert!(!alive(*pid), "process {pid} of the old server survived");
    }
    assert!(alive(decoy.pid()), "the look-alike was touched");
    Ok(())
}

#[tokio::test]
async fn children_spawned_during_the_drain_are_all_contained() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    host.require_cgroup();
    let decoy = spawn_foreign(&host, 6, 1.0)?;
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    app.start_server().await?;
    restart_into(&app, "fork-bomb-lite").await?;
    let old = tree(app.server().await?.root.context("root")?.pid);
    restart_into(&app, "normal").await?;
    let spawned = enlisted(&host, "spawnling");
    assert!(
        spawned.len() >= 10,
        "the burst spawned only {} children",
        spawned.len()
    );
    let left: Vec<u32> = spawned.iter().filter(|e| lives(e)).map(|e| e.pid).collect();
    assert!(left.is_empty(), "children of the drain survived: {left:?}");
    for pid in &old {
        assert!(!alive(*pid), "process {pid} of the old server survived");
    }
    assert!(alive(decoy.pid()), "the look-alike was touched");
    Ok(())
}

#[tokio::test]
async fn without_room_for_cgroups_restarts_fall_back_to_the_process_group_and_say_so()
-> anyhow::Result<()> {
    let host = SimHost::new(200).without_cgroup_room();
    host.require_cgroup();
    let decoy = spawn_foreign(&host, 6, 1.0)?;
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    let s = app.start_server().await?;
    let c = s.containment.clone().context("containment")?;
    assert_eq!(c.kind, ContainmentKind::ProcessGroup, "{c:?}");
    let reason = c.reason.clone().context("a reason")?;
    assert!(reason.contains("cannot create the cgroup"), "{reason}");
    assert_eq!(s.server_cgroup, None);
    assert!(!s.server_contained);

    let d = restart_into(&app, "orphan").await?;
    assert_eq!(d["containment"].as_str(), Some(c.summary().as_str()), "{d}");
    assert!(
        d["containment"]
            .as_str()
            .is_some_and(|t| t.starts_with("process group only (cannot create the cgroup")),
        "{d}"
    );
    // The fallback still finds the orphan (it re-parents to drainwatch).
    let old = tree(app.server().await?.root.context("root")?.pid);
    restart_into(&app, "normal").await?;
    for pid in &old {
        assert!(!alive(*pid), "process {pid} of the old server survived");
    }
    assert!(alive(decoy.pid()), "the look-alike was touched");

    // Said where people look: `drainwatch status`.
    let text = app.status_text().await?;
    assert!(
        text.contains("process group only (cannot create the cgroup"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn an_adopted_server_moves_into_drainwatchs_cgroup_only_when_asked() -> anyhow::Result<()> {
    let host = SimHost::new(200);
    let cg = host.require_cgroup();
    let spec = ServerSpec::default();
    let by_hand = tests::SimServer::launch_on(&host, spec.port, 2, 300)?;
    host.allow_signals_to(by_hand.proc.pid());
    let app = spawn_managed(&host, &spec, &[])?;
    app.wait_adoptable(T).await?;
    // A stop cannot ask for it.
    let g = app.server().await?.generation;
    let (code, body) = app
        .post(
            "/api/stop",
            &json!({"generation": g, "confirm": "sim", "contain": true}),
        )
        .await?;
    assert_eq!(code, 400, "{body}");

    confirmed(&app, "/api/adopt", json!({"contain": true})).await?;
    let s = app.wait_phase(Phase::Ready, T).await?;
    assert_eq!(s.origin, Some(Origin::Adopted));
    assert!(s.server_contained);
    let leaf = s.server_cgroup.clone().context("cgroup")?;
    assert!(
        leaf.starts_with(&format!("{}/server-", cg.name())),
        "{leaf}"
    );
    let server = tree(by_hand.proc.pid());
    for pid in &server {
        assert_eq!(cgroup_of(*pid).as_deref(), Some(leaf.as_str()), "pid {pid}");
    }
    confirmed(&app, "/api/stop", json!({})).await?;
    app.wait_phase(Phase::Stopped, T).await?;
    for pid in &server {
        assert!(!alive(*pid), "process {pid} survived the stop");
    }
    Ok(())
}

/// The owner of `pid` (its real uid).
fn uid_of(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// drainwatch as a service user that owns a delegated cgroup (systemd's
/// `Delegate=yes`), not root: it launches its server as itself, in a leaf of
/// its own, and a restart through an orphaning server drains, verifies and
/// relaunches with nothing of the old server left and no stranger touched.
#[tokio::test]
async fn a_service_user_with_a_delegated_cgroup_launches_drains_and_restarts() -> anyhow::Result<()>
{
    let host = SimHost::new(200).as_service_user()?;
    let user = host.user().context("a service user")?;
    assert_ne!(user, 0);
    let cg = host.require_cgroup();
    let decoy = spawn_foreign(&host, 6, 1.0)?;
    let app = spawn_managed(&host, &ServerSpec::default(), &[])?;
    assert_eq!(uid_of(app.proc.pid()), Some(user));
    let s = app.start_server().await?;

    let c = s.containment.clone().context("containment")?;
    assert_eq!(c.kind, ContainmentKind::Cgroup, "{c:?}");
    assert_eq!(c.cgroup.as_deref(), Some(cg.name().as_str()));
    assert_eq!(
        cgroup_of(app.proc.pid()),
        Some(format!("{}/supervisor", cg.name()))
    );
    let leaf = s.server_cgroup.clone().context("the server's cgroup")?;
    let old = tree(s.root.context("root")?.pid);
    for pid in &old {
        assert_eq!(uid_of(*pid), Some(user), "pid {pid} is not the user's");
        assert_eq!(cgroup_of(*pid).as_deref(), Some(leaf.as_str()), "pid {pid}");
    }

    restart_into(&app, "orphan").await?;
    restart_into(&app, "normal").await?;
    for pid in &old {
        assert!(!alive(*pid), "process {pid} of the first server survived");
    }
    assert!(alive(decoy.pid()), "the look-alike was touched");

    // Nothing it would need root for is missing from what it says.
    let text = app.status_text().await?;
    assert!(text.contains(&format!("cgroup {}", cg.name())), "{text}");
    Ok(())
}

/// A service user without CAP_KILL cannot signal a server root started, nor
/// see its sockets: it says so where containment is shown, and refuses to
/// adopt it (409, saying why) rather than take on a server it could never
/// stop.
#[tokio::test]
async fn a_service_user_refuses_to_adopt_a_server_of_another_user() -> anyhow::Result<()> {
    let host = SimHost::new(200).as_service_user()?;
    let user = host.user().context("a service user")?;
    let spec = ServerSpec::default();
    let by_hand = tests::SimServer::launch_on(&host, spec.port, 2, 300)?;
    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.server().await?;
    let c = s.containment.clone().context("containment")?;
    assert!(
        (c.fallbacks.iter()).any(|f| f.contains(&format!("runs as uid {user} without CAP_KILL"))),
        "{c:?}"
    );
    let (code, body) = app
        .post(
            "/api/adopt",
            &json!({"generation": s.generation, "confirm": "sim"}),
        )
        .await?;
    assert_eq!(code, 409, "{body}");
    let text = body.to_string();
    assert!(
        text.contains(&format!(
            "a process drainwatch cannot see listens on port {}",
            spec.port
        )),
        "{text}"
    );
    assert!(
        alive(by_hand.proc.pid()),
        "the hand-started server was touched"
    );
    assert_eq!(app.server().await?.origin, None);
    Ok(())
}
