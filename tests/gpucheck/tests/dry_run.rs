//! `gpu-check --dry-run` end to end against the fake NVML: drainwatch,
//! gpuhog and the runner as real processes, and the report read back. Also
//! the runner on a machine with no NVML at all.
//!
//! The binaries come from the workspace's `target/<profile>` (built by
//! `cargo xtask test`, or `cargo build -p drainwatch -p gpuhog -p fake-nvml`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tests::sigtrace::{Event, SignalTrace, foreign_signals};

const RUNNER: &str = env!("CARGO_BIN_EXE_gpu-check");
/// The simulated driver's release delay in the dry run (the runner's `sim`).
const RELEASE_DELAY_MS: i64 = 300;

/// `target/<profile>`, where the runner sits beside drainwatch and gpuhog.
fn bin_dir() -> PathBuf {
    let dir = Path::new(RUNNER).parent().expect("a folder").to_path_buf();
    for b in ["drainwatch", "gpuhog", "libnvidia_ml.so"] {
        assert!(
            dir.join(b).exists(),
            "{} is missing: run `cargo xtask test` (or `cargo build -p drainwatch -p gpuhog -p fake-nvml`) first",
            dir.join(b).display()
        );
    }
    dir
}

/// The values of `key` in every element of the array `v`.
fn each<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| &x[key])
        .collect()
}

#[allow(unsafe_code)]
fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER");
}

