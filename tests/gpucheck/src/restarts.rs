//! One restart as the check watches it: the reference polled in a thread of
//! its own from before the request until the server is ready again, and the
//! restart's record read back. From both: per GPU, when the memory was back at
//! its baseline after SIGTERM (drainwatch's 50 Hz timeline, and the
//! reference's polls), how long after the server's exit that was (the
//! driver's release delay), and whether verification passed only once the
//! reference showed the memory back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::gpus::Reference;

/// One reference reading of every GPU's used memory.
#[derive(Debug, Clone)]
pub(crate) struct Poll {
    pub(crate) started_ms: u64,
    pub(crate) ended_ms: u64,
    /// Used bytes by GPU index.
    pub(crate) used: BTreeMap<u32, u64>,
}

/// The reference, read every `every` (or back to back, if a read takes longer).
#[derive(Debug)]
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<Poll>, Option<String>)>,
}

impl Poller {
    pub(crate) fn start(reference: Reference, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut polls = Vec::new();
            let mut error = None;
            while !flag.load(Ordering::Relaxed) {
                let began = Instant::now();
                match reference.read(false) {
                    Ok(r) => polls.push(Poll {
                        started_ms: r.started_ms,
                        ended_ms: r.ended_ms,
                        used: r.gpus.iter().map(|g| (g.index, g.used_bytes)).collect(),
                    }),
                    Err(e) => error = Some(format!("{e:#}")),
                }
                std::thread::sleep(every.saturating_sub(began.elapsed()));
            }
            (polls, error)
        });
        Self { stop, handle }
    }

    /// Stops polling; the polls and the last error, if any read failed.
    pub(crate) fn finish(self) -> (Vec<Poll>, Option<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .unwrap_or_else(|_| (Vec::new(), Some("the poller panicked".to_owned())))
    }
}

/// The first marker of `kind` in a restart record.
fn marker(d: &Value, kind: &str) -> Option<u64> {
    d["markers"]
        .as_array()?
        .iter()
        .find(|m| m["kind"] == kind)?["at_ms"]
        .as_u64()
}

/// When the record first entered `phase`.
fn entered(d: &Value, phase: &str) -> Option<u64> {
    d["transitions"]
        .as_array()?
        .iter()
        .find(|t| t["phase"] == phase)?["at_ms"]
        .as_u64()
}

fn signed(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    Some(a? as i64 - b? as i64)
}

/// What one restart is measured against.
#[derive(Debug)]
pub(crate) struct Baselines<'a> {
    /// The server's GPUs.
    pub(crate) gpus: &'a [u32],
    /// Each GPU's idle baseline as drainwatch learned it.
    pub(crate) drainwatch: &'a BTreeMap<u32, u64>,
    /// Each GPU's idle memory as the reference read it before the start.
    pub(crate) reference: &'a BTreeMap<u32, u64>,
    /// How far above its baseline a GPU still counts as idle.
    pub(crate) tolerance: u64,
}

