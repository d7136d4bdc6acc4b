//! Hooks for an engine that owns placement (Kubernetes, Slurm): drainwatch
//! watches and verifies, the engine restarts.
//!
//! - `drainwatch verify-drained` asks the drainwatch on this host until no
//!   process of the server (its tracked members, its cgroup, its tree: what
//!   the samples mark as the server's) is alive and every one of its GPUs is
//!   back at its idle baseline with no process on it. A preStop or post-stop
//!   hook, a Slurm epilog, an init container before the next server.
//! - `drainwatch wait-ready` runs the server config's own readiness probe
//!   (`/health`, then a real completion) until it answers: a readiness or
//!   startup probe command.

use std::time::{Duration, Instant};

use serde::Serialize;
use shared::{ProcessRole, Snapshot};
use tokio::sync::mpsc;

use super::client::Client;
use super::{CliError, Exit, VerifyDrainedArgs, WaitReadyArgs};
use crate::clock::now_ms;
use crate::config::file::ServerConfig;

/// How often the state is asked for while waiting.
const POLL: Duration = Duration::from_millis(250);

/// Why the server is not drained yet, one reason a line; empty when it is.
pub fn not_drained(s: &Snapshot, gpus: Option<&[u32]>, tolerance_bytes: u64) -> Vec<String> {
    let mut why = Vec::new();
    let Some(sample) = &s.latest else {
        return vec!["no sample yet".to_owned()];
    };
    if let Some(root) = s.server.as_ref().and_then(|sv| sv.root) {
        why.push(format!("the server's root (pid {}) is alive", root.pid));
    }
    for p in sample
        .processes
        .iter()
        .filter(|p| p.role == ProcessRole::Server)
    {
        if s.server
            .as_ref()
            .and_then(|sv| sv.root)
            .is_some_and(|r| r.pid == p.pid)
        {
            continue;
        }
        why.push(format!("pid {} of the server is alive", p.pid));
    }
    let server_gpus = s.server.as_ref().map(|sv| sv.gpus.clone());
    let watched: Vec<u32> = match (gpus, server_gpus) {
        (Some(g), _) => g.to_vec(),
        (None, Some(g)) if !g.is_empty() => g,
        _ => sample.gpus.iter().map(|g| g.index).collect(),
    };
    for i in watched {
        let Some(g) = sample.gpus.iter().find(|g| g.index == i) else {
            why.push(format!("GPU {i}: not on this host"));
            continue;
        };
        for p in &sample.processes {
            if let Some(m) = p.gpu_mem.iter().find(|m| m.gpu_index == i) {
                let held = m
                    .used_bytes
                    .map_or_else(|| "memory".to_owned(), shared::units::fmt_bytes);
                let whose = if p.role == ProcessRole::Outside {
                    " (a host PID, outside this drainwatch's PID namespace)"
                } else {
                    ""
                };
                why.push(format!("GPU {i}: pid {}{whose} holds {held}", p.pid));
            }
        }
        match (g.mem_used_bytes, g.mem_baseline_bytes) {
            (None, _) => why.push(format!(
                "GPU {i}: memory unreadable ({})",
                g.error("mem_used_bytes").unwrap_or("not reported")
            )),
            (Some(_), None) => why.push(format!("GPU {i}: not seen idle yet (no baseline)")),
            (Some(u), Some(b)) if u > b.saturating_add(tolerance_bytes) => why.push(format!(
                "GPU {i}: {} used, idle baseline {}",
                shared::units::fmt_bytes(u),
                shared::units::fmt_bytes(b)
            )),
            _ => {}
        }
    }
    why
}

#[derive(Serialize)]
struct Verdict<'a> {
    drained: bool,
    reasons: &'a [String],
    waited_ms: u64,
}

pub async fn verify_drained(args: VerifyDrainedArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    let began = Instant::now();
    let since = now_ms();
    let tolerance = args.tolerance_mib.saturating_mul(1 << 20);
    let mut reasons;
    loop {
        let s: Snapshot = client.get("api/state").await?;
        // Only a sample taken after the hook began counts.
        let fresh = s.latest.as_ref().is_some_and(|l| l.at_ms >= since);
        reasons = if fresh {
            not_drained(&s, args.gpus.as_deref(), tolerance)
        } else {
            vec!["waiting for a sample newer than this hook".to_owned()]
        };
        if reasons.is_empty() || began.elapsed() >= args.timeout {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let drained = reasons.is_empty();
    let waited_ms = began.elapsed().as_millis() as u64;
    if args.remote.json {
        let line = serde_json::to_string(&Verdict {
            drained,
            reasons: &reasons,
            waited_ms,
        })
        .map_err(|e| CliError::new(Exit::Error, format!("cannot write JSON: {e}")))?;
        println!("{line}");
    } else if drained {
        println!(
            "drained: no process of the server, every GPU at its idle baseline ({waited_ms} ms)"
        );
    }
    if drained {
        return Ok(Exit::Ok);
    }
    Err(CliError::new(
        Exit::NotDrained,
        format!(
            "not drained after {:?}: {}",
            args.timeout,
            reasons.join("; ")
        ),
    ))
}

pub async fn wait_ready(args: WaitReadyArgs) -> Result<Exit, CliError> {
    let cfg =
        ServerConfig::load(&args.config).map_err(|e| CliError::new(Exit::Usage, format!("{e}")))?;
    let client = crate::restart::probe_client(cfg.api_key.as_ref());
    let (tx, mut rx) = mpsc::channel(4);
    let probe = tokio::spawn(crate::restart::warmup_probe(
        client,
        cfg.health_url.clone(),
        cfg.readiness.clone(),
        tx,
    ));
    let began = Instant::now();
    let outcome = tokio::time::timeout(args.timeout, async {
        loop {
            match rx.recv().await {
                Some((_, crate::restart::Probed::Ready)) => return Ok(()),
                Some((_, crate::restart::Probed::Refused(status))) => return Err(status),
                Some((_, crate::restart::Probed::Healthy)) => {
                    eprintln!(
                        "{}: /health answers 200; waiting for a completion",
                        cfg.name
                    );
                }
                None => return Err(0),
            }
        }
    })
    .await;
    probe.abort();
    let ms = began.elapsed().as_millis();
    match outcome {
        Ok(Ok(())) => {
            println!("{}: ready: a completion came back ({ms} ms)", cfg.name);
            Ok(Exit::Ok)
        }
        Ok(Err(status)) => Err(CliError::new(
            Exit::NotAllowed,
            format!(
                "{}: the server refused the probe ({status}): set api_key_file or api_key_env in its config",
                cfg.name
            ),
        )),
        Err(_) => Err(CliError::new(
            Exit::WarmupTimeout,
            format!("{}: not ready after {:?}", cfg.name, args.timeout),
        )),
    }
}
