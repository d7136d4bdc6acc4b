//! The restart and containment paths on the kernels GPU hosts run: every
//! drainwatch of these tests runs under `kernelsim`, which answers its system
//! calls, cgroupfs files and mounts as 5.14 (to 6.8), 5.10 and 4.18 do, and
//! 4.18 with cgroup v1 alone (see `tests/src/kernels.rs`). In each set the
//! same things run: the misbehaving servers (ignore SIGTERM, an orphan, a
//! slow drain, OOM, a crash, hanging completions), a worker that escapes, a
//! fork burst during the drain, adoption across a drainwatch restart, and
//! drainwatch SIGKILLed mid-restart.
//!
//! By the host's own truth (its roster and its GPU memory, not drainwatch's
//! word) nothing of an old generation is left after the next restart, and
//! the foreign decoy is untouched; the kernel's signal trace, checked when
//! each test's host is dropped, proves that nothing foreign was signalled.
//! What a weaker containment cannot catch (an escapee outside the group
//! without cgroups) is not claimed drained: verification by GPU memory names
//! it and nothing is launched.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use shared::restart::{ContainmentKind, Origin, Phase};
use simhost::Enlisted;
use tests::kernels::Kernel;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{GIB, Proc, SimHost, TestApp, spawn_foreign};

const T: Duration = Duration::from_secs(40);

/// A host whose drainwatch runs as `kernel`; the test's own cgroup holds
/// everything, so whatever a test leaves is killed when it ends.
fn host(kernel: Kernel) -> SimHost {
    let host = SimHost::new(200).on_kernel(kernel);
    host.require_cgroup();
    host
}

fn spec() -> ServerSpec {
    ServerSpec {
        drain: "3s",
        warmup_timeout: "10s",
        ..ServerSpec::default()
    }
}

/// The foreign decoy on GPU 6 (1 GiB), as `/proc` shows it.
fn decoy(host: &SimHost) -> anyhow::Result<(Proc, simhost::ProcStat)> {
    let p = spawn_foreign(host, 6, 1.0)?;
    let stat = simhost::read_proc_stat(p.pid())?.context("the decoy's /proc entry")?;
    Ok((p, stat))
}

fn lives(pid: u32, start_ticks: u64) -> bool {
    simhost::read_proc_stat(pid)
        .ok()
        .flatten()
        .is_some_and(|s| s.start_ticks == start_ticks && !s.has_exited())
}

/// Every process drainwatch's servers started (by the host's roster) that
/// lives now.
fn ours_alive(host: &SimHost) -> Vec<Enlisted> {
    simhost::roster(&host.path())
        .into_iter()
        .filter(|e| e.owner.as_deref() == Some("drainwatch") && lives(e.pid, e.start_ticks))
        .collect()
}

/// `pid` and its descendants now.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    all.extend(simhost::descendants(pid).iter().map(|d| d.pid));
    all
}

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

/// By the host's truth: every live process of ours belongs to the running
/// generation, only it and the decoy hold GPU memory (the memory of the
/// exited is let go within the host's release delay), and the decoy is the
/// same live process holding its 1 GiB on GPU 6.
async fn only_the_new_generation(
    host: &SimHost,
    app: &TestApp,
    decoy: &simhost::ProcStat,
) -> anyhow::Result<()> {
    let root = app.server().await?.root.context("a running server")?;
    let deadline = Instant::now() + T;
    loop {
        let now = tree(root.pid);
        let strays: Vec<Enlisted> = ours_alive(host)
            .into_iter()
            .filter(|e| !now.contains(&e.pid))
            .collect();
        let foreign_mem: Vec<(usize, u32, u64)> = host
            .held()?
            .into_iter()
            .filter(|(_, pid, _)| *pid != decoy.pid && !now.contains(pid))
            .collect();
        if strays.is_empty() && foreign_mem.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "left of an old generation: alive {strays:?}, holding memory {foreign_mem:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ensure!(
        lives(decoy.pid, decoy.start_ticks),
        "the foreign decoy {} is gone",
        decoy.pid
    );
    let mine: Vec<(usize, u64)> = host
        .held()?
        .iter()
        .filter(|h| h.1 == decoy.pid)
        .map(|h| (h.0, h.2))
        .collect();
    ensure!(
        mine == vec![(6_usize, GIB)],
        "the decoy holds {mine:?}, not its 1 GiB on GPU 6"
    );
    Ok(())
}