/// The drain of one restart record `d`, per GPU, against the reference's
/// `polls` taken during it.
///
/// Whether verification passed only once the memory was back, per GPU: "yes"
/// when the reference read the GPU idle before the verify, or read it idle
/// after the verify while drainwatch still did (before the new generation
/// took memory: the memory does not come back and go again in between); "no"
/// when in that span after the verify the reference read it held; else
/// "unknown" (no reference reading fell where it proves either).
pub(crate) fn analyse(d: &Value, polls: &[Poll], b: &Baselines<'_>) -> Value {
    let sigterm = marker(d, "sigterm");
    let verified = marker(d, "verified");
    let launch = marker(d, "launch");
    let exited = entered(d, "verifying");
    let empty = Vec::new();
    let timeline = d["timeline"].as_array().unwrap_or(&empty);
    let end = d["summary"]["finished_at_ms"].as_u64().unwrap_or(u64::MAX);
    let drain_end = launch.unwrap_or(end);
    let gpus: Vec<Value> = b
        .gpus
        .iter()
        .map(|&g| {
            let base = b.drainwatch.get(&g).copied().unwrap_or(0);
            let idle_dw = |u: u64| u <= base + b.tolerance;
            let points: Vec<(u64, u64)> = timeline
                .iter()
                .filter_map(|p| {
                    Some((
                        p["at_ms"].as_u64()?,
                        p["mem_used_bytes"][g as usize].as_u64()?,
                    ))
                })
                .filter(|(at, _)| sigterm.is_some_and(|s| *at >= s))
                .collect();
            let drain: Vec<(u64, u64)> = points
                .iter()
                .copied()
                .filter(|(at, _)| *at < drain_end)
                .collect();
            let held = drain.first().map(|(_, u)| u.saturating_sub(base));
            let back = drain.iter().find(|(_, u)| idle_dw(*u)).map(|(at, _)| *at);
            // Until when drainwatch still read the GPU idle after the verify.
            let idle_until = verified.map(|v| {
                points
                    .iter()
                    .filter(|(at, _)| *at >= v)
                    .take_while(|(_, u)| idle_dw(*u))
                    .map(|(at, _)| *at)
                    .last()
                    .unwrap_or(v)
            });
            let idle = b.reference.get(&g).copied().unwrap_or(0);
            let is_back = |p: &Poll| p.used.get(&g).is_some_and(|u| *u <= idle + b.tolerance);
            let drain_polls: Vec<&Poll> = polls
                .iter()
                .filter(|p| sigterm.is_some_and(|s| p.started_ms >= s) && p.started_ms < drain_end)
                .collect();
            let ref_back = drain_polls.iter().find(|p| is_back(p)).map(|p| p.ended_ms);
            let ref_last_held = drain_polls
                .iter()
                .filter(|p| !is_back(p))
                .filter(|p| ref_back.is_none_or(|rb| p.ended_ms <= rb))
                .map(|p| p.started_ms)
                .next_back();
            let after_verify: Vec<&Poll> = match (verified, idle_until) {
                (Some(v), Some(u)) => polls
                    .iter()
                    .filter(|p| p.started_ms >= v && p.ended_ms <= u)
                    .collect(),
                _ => Vec::new(),
            };
            let verdict = if after_verify.iter().any(|p| !is_back(p)) {
                "no"
            } else if ref_back.zip(verified).is_some_and(|(rb, v)| rb <= v)
                || after_verify.iter().any(|p| is_back(p))
            {
                "yes"
            } else {
                "unknown"
            };
            json!({
                "gpu": g,
                "held_bytes": held,
                "back_at_ms": back,
                "sigterm_to_back_ms": signed(back, sigterm),
                "exit_to_back_ms": signed(back, exited),
                "timeline": changes(&drain, sigterm.unwrap_or(0)),
                "reference": {
                    "back_at_ms": ref_back,
                    "last_held_at_ms": ref_last_held,
                    "sigterm_to_back_ms": signed(ref_back, sigterm),
                    "polls_after_verify": after_verify.len(),
                },
                "verify_after_reference_back_ms": signed(verified, ref_back),
                "verified_after_memory_back": verdict,
            })
        })
        .collect();
    let window: Vec<&Poll> = polls
        .iter()
        .filter(|p| sigterm.is_some_and(|s| p.started_ms >= s) && p.started_ms < drain_end)
        .collect();
    let mut gaps: Vec<u64> = window
        .windows(2)
        .map(|w| w[1].started_ms - w[0].started_ms)
        .collect();
    gaps.sort_unstable();
    let ok = !gpus.is_empty()
        && gpus
            .iter()
            .all(|g| g["verified_after_memory_back"] == "yes");
    let release = gpus
        .iter()
        .filter_map(|g| g["exit_to_back_ms"].as_i64())
        .max();
    json!({
        "id": d["summary"]["id"],
        "outcome": d["summary"]["outcome"],
        "failure": d["summary"]["failure"],
        "durations": d["summary"]["durations"],
        "sigterm_at_ms": sigterm,
        "sigkill_at_ms": marker(d, "sigkill"),
        "exited_at_ms": exited,
        "verified_at_ms": verified,
        "launch_at_ms": launch,
        "ready_at_ms": marker(d, "ready"),
        "sigterm_to_exit_ms": signed(exited, sigterm),
        "release_after_last_exit_ms": release,
        "notes": d["transitions"].as_array().map(|t| t.iter().map(|x| x["note"].clone()).collect::<Vec<_>>()),
        "containment": d["containment"],
        "gpus": gpus,
        "reference_polls": window.len(),
        "reference_poll_gap_ms_median": gaps.get(gaps.len() / 2),
        "verified_after_memory_back": ok,
    })
}

