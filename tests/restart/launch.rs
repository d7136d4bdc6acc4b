//! Launches and their logs: a port someone else holds fails the launch as
//! "port in use" (with a log tail, and nothing of the launch left running),
//! whether drainwatch sees the holder before launching or the server's own
//! bind fails; every launch writes its own log file, each record's log tail is
//! its own launch's, and old launch logs are pruned to the newest ones.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use serde_json::{Value, json};
use shared::restart::Phase;
use tests::managed::{ServerSpec, spawn_managed};
use tests::{SimHost, TestApp};

const T: Duration = Duration::from_secs(40);

/// The line the simulated server writes to its log as it starts: with the
/// time in ms and its warm-up, so it names one launch.
const STARTED: &str = "simserver: started at ";
/// What the simulated server logs when it is asked to stop.
const SIGTERM: &str = "simserver: SIGTERM at ";
const EXITING: &str = "simserver: exiting with code ";

/// How many launches' logs drainwatch keeps on disk: `KEEP_LOGS` in
/// `backend/src/supervisor/logs.rs` ("Launch logs kept on disk"; `prune`:
/// "Deletes all but the newest KEEP_LOGS launch logs").
const KEPT_LAUNCHES: usize = 20;

/// Stops the server and waits until it is stopped.
async fn stop(app: &TestApp) -> anyhow::Result<()> {
    let g = app.server().await?.generation;
    let (code, body) = app
        .post("/api/stop", &json!({"generation": g, "confirm": "sim"}))
        .await?;
    ensure!(code == 202, "stop refused: {code} {body}");
    app.wait_phase(Phase::Stopped, T).await?;
    Ok(())
}

/// A JSON list of log lines.
fn lines(v: &Value) -> anyhow::Result<Vec<String>> {
    v.as_array()
        .with_context(|| format!("not a list of lines: {v}"))?
        .iter()
        .map(|l| l.as_str().map(str::to_owned).context("a line"))
        .collect()
}

/// The one start line in `tail`: the launch it belongs to.
fn start_line(tail: &[String]) -> anyhow::Result<String> {
    let starts: Vec<&String> = tail.iter().filter(|l| l.starts_with(STARTED)).collect();
    ensure!(
        starts.len() == 1,
        "expected the start line of exactly one launch in the log tail: {tail:#?}"
    );
    Ok(starts[0].clone())
}

/// Holds a listening socket on `port` (retrying while the port is still
/// being let go by the server that just stopped).
async fn squat(port: u16) -> anyhow::Result<TcpListener> {
    let deadline = Instant::now() + T;
    loop {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return Ok(l),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("binding port {port}")),
        }
    }
}

/// The record `d` is a launch that failed because the port was in use, held
/// by `holder`; returns the failure's log tail.
fn failed_on_port(d: &Value, holder: u32) -> anyhow::Result<Vec<String>> {
    ensure!(
        d["summary"]["outcome"] == "failed",
        "the start onto a held port did not fail: {d}"
    );
    let f = &d["summary"]["failure"];
    ensure!(
        f["kind"] == "launch_failed" && f["cause"] == "port_in_use",
        "the failure is not classified as port in use: {f}"
    );
    ensure!(
        f["holder_pid"] == holder,
        "the port is held by pid {holder} (this test), the failure names {}: {f}",
        f["holder_pid"]
    );
    lines(&f["log_tail"])
}

/// The status after a failed launch: Failed, no root, the same classification.
async fn failed_status(app: &TestApp) -> anyhow::Result<()> {
    let s = app.wait_phase(Phase::Failed, T).await?;
    ensure!(
        s.root.is_none(),
        "a failed launch left a root: {:?}",
        s.root
    );
    let f = serde_json::to_value(s.failure.context("a failure in the status")?)?;
    ensure!(
        f["kind"] == "launch_failed" && f["cause"] == "port_in_use",
        "the status's failure is not port in use: {f}"
    );
    Ok(())
}

/// Whether `pid` runs the simulated server's binary (launcher or worker).
fn is_simserver(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|c| {
            let argv0 = c.split(|b| *b == 0).next()?.to_vec();
            let argv0 = String::from_utf8(argv0).ok()?;
            let name = Path::new(&argv0).file_name()?.to_str()?.to_owned();
            Some(name == "simserver")
        })
        .unwrap_or(false)
}

