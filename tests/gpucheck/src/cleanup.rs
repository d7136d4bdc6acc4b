//! The end of every check, whatever happened before: the server stopped
//! through drainwatch, drainwatch stopped, and proof by PID and start time
//! that nothing of the check's is left running — its descendants (it is a
//! child subreaper), every server process drainwatch ever showed it, and on
//! a simulated host every process on the roster. What is found is a
//! failure; the check's own descendants among it are killed (by pidfd),
//! nothing else is signalled.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::check::{Session, Setup};
use crate::drainwatch::Api;
use crate::procs;
use crate::report::Report;

/// Stops the server if drainwatch still runs one, then drainwatch; then
/// finds, kills and records whatever of the check's is still alive.
pub(crate) async fn cleanup(s: &Setup, r: &mut Report, sess: &mut Session) {
    let mut k = json!({});
    if let Some(api) = &sess.api {
        if !r.passed()
            && let Ok(st) = api.state().await
        {
            // What gpuhog said (a CUDA error, say), as drainwatch's log tail has it.
            r.set("server_log_tail", st["server"]["log_tail"].clone());
        }
        k["server_stopped"] = json!(stop_server(api).await);
        k["server_processes_seen"] = json!(api.seen.lock().map_or(0, |v| v.len()));
    }
    if let Some(child) = sess.drainwatch.take() {
        k["drainwatch_exit"] = json!(stop_drainwatch(child).await);
    }
    if let Some(cg) = &sess.own_cgroup {
        k["cgroup_removed"] = json!(remove_cgroup(cg));
    }
    // What drainwatch's exit re-parented to us needs a moment to show.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut left = Vec::new();
    for p in procs::leftovers() {
        left.push(
            json!({"pid": p.pid, "start_ticks": p.start_ticks, "cmdline": procs::cmdline(p.pid)}),
        );
        let _ = procs::signal(p.pid, p.start_ticks, libc::SIGKILL);
    }
    let seen: Vec<(u32, u64)> = sess
        .api
        .as_ref()
        .and_then(|a| a.seen.lock().ok().map(|v| v.iter().copied().collect()))
        .unwrap_or_default();
    // Ours were among the descendants, killed above; anything else alive is
    // reported, never signalled (not provably the check's).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let alive: Vec<Value> = seen
        .into_iter()
        .filter(|(p, t)| procs::alive(*p, *t))
        .map(|(pid, start)| json!({"pid": pid, "start_ticks": start, "cmdline": procs::cmdline(pid)}))
        .collect();
    if let Some(sim) = &s.sim {
        let roster: Vec<Value> = sim
            .alive_on_roster()
            .into_iter()
            .map(|(pid, start, role)| json!({"pid": pid, "start_ticks": start, "role": role}))
            .collect();
        if !roster.is_empty() {
            r.fail(format!(
                "gpuhog processes were still alive on the simulated host: {roster:?}"
            ));
        }
        k["simulated_host_processes"] = json!(sim.enlisted());
        k["simulated_host_alive"] = json!(roster);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for p in simhost::descendants(std::process::id()) {
        procs::reap(p.pid);
    }
    if !left.is_empty() {
        r.fail(format!(
            "{} processes of the check's were still running at the end (killed)",
            left.len()
        ));
    }
    if !alive.is_empty() {
        r.fail(format!(
            "{} server processes were still alive at the end",
            alive.len()
        ));
    }
    if k["cgroup_removed"] == false {
        r.note("drainwatch's empty cgroup could not be removed");
    }
    if k["server_stopped"] == false {
        r.fail("the server could not be stopped through drainwatch");
    }
    k["left_running"] = json!(left);
    k["server_processes_alive"] = json!(alive);
    r.set("cleanup", k);
}

/// Stops a running server through the API; true when none runs at the end.
async fn stop_server(api: &Api) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    let settled = api
        .wait_state("the running operation to end", until, |st| {
            st["server"]["operation"].is_null()
        })
        .await;
    let Ok(st) = settled else { return false };
    if matches!(
        st["server"]["phase"].as_str(),
        Some("stopped" | "failed" | "crashed")
    ) {
        return true;
    }
    async {
        let id = api.operate("stop", None).await?;
        api.finished(id, until).await?;
        api.wait_phase("stopped", until).await
    }
    .await
    .is_ok()
}

/// Removes drainwatch's own cgroup `name` (from the hierarchy's root) and its
/// leaves once drainwatch has exited: rmdir takes only an empty cgroup, so
/// nothing that still holds a process is touched. Whether it is gone.
fn remove_cgroup(name: &str) -> bool {
    let Some(mount) = drainwatch::supervisor::cgroup::mount() else {
        return false;
    };
    let dir = mount.join(name.trim_start_matches('/'));
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten().filter(|e| e.path().is_dir()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
    std::fs::remove_dir(&dir).is_ok() || !dir.exists()
}

/// SIGTERM, then SIGKILL after 10 s; how it ended.
async fn stop_drainwatch(mut child: Child) -> String {
    let pid = child.id();
    if let Ok(Some(st)) = simhost::read_proc_stat(pid) {
        let _ = procs::signal(pid, st.start_ticks, libc::SIGTERM);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            return format!("exited on SIGTERM ({status})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    "killed: still running 10 s after SIGTERM".to_owned()
}