#[test]
fn a_dry_run_reports_every_part_and_leaves_nothing_running() {
    // Whatever the runner leaves behind is re-parented to this test, which
    // then finds it among its descendants.
    become_subreaper();
    // Every signal the runner and what it starts (drainwatch, gpuhog) send.
    let trace = SignalTrace::start().expect("the signal trace (needs root and tracefs)");
    let out = tempfile::tempdir().expect("temp dir");
    let child = Command::new(RUNNER)
        .args(["--dry-run", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(bin_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gpu-check");
    let runner = child.id();
    let run = child.wait_with_output().expect("gpu-check's output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "gpu-check failed: {said}");
    let doc: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("gpu-check.json")).expect("gpu-check.json"),
    )
    .expect("JSON");
    let text = std::fs::read_to_string(out.path().join("gpu-check.txt")).expect("gpu-check.txt");
    assert!(text.starts_with("gpu-check PASSED (simulated"), "{text}");

    assert_eq!(doc["simulated"], true);
    assert_eq!(doc["drainwatch"]["nvml"]["simulated"], true);
    assert_eq!(doc["passed"], true, "{said}");
    assert_eq!(doc["failures"], serde_json::json!([]));
    assert_eq!(doc["reference"]["source"], "nvml");
    let gpus = doc["host"]["gpus"].as_array().expect("GPUs").len();
    assert_eq!(gpus, 4);
    assert_eq!(
        doc["setup"]["gpus"].as_array().expect("server GPUs").len(),
        gpus
    );

    // Every GPU compared idle, running and stopped, and agreeing; while the
    // server runs, both sides list its processes on every GPU.
    let c = &doc["comparisons"];
    assert_eq!(each(c, "when"), ["idle", "running", "stopped"]);
    for cmp in c.as_array().expect("comparisons") {
        assert_eq!(cmp["agree"], true, "{cmp}");
        assert_eq!(cmp["gpus"].as_array().expect("GPUs").len(), gpus, "{cmp}");
    }
    for g in c[1]["gpus"].as_array().expect("GPUs") {
        assert!(
            !g["processes"]["reference"]
                .as_array()
                .expect("list")
                .is_empty(),
            "{g}"
        );
        assert_eq!(
            g["processes"]["drainwatch"], g["processes"]["reference"],
            "{g}"
        );
    }

    // Three restarts, each draining one mode, with per-GPU drain timelines;
    // memory never back before the simulated driver's release delay, and the
    // verify never before the memory was back.
    let r = &doc["restarts"];
    assert_eq!(
        each(r, "drained_mode"),
        ["normal", "ignore-sigterm", "orphan"]
    );
    for restart in r.as_array().expect("restarts") {
        assert_eq!(restart["outcome"], "succeeded", "{restart}");
        assert_eq!(restart["verified_after_memory_back"], true, "{restart}");
        let forced = restart["drained_mode"] != "normal";
        assert_eq!(!restart["sigkill_at_ms"].is_null(), forced, "{restart}");
        let verified = restart["verified_at_ms"].as_u64().expect("verified");
        // The simulated release delay, as drainwatch's samples (20 ms apart
        // during an operation) can see it.
        let release = restart["release_after_last_exit_ms"]
            .as_i64()
            .expect("release");
        assert!(
            (RELEASE_DELAY_MS - 50..RELEASE_DELAY_MS + 2_000).contains(&release),
            "released after {release} ms: {restart}"
        );
        let per_gpu = restart["gpus"].as_array().expect("GPUs");
        assert_eq!(per_gpu.len(), gpus);
        for g in per_gpu {
            assert_eq!(g["verified_after_memory_back"], "yes", "{g}");
            let back = g["sigterm_to_back_ms"].as_i64().expect("back");
            assert!(back >= RELEASE_DELAY_MS, "{g}");
            assert!(
                g["back_at_ms"].as_u64().expect("back at") <= verified,
                "{g}"
            );
            assert!(g["held_bytes"].as_u64().expect("held") >= 1 << 30, "{g}");
            let timeline = g["timeline"].as_array().expect("timeline");
            assert!(timeline.len() >= 2, "{g}");
        }
    }

    let cost = &doc["sample_cost"];
    assert_eq!(cost["samples"], 50, "{cost}");
    assert!(cost["median_us"].as_u64().expect("median") > 0);

    let health = doc["health"].as_array().expect("health");
    assert_eq!(health.len(), gpus);
    for h in health {
        assert!(h["read"].as_object().expect("read").len() >= 10, "{h}");
        assert!(
            h["not_supported"].is_array() && h["errors"].is_array(),
            "{h}"
        );
    }

    let k = &doc["cleanup"];
    assert_eq!(k["server_stopped"], true, "{k}");
    assert_eq!(k["left_running"], serde_json::json!([]), "{k}");
    assert_eq!(k["server_processes_alive"], serde_json::json!([]), "{k}");
    assert_eq!(k["simulated_host_alive"], serde_json::json!([]), "{k}");
    assert!(
        k["server_processes_seen"].as_u64().expect("seen") >= 5,
        "{k}"
    );
    let left: Vec<_> = simhost::descendants(std::process::id())
        .into_iter()
        .filter(|p| !p.has_exited())
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");

    // Nothing foreign was signalled: every signal the runner or a process it
    // started sent went to a process of that same tree.
    assert!(
        !trace.overrun(),
        "the signal trace overflowed: it proves nothing"
    );
    let events = trace.events().expect("the trace");
    let mut tree = HashSet::from([runner]);
    for e in &events {
        if let Event::Fork { parent_tgid, child } = e
            && tree.contains(parent_tgid)
        {
            tree.insert(*child);
        }
    }
    let sent = events
        .iter()
        .filter(|e| matches!(e, Event::Signal(s) if tree.contains(&s.sender_tgid) && s.sig == libc::SIGTERM))
        .count();
    assert!(sent >= 3, "the drains' SIGTERMs were traced: {sent}");
    let foreign = foreign_signals(&events, &tree, &HashSet::new());
    assert!(foreign.is_empty(), "signals outside the tree: {foreign:?}");
}

#[test]
fn without_nvml_it_says_there_is_no_gpu() {
    let out = tempfile::tempdir().expect("temp dir");
    let run = Command::new(RUNNER)
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "--out"])
        .arg(out.path())
        .env_remove("GPU_CHECK_NVML_LIB")
        .output()
        .expect("run gpu-check");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no NVIDIA GPU here"), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/libnvidia-ml.so.1"),
        "{stderr}"
    );
    assert!(!out.path().join("gpu-check.json").exists());
}