/// `/api/state`, the restart records and `drainwatch status` say what this
/// kernel lacks and what drainwatch does instead.
async fn says_what_it_lacks(app: &TestApp, kernel: Kernel) -> anyhow::Result<()> {
    let s = app.server().await?;
    let c = s
        .containment
        .clone()
        .context("no containment in the status")?;
    if kernel.cgroup2() {
        ensure!(c.kind == ContainmentKind::Cgroup, "{c:?}");
    } else {
        ensure!(
            c.kind == ContainmentKind::ProcessGroup
                && c.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("cgroup v1 only")),
            "{c:?}"
        );
    }
    ensure!(c.pidfd == kernel.pidfds(), "{c:?}");
    if !kernel.pidfds() {
        ensure!(
            c.pidfd_reason
                .as_deref()
                .is_some_and(|r| r.contains("pidfd_open")),
            "{c:?}"
        );
    }
    let says = |text: &str| c.fallbacks.iter().any(|f| f.contains(text));
    ensure!(
        says("no group signals through a pidfd (Linux < 6.9)"),
        "{c:?}"
    );
    match kernel {
        Kernel::V5_10 => ensure!(
            says("no cgroup.kill (Linux < 5.14): a leaf is emptied by freezing it"),
            "{c:?}"
        ),
        Kernel::V4_18 => ensure!(says("no cgroup.kill nor cgroup.freeze"), "{c:?}"),
        Kernel::V5_14 | Kernel::V4_18CgroupV1 => ensure!(!says("cgroup.kill"), "{c:?}"),
    }
    // The CLI's status line is the same.
    let text = app.status_text().await?;
    ensure!(
        text.contains("no group signals through a pidfd (Linux < 6.9)"),
        "`drainwatch status` does not name the fallback:\n{text}"
    );
    Ok(())
}

/// A restart where the server runs, a start where it does not, into `mode`;
/// the record once finished.
async fn bring_up(app: &TestApp, mode: &str) -> anyhow::Result<Value> {
    let s = app.server().await?;
    let path = if s.phase == Phase::Ready {
        "/api/restart"
    } else {
        "/api/start"
    };
    let (code, body) = app
        .post(
            path,
            &json!({
                "generation": s.generation,
                "flags": {"SIMSERVER_MODE": mode},
                "confirm": "sim",
            }),
        )
        .await?;
    ensure!(code == 202, "{path} refused: {code} {body}");
    let id = body["id"].as_i64().context("an id")?;
    app.finished_restart(id, T).await
}

fn outcome(d: &Value) -> &str {
    d["summary"]["outcome"].as_str().unwrap_or("?")
}

/// A server misbehaving as `mode`, then a restart into a normal one.
async fn misbehaving(kernel: Kernel, mode: &str) -> anyhow::Result<()> {
    let host = host(kernel);
    let (_decoy, decoy) = decoy(&host)?;
    let app = spawn_managed(&host, &spec(), &[])?;
    says_what_it_lacks(&app, kernel).await?;
    app.start_server().await?;

    let d = bring_up(&app, mode).await?;
    let (want, cause) = match mode {
        "oom" => ("failed", Some("oom")),
        "hang-completions" => ("failed", Some("warmup_timeout")),
        _ => ("succeeded", None),
    };
    ensure!(outcome(&d) == want, "into {mode}: {d}");
    if let Some(cause) = cause {
        ensure!(d["summary"]["failure"]["cause"] == cause, "{d}");
    }
    if mode.starts_with("crash") {
        app.wait_phase(Phase::Crashed, T).await?;
    }
    if mode.starts_with("escape") {
        until("the escapee and its 4 GiB", || {
            ours_alive(&host).iter().any(|e| {
                e.role == "escapee"
                    && host
                        .held()
                        .is_ok_and(|h| h.iter().any(|x| x.1 == e.pid && x.2 == 4 * GIB))
            })
        })
        .await?;
    }
    if mode == "orphan" {
        until("the orphan", || {
            ours_alive(&host).iter().any(|e| e.role == "foreign")
        })
        .await?;
    }

    let d = bring_up(&app, "normal").await?;
    ensure!(outcome(&d) == "succeeded", "out of {mode}: {d}");
    if mode == "fork-bomb-lite" {
        let spawned = simhost::roster(&host.path())
            .into_iter()
            .filter(|e| e.role == "spawnling")
            .count();
        ensure!(spawned >= 10, "the burst spawned only {spawned} children");
    }
    only_the_new_generation(&host, &app, &decoy).await
}