/// Simulated-server processes alive under drainwatch (whatever their session:
/// the launcher is its child, orphaned workers are re-parented to it).
fn servers_under(pid: u32) -> Vec<u32> {
    simhost::descendants(pid)
        .into_iter()
        .filter(|p| !p.has_exited() && is_simserver(p.pid))
        .map(|p| p.pid)
        .collect()
}

/// Waits until no server process runs under drainwatch and the host shows no
/// GPU memory held: nothing of a failed launch is left.
async fn nothing_left(app: &TestApp, host: &SimHost) -> anyhow::Result<()> {
    let deadline = Instant::now() + T;
    loop {
        let alive = servers_under(app.proc.pid());
        let held = host.held()?;
        if alive.is_empty() && held.is_empty() {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "a failed launch left server processes {alive:?} alive and GPU memory {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every file under `dir` with its text, SQLite's own files left out.
fn text_files(dir: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
        for e in entries {
            let e = e?;
            let path = e.path();
            let ty = e.file_type()?;
            if ty.is_dir() {
                todo.push(path);
                continue;
            }
            if !ty.is_file() || e.file_name().to_string_lossy().contains("sqlite") {
                continue;
            }
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                // Pruned while we looked.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
            };
            // A database or its write-ahead log, whatever its name.
            if bytes.starts_with(b"SQLite format 3\0") || bytes.starts_with(&[0x37, 0x7f, 0x06]) {
                continue;
            }
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out.sort();
    Ok(out)
}

/// The one file under `dir` that holds `line`.
fn file_with_line(dir: &Path, line: &str) -> anyhow::Result<(PathBuf, String)> {
    let files = text_files(dir)?;
    let mut holding: Vec<(PathBuf, String)> = files
        .iter()
        .filter(|(_, text)| text.lines().any(|l| l == line))
        .cloned()
        .collect();
    let names: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    ensure!(
        holding.len() == 1,
        "expected exactly one file under {} holding `{line}`, found {:?}; files: {names:?}",
        dir.display(),
        holding.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    Ok(holding.remove(0))
}

#[tokio::test]
async fn a_port_held_by_another_process_fails_the_launch_as_port_in_use() -> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = ServerSpec {
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    let me = std::process::id();

    // 1. Something else listens on the server's port before drainwatch ever
    //    launched it.
    let squatter = squat(spec.port).await?;
    let app = spawn_managed(&host, &spec, &[])?;
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    // Nothing was launched, so there is no log to show; the failure names who
    // holds the port.
    let tail = failed_on_port(&d, me)?;
    ensure!(
        tail.is_empty(),
        "a log tail for a launch that never happened: {tail:?}"
    );
    failed_status(&app).await?;
    nothing_left(&app, &host).await?;

    // Once the port is free, a start goes through.
    drop(squatter);
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
    let first = app.wait_phase(Phase::Ready, T).await?;
    // This launch's own lines, to tell them from a later failure's.
    let first_start = start_line(&lines(&d["log_tail"])?)?;

    // 2. The server is stopped, someone takes the port, the server is started.
    stop(&app).await?;
    let squatter = squat(spec.port).await?;
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    let tail = failed_on_port(&d, me)?;
    // The tail is this attempt's, not the stopped launch's log passed off as it.
    let stale: Vec<&String> = tail
        .iter()
        .filter(|l| **l == first_start || l.starts_with(SIGTERM) || l.starts_with(EXITING))
        .collect();
    ensure!(
        stale.is_empty(),
        "the failed start's log tail holds the previous (stopped) launch's lines {stale:#?}; \
         whole tail: {tail:#?}"
    );
    failed_status(&app).await?;
    nothing_left(&app, &host).await?;

    // Released again, the server starts.
    drop(squatter);
    let ready = app.start_server().await?;
    ensure!(
        ready.generation > first.generation,
        "no new launch: {ready:#?}"
    );
    let root = ready.root.context("a root")?;
    ensure!(
        tests::alive(root.pid),
        "the new root {} is not alive",
        root.pid
    );
    Ok(())
}

#[tokio::test]
async fn a_server_whose_own_bind_fails_on_a_taken_port_is_a_port_in_use_failure()
-> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = ServerSpec {
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    // Bound but not listening, without SO_REUSEADDR: the moment another server
    // is taking the port. Nothing listens there when drainwatch looks, and the
    // server's own bind then fails with "Address already in use". (Done on a
    // port no server ever used: a TIME_WAIT left by one would refuse this bind.)
    let taken = tokio::net::TcpSocket::new_v4()?;
    taken
        .bind(SocketAddr::from(([127, 0, 0, 1], spec.port)))
        .with_context(|| format!("binding port {}", spec.port))?;
    let app = spawn_managed(&host, &spec, &[])?;
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    ensure!(
        d["summary"]["outcome"] == "failed",
        "a server that cannot bind its port did not fail the start: {d}"
    );
    let f = &d["summary"]["failure"];
    ensure!(f["kind"] == "launch_failed", "{f}");
    // The failure carries the server's own words.
    let tail = lines(&f["log_tail"])?;
    let said = tail
        .iter()
        .find(|l| l.to_ascii_lowercase().contains("address already in use"))
        .with_context(|| {
            format!("the failure's log tail lacks the server's bind error: {tail:#?}")
        })?;
    // Classified by what happened: the port was in use (its holder cannot be
    // seen: it does not listen).
    let holder_ok = f["holder_pid"].is_null() || f["holder_pid"] == std::process::id();
    ensure!(
        f["cause"] == "port_in_use" && holder_ok,
        "a launch that failed because its port was in use (its log: `{said}`) is \
         classified {f}, not port in use"
    );
    // Nothing of the launch is left, and the status says so.
    let s = app.wait_phase(Phase::Failed, T).await?;
    ensure!(
        s.root.is_none(),
        "a failed launch left a root: {:?}",
        s.root
    );
    let sf = serde_json::to_value(s.failure.context("a failure in the status")?)?;
    ensure!(
        sf["kind"] == "launch_failed" && sf["cause"] == f["cause"],
        "the status's failure {sf} is not the record's {f}"
    );
    nothing_left(&app, &host).await?;

    // Once the port is free, a start goes through.
    drop(taken);
    let ready = app.start_server().await?;
    let root = ready.root.context("a root")?;
    ensure!(
        tests::alive(root.pid),
        "the new root {} is not alive",
        root.pid
    );
    Ok(())
}

#[tokio::test]
async fn every_launch_has_its_own_log_file_and_each_record_its_own_launchs_lines()
-> anyhow::Result<()> {
    let host = SimHost::new(100);
    let spec = ServerSpec {
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;

    // Three launches, told apart by their warm-up (each logs it as it starts).
    let mut records: Vec<(u64, Value)> = Vec::new();
    let id = app.begin_start().await?;
    records.push((spec.warmup_ms, app.finished_restart(id, T).await?));
    for warmup in [300_u64, 400] {
        let id = app
            .restart(json!({"--warmup-ms": warmup.to_string()}))
            .await?;
        records.push((warmup, app.finished_restart(id, T).await?));
    }

    // Each record's log tail is its own launch's: its start line, and nothing
    // of the launch it replaced (that one's SIGTERM and exit).
    let mut starts: Vec<String> = Vec::new();
    for (i, (warmup, d)) in records.iter().enumerate() {
        ensure!(d["summary"]["outcome"] == "succeeded", "launch {i}: {d}");
        let tail = lines(&d["log_tail"])?;
        let own = start_line(&tail).with_context(|| format!("record of launch {i}"))?;
        ensure!(
            own.contains(&format!("warmup={warmup} ms")),
            "the record of launch {i} (warm-up {warmup} ms) holds another launch's log: {tail:#?}"
        );
        let foreign: Vec<&String> = tail
            .iter()
            .filter(|l| l.starts_with(SIGTERM) || l.starts_with(EXITING))
            .collect();
        ensure!(
            foreign.is_empty(),
            "the record of launch {i} holds the previous launch's shutdown {foreign:?}: {tail:#?}"
        );
        starts.push(own);
    }
    for (i, s) in starts.iter().enumerate() {
        ensure!(
            !starts[..i].contains(s),
            "two records hold the same launch's start line `{s}`"
        );
    }

    // The live tail is the running (third) launch's.
    let live = app.server().await?.log_tail;
    ensure!(
        start_line(&live)? == starts[2],
        "the live log tail is not the running launch's: {live:#?}"
    );

    // On disk: one log file per launch, each holding that launch's whole life
    // and nothing of another's.
    let data = host.scratch().join("data");
    let files = text_files(&data)?;
    let launch_logs: Vec<&(PathBuf, String)> = files
        .iter()
        .filter(|(_, text)| text.lines().any(|l| l.starts_with(STARTED)))
        .collect();
    ensure!(
        launch_logs.len() == 3,
        "3 launches, but {} log files: {:?}",
        launch_logs.len(),
        launch_logs.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let mut paths: Vec<PathBuf> = Vec::new();
    for (i, s) in starts.iter().enumerate() {
        let (path, text) = file_with_line(&data, s)?;
        let in_file: Vec<&str> = text.lines().filter(|l| l.starts_with(STARTED)).collect();
        ensure!(
            in_file.len() == 1,
            "{} mixes launches: {in_file:#?}",
            path.display()
        );
        // Launches 0 and 1 were stopped by the next restart, into their own file;
        // launch 2 still runs.
        let stopped = text.lines().any(|l| l.starts_with(SIGTERM))
            && text.lines().any(|l| l.starts_with(EXITING));
        ensure!(
            stopped == (i < 2),
            "launch {i}'s log {} {} its own shutdown:\n{text}",
            path.display(),
            if stopped { "holds" } else { "lacks" }
        );
        paths.push(path);
    }
    ensure!(
        paths[0] != paths[1] && paths[1] != paths[2] && paths[0] != paths[2],
        "launches share a log file: {paths:?}"
    );
    Ok(())
}

#[tokio::test]
async fn old_launch_logs_are_pruned_to_the_newest_ones() -> anyhow::Result<()> {
    // More earlier launches than either reading of the policy keeps (20
    // launches, or the 40 files `prune` counts).
    const PLANTED: usize = 45;
    let host = SimHost::new(100);
    let spec = ServerSpec {
        warmup_ms: 200,
        ..ServerSpec::default()
    };
    let app = spawn_managed(&host, &spec, &[])?;
    let id = app.begin_start().await?;
    let d = app.finished_restart(id, T).await?;
    ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
    let first = start_line(&lines(&d["log_tail"])?)?;
    // Where drainwatch keeps launch logs: the folder of this launch's.
    let data = host.scratch().join("data");
    let (first_log, _) = file_with_line(&data, &first)?;
    let dir = first_log.parent().context("the log's folder")?.to_owned();

    // The logs of earlier launches, named as drainwatch names them, a day old,
    // #1 the oldest.
    let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    let mut planted: Vec<(usize, PathBuf)> = Vec::new();
    for n in 1..=PLANTED {
        let path = dir.join(format!("launch-{}.log", 1000 + n));
        std::fs::write(&path, format!("an earlier launch's log (#{n})\n"))?;
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(day_ago + Duration::from_secs(60 * n as u64))?;
        planted.push((n, path));
    }

    // A restart: the next launch prunes the old logs.
    let id = app.restart(json!({"--warmup-ms": "300"})).await?;
    let d = app.finished_restart(id, T).await?;
    ensure!(d["summary"]["outcome"] == "succeeded", "{d}");
    let second = start_line(&lines(&d["log_tail"])?)?;

    // The two real launches' logs are kept…
    let (second_log, _) = file_with_line(&data, &second)?;
    ensure!(
        first_log.exists(),
        "the previous launch's log {} was pruned",
        first_log.display()
    );
    ensure!(
        second_log.parent() == Some(dir.as_path()),
        "the launches' logs are in different folders: {} and {}",
        first_log.display(),
        second_log.display()
    );
    // …and of the earlier ones, the newest (oldest pruned first), so that the
    // newest KEPT_LAUNCHES launches' logs remain.
    let left: Vec<usize> = planted
        .iter()
        .filter(|(_, p)| p.exists())
        .map(|(n, _)| *n)
        .collect();
    let want: Vec<usize> = (PLANTED - (KEPT_LAUNCHES - 2) + 1..=PLANTED).collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    ensure!(
        left == want,
        "after a launch, the newest {KEPT_LAUNCHES} launches' logs should be on disk (the 2 real \
         ones and earlier #{}..=#{PLANTED}); {} are: the 2 real ones and earlier {left:?}; \
         the folder holds {} files: {on_disk:?}",
        want[0],
        left.len() + 2,
        on_disk.len()
    );
    Ok(())
}