/// The timeline as `[ms since SIGTERM, bytes]`, only where the value changes
/// (and the last point).
fn changes(points: &[(u64, u64)], from: u64) -> Vec<[u64; 2]> {
    let mut out: Vec<[u64; 2]> = Vec::new();
    for (i, &(at, used)) in points.iter().enumerate() {
        let changed = out.last().is_none_or(|l| l[1] != used);
        if changed || i + 1 == points.len() {
            out.push([at.saturating_sub(from), used]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    /// A restart whose SIGTERM is at 1000, exit at 1200, memory back in
    /// drainwatch's samples at 1500, verified at 1600, relaunched at 1600.
    fn record() -> Value {
        let point = |at: u64, used: u64| json!({"at_ms": at, "phase": "draining", "mem_used_bytes": [used, 4 * M]});
        json!({
            "summary": {"id": 3, "outcome": "succeeded", "finished_at_ms": 2500},
            "markers": [{"kind": "sigterm", "at_ms": 1000}, {"kind": "verified", "at_ms": 1600},
                        {"kind": "launch", "at_ms": 1600}, {"kind": "ready", "at_ms": 2400}],
            "transitions": [{"at_ms": 1000, "phase": "draining", "note": "SIGTERM"},
                            {"at_ms": 1200, "phase": "verifying", "note": "gone"}],
            "timeline": [point(1000, 2 * G), point(1200, 2 * G), point(1500, 4 * M), point(1550, 4 * M)],
        })
    }

    fn poll(at: u64, used: u64) -> Poll {
        Poll {
            started_ms: at,
            ended_ms: at + 10,
            used: BTreeMap::from([(0, used), (1, 4 * M)]),
        }
    }

    #[test]
    fn measures_the_release_and_checks_the_verify_against_the_reference() {
        let dw = BTreeMap::from([(0, 4 * M), (1, 4 * M)]);
        let b = Baselines {
            gpus: &[0],
            drainwatch: &dw,
            reference: &dw,
            tolerance: 64 * M,
        };
        let polls = [
            poll(900, 2 * G),
            poll(1100, 2 * G),
            poll(1450, 4 * M),
            poll(1700, 2 * G),
        ];
        let a = analyse(&record(), &polls, &b);
        let g = &a["gpus"][0];
        assert_eq!(g["sigterm_to_back_ms"], 500, "{a}");
        assert_eq!(g["exit_to_back_ms"], 300);
        assert_eq!(g["held_bytes"], 2 * G - 4 * M);
        assert_eq!(g["reference"]["back_at_ms"], 1460);
        assert_eq!(g["reference"]["last_held_at_ms"], 1100);
        assert_eq!(g["verified_after_memory_back"], "yes");
        assert_eq!(a["verified_after_memory_back"], true);
        // The poll at 1700 is the new generation's memory: after the launch.
        assert_eq!(a["reference_polls"], 2);
        assert_eq!(
            g["timeline"],
            json!([[0, 2 * G], [500, 4 * M], [550, 4 * M]])
        );

        // The reference never saw it back before the verify: not proven.
        let late = [poll(1100, 2 * G), poll(1590, 2 * G)];
        let a = analyse(&record(), &late, &b);
        assert_eq!(a["gpus"][0]["verified_after_memory_back"], "unknown");
        assert_eq!(a["verified_after_memory_back"], false);
        assert_eq!(a["release_after_last_exit_ms"], 300);
    }

    #[test]
    fn an_idle_reading_after_the_verify_but_before_the_new_generation_counts() {
        let mut d = record();
        // drainwatch still reads GPU 0 idle at 1650 and 1700; the new generation at 1750.
        let point = |at: u64, used: u64| json!({"at_ms": at, "phase": "warming_up", "mem_used_bytes": [used, 4 * M]});
        for p in [point(1650, 4 * M), point(1700, 4 * M), point(1750, 2 * G)] {
            d["timeline"].as_array_mut().expect("points").push(p);
        }
        let dw = BTreeMap::from([(0, 4 * M), (1, 4 * M)]);
        let b = Baselines {
            gpus: &[0],
            drainwatch: &dw,
            reference: &dw,
            tolerance: 64 * M,
        };
        let a = analyse(&d, &[poll(1100, 2 * G), poll(1610, 4 * M)], &b);
        assert_eq!(a["gpus"][0]["verified_after_memory_back"], "yes", "{a}");
        // The reference read it held while drainwatch, verified, read it idle.
        let a = analyse(&d, &[poll(1100, 2 * G), poll(1610, 2 * G)], &b);
        assert_eq!(a["gpus"][0]["verified_after_memory_back"], "no", "{a}");
        // After the new generation took its memory, a held reading proves nothing.
        let a = analyse(&d, &[poll(1450, 4 * M), poll(1760, 2 * G)], &b);
        assert_eq!(a["gpus"][0]["verified_after_memory_back"], "yes", "{a}");
    }
}