/// drainwatch takes over a server a shell started, dies, comes back, and
/// stops it: the server's processes end, the shell's own do not.
async fn adoption_across_a_drainwatch_restart(kernel: Kernel) -> anyhow::Result<()> {
    let host = host(kernel);
    let (_decoy, decoy) = decoy(&host)?;
    let spec = spec();
    let sh = host.shell_with_server(spec.port)?;
    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.wait_adoptable(T).await?;
    let launcher = s.adoptable.context("adoptable")?.pid;
    let sleep = simhost::descendants(sh.pid())
        .into_iter()
        .find(|d| d.ppid == sh.pid() && d.pid != launcher)
        .context("the shell's sleep")?;
    host.allow_signals_to(launcher);
    let g = app.server().await?.generation;
    let (code, body) = app
        .post("/api/adopt", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    ensure!(code == 202, "adopt refused: {code} {body}");
    let adopted = app.wait_phase(Phase::Ready, T).await?;
    ensure!(adopted.origin == Some(Origin::Adopted));
    let server = tree(launcher);

    app.proc.kill_alone();
    let app = spawn_managed(&host, &spec, &[])?;
    let again = app.wait_phase(Phase::Ready, T).await?;
    ensure!(again.root == adopted.root, "not the same server");

    let g = again.generation;
    let (code, body) = app
        .post("/api/stop", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    ensure!(code == 202, "stop refused: {code} {body}");
    app.wait_phase(Phase::Stopped, T).await?;
    for pid in &server {
        ensure!(
            !tests::alive(*pid),
            "server process {pid} survived the stop"
        );
    }
    ensure!(
        lives(sleep.pid, sleep.start_ticks),
        "the shell's sleep was signalled"
    );
    ensure!(tests::alive(sh.pid()), "the shell was signalled");
    ensure!(lives(decoy.pid, decoy.start_ticks), "the decoy is gone");
    Ok(())
}

/// drainwatch is SIGKILLed while a restart drains a server whose workers
/// outlive their root; the next drainwatch finds what is left as its own,
/// and a start drains it, verifies and launches.
async fn sigkill_mid_restart(kernel: Kernel) -> anyhow::Result<()> {
    let host = host(kernel);
    let (_decoy, decoy) = decoy(&host)?;
    let spec = ServerSpec {
        drain: "10s",
        ..spec()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let d = bring_up(&app, "slow-teardown=2500").await?;
    ensure!(outcome(&d) == "succeeded", "{d}");
    let id = app.restart(json!({"SIMSERVER_MODE": "normal"})).await?;
    let deadline = Instant::now() + T;
    while app.server().await?.phase != Phase::Draining {
        ensure!(Instant::now() < deadline, "the drain never began");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.proc.kill_alone();

    let app = spawn_managed(&host, &spec, &[])?;
    let d = app.finished_restart(id, T).await?;
    ensure!(outcome(&d) == "interrupted", "{d}");
    let d = bring_up(&app, "normal").await?;
    ensure!(outcome(&d) == "succeeded", "{d}");
    only_the_new_generation(&host, &app, &decoy).await
}

/// A worker escapes (new session, double fork) while drainwatch is down. With
/// cgroup v2 its leaf still holds it and the next restart ends it; with cgroup
/// v1 alone nothing proves it was the server's: the restart is not claimed
/// drained, verification by GPU memory names it, nothing is launched, and it
/// is never signalled.
async fn escape_while_drainwatch_is_down(kernel: Kernel) -> anyhow::Result<()> {
    let host = host(kernel);
    let (_decoy, decoy) = decoy(&host)?;
    let spec = spec();
    let app = spawn_managed(&host, &spec, &[])?;
    app.start_server().await?;
    let d = bring_up(&app, "escape=1500").await?;
    ensure!(outcome(&d) == "succeeded", "{d}");
    let before = app.server().await?;
    app.proc.kill_alone();
    until("the escapee and its 4 GiB", || {
        ours_alive(&host).iter().any(|e| {
            e.role == "escapee"
                && host
                    .held()
                    .is_ok_and(|h| h.iter().any(|x| x.1 == e.pid && x.2 == 4 * GIB))
        })
    })
    .await?;
    let escapee = ours_alive(&host)
        .into_iter()
        .find(|e| e.role == "escapee")
        .context("the escapee")?;

    let app = spawn_managed(&host, &spec, &[])?;
    let s = app.wait_phase(Phase::Ready, T).await?;
    ensure!(s.root == before.root, "not the same server");
    let d = bring_up(&app, "normal").await?;
    if kernel.cgroup2() {
        ensure!(outcome(&d) == "succeeded", "{d}");
        ensure!(
            !lives(escapee.pid, escapee.start_ticks),
            "the escapee survived"
        );
        return only_the_new_generation(&host, &app, &decoy).await;
    }
    ensure!(outcome(&d) == "failed", "claimed drained: {d}");
    let f = &d["summary"]["failure"];
    ensure!(f["kind"] == "foreign_holders", "{f}");
    ensure!(
        f["holders"].as_array().is_some_and(|h| h
            .iter()
            .any(|x| x["pid"] == escapee.pid && x["gpu_index"] == 0)),
        "the escapee is not named: {f}"
    );
    let launched = d["markers"]
        .as_array()
        .is_some_and(|m| m.iter().any(|x| x["kind"] == "launch"));
    ensure!(!launched, "launched onto the escapee's memory: {d}");
    ensure!(
        d["containment"]
            .as_str()
            .is_some_and(|c| c.contains("process group only")),
        "the record does not say how weak containment was: {d}"
    );
    ensure!(
        lives(escapee.pid, escapee.start_ticks),
        "the escapee was killed without proof it was ours"
    );
    Ok(())
}

/// Every scenario, once per kernel feature set.
macro_rules! on_kernel {
    ($set:ident, $kernel:expr) => {
        mod $set {
            use super::*;

            #[tokio::test]
            async fn ignore_sigterm() -> anyhow::Result<()> {
                misbehaving($kernel, "ignore-sigterm").await
            }

            #[tokio::test]
            async fn orphan() -> anyhow::Result<()> {
                misbehaving($kernel, "orphan").await
            }

            #[tokio::test]
            async fn slow_drain() -> anyhow::Result<()> {
                misbehaving($kernel, "slow-drain").await
            }

            #[tokio::test]
            async fn oom() -> anyhow::Result<()> {
                misbehaving($kernel, "oom").await
            }

            #[tokio::test]
            async fn crash() -> anyhow::Result<()> {
                misbehaving($kernel, "crash=6000").await
            }

            #[tokio::test]
            async fn hang_completions() -> anyhow::Result<()> {
                misbehaving($kernel, "hang-completions").await
            }

            #[tokio::test]
            async fn escape() -> anyhow::Result<()> {
                misbehaving($kernel, "escape=1500").await
            }

            #[tokio::test]
            async fn fork_bomb_lite() -> anyhow::Result<()> {
                misbehaving($kernel, "fork-bomb-lite").await
            }

            #[tokio::test]
            async fn adoption() -> anyhow::Result<()> {
                adoption_across_a_drainwatch_restart($kernel).await
            }

            #[tokio::test]
            async fn sigkill_of_drainwatch_mid_restart() -> anyhow::Result<()> {
                sigkill_mid_restart($kernel).await
            }

            #[tokio::test]
            async fn escape_while_drainwatch_is_down() -> anyhow::Result<()> {
                super::escape_while_drainwatch_is_down($kernel).await
            }
        }
    };
}

on_kernel!(linux_5_14, Kernel::V5_14);
on_kernel!(linux_5_10, Kernel::V5_10);
on_kernel!(linux_4_18, Kernel::V4_18);
on_kernel!(linux_4_18_cgroup_v1, Kernel::V4_18CgroupV1);

/// A leaf emptied without `cgroup.kill`, as 5.10 and 4.18 must
/// (`Leaf::sweep`): a shell forking `sleep`s as fast as it can is frozen and
/// killed to the last process; a process beside the leaf is untouched.
#[tokio::test]
async fn a_leaf_is_swept_empty_without_cgroup_kill() -> anyhow::Result<()> {
    use drainwatch::supervisor::cgroup::Leaf;
    use tests::cgroup::TestCgroup;
    let inside = TestCgroup::new(true)?;
    let beside = TestCgroup::new(true)?;
    let mut breeder = Command::new("sh");
    breeder.args(["-c", "while :; do sleep 30 & done"]);
    inside.place(&mut breeder)?;
    let _breeder = Proc::spawn(&mut breeder)?;
    let mut decoy = Command::new("sleep");
    decoy.arg("30");
    beside.place(&mut decoy)?;
    let decoy = Proc::spawn(&mut decoy)?;
    until("a leaf full of sleeps", || inside.procs().len() >= 50).await?;

    let leaf = Leaf::at(inside.dir.clone(), inside.name());
    leaf.sweep()?;
    ensure!(
        inside.procs().is_empty(),
        "left in the leaf: {:?}",
        inside.procs()
    );
    ensure!(
        tests::alive(decoy.pid()),
        "the process beside the leaf was killed"
    );
    Ok(())
}
