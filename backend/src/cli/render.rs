//! Plain text for a terminal: the host and server lines, the GPU and process
//! tables, a restart's outcome and a benchmark's results ([`bench`]). Every number carries its
//! unit (the formatters are the browser UI's, from [`shared::units`]).

use std::fmt::Write as _;

use shared::restart::{Failure, Outcome, RestartSummary, ServerStatus};
use shared::units::{
    MISSING, fmt_age_ms, fmt_bytes, fmt_bytes_of, fmt_percent, fmt_power_mw, fmt_secs, fmt_temp_c,
    fmt_tok_s, truncate,
};
use shared::{ProcessInfo, ProcessRole, Snapshot};

mod bench;
pub(super) use bench::{bench_exit, bench_run};

/// Columns of text, each as wide as its widest cell; `right` columns are
/// right-aligned (numbers).
pub(super) fn table(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let width = |i: usize| {
        rows.iter()
            .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            let last = i + 1 == widths.len();
            if right.get(i).copied().unwrap_or(false) {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if !last {
                    out.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                out.push_str("  ");
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
    }
    out
}

fn or_missing<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| MISSING.to_owned(), f)
}

/// What a process holds on all its GPUs ("—" for one that holds none).
pub(super) fn gpu_mem_cell(p: &ProcessInfo) -> String {
    if p.gpu_mem.is_empty() {
        MISSING.to_owned()
    } else {
        fmt_bytes(p.gpu_mem_total_bytes())
    }
}

/// A command line, cut to fit a table row.
pub(super) fn command_cell(argv: &[String]) -> String {
    truncate(&argv.join(" "), 70)
}

/// A process's row in the snapshot's table.
fn process_row(p: &shared::process::ProcessInfo) -> Vec<String> {
    let gpus: Vec<String> = p.gpu_mem.iter().map(|m| m.gpu_index.to_string()).collect();
    vec![
        p.pid.to_string(),
        match p.role {
            ProcessRole::Server => "server".to_owned(),
            ProcessRole::Foreign => "foreign".to_owned(),
            ProcessRole::Outside => "host pid (outside)".to_owned(),
        },
        p.user.clone().unwrap_or_else(|| MISSING.to_owned()),
        if gpus.is_empty() {
            MISSING.to_owned()
        } else {
            gpus.join(",")
        },
        gpu_mem_cell(p),
        command_cell(&p.cmdline),
    ]
}

/// The whole state: host, server, GPUs, processes, last restart.
pub(super) fn snapshot(s: &Snapshot, now_ms: u64) -> String {
    let mut out = String::new();
    let host = &s.host;
    let _ = write!(out, "{} — drainwatch {}", host.hostname, host.version);
    match &host.nvml {
        shared::NvmlStatus::Ok {
            simulated: true, ..
        } => out.push_str(" — SIMULATED HOST: every GPU number below is simulated"),
        shared::NvmlStatus::Ok { driver_version, .. } => {
            let _ = write!(
                out,
                " — driver {}",
                driver_version.as_deref().unwrap_or(MISSING)
            );
        }
        shared::NvmlStatus::Unavailable { reason, .. } => {
            let _ = write!(out, " — NVML unavailable: {reason}");
        }
    }
    out.push('\n');
    if host.own_pid_namespace {
        let _ = writeln!(out, "  WARNING: {}", shared::process::OUTSIDE_NOTE);
    }
    if let Some(server) = &s.server {
        out.push_str(&server_lines(server, now_ms));
    }
    if !s.presence.is_empty() {
        let who: Vec<String> = s
            .presence
            .iter()
            .map(|p| format!("{} ({})", p.who, p.role.as_str()))
            .collect();
        let _ = writeln!(out, "connected: {}", who.join(", "));
    }
    out.push('\n');
    let Some(sample) = &s.latest else {
        out.push_str("no sample yet\n");
        return out;
    };
    let rows: Vec<Vec<String>> = sample
        .gpus
        .iter()
        .map(|g| {
            vec![
                g.index.to_string(),
                g.name.clone().unwrap_or_else(|| MISSING.to_owned()),
                match (g.mem_used_bytes, g.mem_total_bytes) {
                    (Some(u), Some(t)) => fmt_bytes_of(u, t),
                    (u, _) => or_missing(u, fmt_bytes),
                },
                or_missing(g.util_gpu_percent, fmt_percent),
                or_missing(g.power_mw, fmt_power_mw),
                or_missing(g.temp_c, fmt_temp_c),
                health_cell(g),
            ]
        })
        .collect();
    out.push_str(&table(
        &["GPU", "NAME", "MEMORY", "UTIL", "POWER", "TEMP", "HEALTH"],
        &[true, false, true, true, true, true, false],
        &rows,
    ));
    // What is wrong, in full, under the table.
    for issue in sample
        .gpus
        .iter()
        .flat_map(|g| shared::health::issues_now(g.index, &g.health))
    {
        let _ = writeln!(out, "health: {}", issue.line());
    }
    let procs: Vec<Vec<String>> = sample.processes.iter().map(process_row).collect();
    out.push('\n');
    if procs.is_empty() {
        out.push_str("no process holds GPU memory\n");
    } else {
        out.push_str(&table(
            &["PID", "ROLE", "USER", "GPUS", "GPU MEM", "COMMAND"],
            &[true, false, false, false, true, false],
            &procs,
        ));
    }
    if let Some(r) = s.restarts.first() {
        out.push('\n');
        out.push_str("last operation: ");
        out.push_str(&restart_line(r));
        out.push('\n');
    }
    out
}

/// The managed server in two or three lines.
pub(super) fn server_lines(s: &ServerStatus, now_ms: u64) -> String {
    let mut out = format!(
        "server {}: {} for {}, generation {}, port {}",
        s.name,
        s.phase.label(),
        fmt_age_ms(now_ms.saturating_sub(s.phase_since_ms)),
        s.generation,
        s.port
    );
    if let Some(set) = &s.flagset {
        let _ = write!(out, ", flag set {set}");
    }
    out.push('\n');
    let flags: Vec<String> = s.flags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(
        out,
        "  flags: {}",
        if flags.is_empty() {
            "(none)".to_owned()
        } else {
            flags.join(" ")
        }
    );
    if let Some(line) = s.containment_line() {
        let _ = writeln!(out, "  containment: {line}");
    }
    if s.has_metrics {
        let _ = writeln!(
            out,
            "  live: {}, {} running, {} queued, p50 TTFT {}, ITL {}",
            fmt_tok_s(s.passive.output_tok_s),
            or_missing(s.passive.running, |n| n.to_string()),
            or_missing(s.passive.queued, |n| n.to_string()),
            shared::units::fmt_ms(s.passive.ttft_p50_ms),
            shared::units::fmt_ms(s.passive.itl_p50_ms),
        );
    }
    if let Some(op) = &s.operation {
        let _ = writeln!(
            out,
            "  running: {} #{} by {}, for {}",
            op.kind.as_str(),
            op.id,
            op.requested_by,
            fmt_age_ms(now_ms.saturating_sub(op.started_at_ms))
        );
    }
    if let Some(b) = &s.bench {
        let _ = writeln!(
            out,
            "  benchmark #{}: concurrency {}, repeat {}/{}, {}/{} requests, {}",
            b.run_id,
            b.concurrency,
            b.repeat + 1,
            b.repeats,
            b.done,
            b.total,
            fmt_tok_s(Some(b.output_tok_s))
        );
    }
    if let (Some(f), None) = (&s.failure, &s.operation) {
        let _ = writeln!(out, "  last failure: {}", f.summary());
    }
    out
}

/// One line for a restart record.
pub(super) fn restart_line(r: &RestartSummary) -> String {
    let what = format!("{} #{} by {}", r.kind.as_str(), r.id, r.requested_by);
    let d = &r.durations;
    match (&r.outcome, &r.failure) {
        (Outcome::Running, _) => format!("{what}: running"),
        (Outcome::Succeeded, _) => format!(
            "{what}: succeeded in {} (drain {}, kill {}, verify {}, launch and warm-up {})",
            fmt_secs(d.total_ms),
            fmt_secs(d.drain_ms),
            fmt_secs(d.kill_ms),
            fmt_secs(d.verify_ms),
            fmt_secs(d.warmup_ms)
        ),
        (_, Some(f)) => format!("{what}: {}", f.summary()),
        (Outcome::Failed, None) => format!("{what}: failed"),
        (Outcome::Interrupted, None) => format!("{what}: interrupted"),
        (Outcome::Cancelled, None) => {
            format!("{what}: cancelled before the launch; the server is stopped")
        }
    }
}

/// A finished restart: its line, then who held memory and the log's tail.
pub(super) fn restart_outcome(r: &RestartSummary) -> String {
    let mut out = restart_line(r) + "\n";
    if let Some(next) = r.failure.as_ref().and_then(Failure::needs_person) {
        let _ = writeln!(out, "NEEDS A PERSON: {next}");
    }
    match &r.failure {
        Some(Failure::VerifyFailed { holders, .. } | Failure::ForeignHolders { holders }) => {
            let rows: Vec<Vec<String>> = holders
                .iter()
                .map(|h| {
                    vec![
                        h.pid.to_string(),
                        if h.ours { "server" } else { "foreign" }.to_owned(),
                        h.user.clone().unwrap_or_else(|| MISSING.to_owned()),
                        h.gpu_index.to_string(),
                        or_missing(h.used_bytes, fmt_bytes),
                        command_cell(&h.cmdline),
                    ]
                })
                .collect();
            out.push_str("still holding GPU memory:\n");
            out.push_str(&table(
                &["PID", "ROLE", "USER", "GPU", "GPU MEM", "COMMAND"],
                &[true, false, false, true, true, false],
                &rows,
            ));
        }
        Some(f @ (Failure::LaunchFailed { log_tail, .. } | Failure::Crashed { log_tail, .. }))
            if !log_tail.is_empty() =>
        {
            if let Some(said) = f.server_said() {
                let _ = writeln!(out, "the server said: {said}");
            }
            out.push_str("log tail:\n");
            for l in log_tail.iter().rev().take(20).rev() {
                let _ = writeln!(out, "  {l}");
            }
        }
        _ => {}
    }
    out
}

/// A GPU's health in a word or two: "ok", what is wrong ("XID 79",
/// "x4 of x16", "throttled"), or how many things are.
fn health_cell(g: &shared::GpuSample) -> String {
    let issues = shared::health::issues_now(g.index, &g.health);
    match shared::health::brief(&issues) {
        Some(text) => text,
        None if g.health == shared::health::GpuHealth::default() => MISSING.to_owned(),
        None => "ok".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::bench::{BenchRun, RunStatus};

    #[test]
    fn tables_align_numbers_right_and_text_left() {
        let t = table(
            &["GPU", "NAME", "MEMORY"],
            &[true, false, true],
            &[
                vec!["0".into(), "A100".into(), "4 MiB / 80.0 GiB".into()],
                vec!["10".into(), "H100 SXM".into(), "88.0 GiB / 80.0 GiB".into()],
            ],
        );
        assert_eq!(
            t,
            "GPU  NAME                   MEMORY\n  0  A100         4 MiB / 80.0 GiB\n 10  H100 SXM  88.0 GiB / 80.0 GiB\n"
        );
    }

    #[test]
    fn a_benchmark_says_what_its_itl_is_per() {
        use shared::bench::{BenchSettings, LevelSummary, TokenSource};
        let level = |token_source| LevelSummary {
            concurrency: 16,
            token_source,
            ..LevelSummary::default()
        };
        let mut run = BenchRun {
            id: 3,
            flagset: "3f9a0c1d2e4b".into(),
            restart_id: None,
            requested_by: "cli".into(),
            settings: BenchSettings::default(),
            status: RunStatus::Succeeded,
            started_at_ms: 0,
            finished_at_ms: Some(1),
            error: None,
            correctness: None,
            levels: vec![level(TokenSource::ChunkUsage)],
            repeats: Vec::new(),
            provenance: None,
            campaign_id: None,
            campaign_step: None,
        };
        let text = bench_run(&run);
        assert!(
            text.contains("ITL per token; token counts: server's per-chunk count"),
            "{text}"
        );
        // One level without counts makes the whole run's ITL per event.
        run.levels.push(level(TokenSource::Event));
        let text = bench_run(&run);
        assert!(
            text.contains("ITL per event; token counts: per event"),
            "{text}"
        );
        // An open-loop sweep with SLOs: rate asked and sent, goodput, met or not.
        run.settings.request_rate = vec![2.5, 40.0];
        run.settings.slo = Some(shared::bench::Slo {
            ttft_ms: Some(500.0),
            tpot_ms: Some(20.0),
            e2e_ms: None,
            attainment_pct: 90.0,
        });
        let spread = |v: f64| shared::bench::Spread {
            min: v,
            median: v,
            max: v,
        };
        run.levels = [(2.5, 2.49, 2.4, true), (40.0, 39.9, 12.0, false)]
            .map(|(rate, sent, good, met)| LevelSummary {
                concurrency: 64,
                request_rate: Some(rate),
                achieved_rate: Some(spread(sent)),
                goodput_req_s: Some(spread(good)),
                meets_slo: Some(met),
                token_source: TokenSource::ChunkUsage,
                ..LevelSummary::default()
            })
            .to_vec();
        let text = bench_run(&run);
        let head = text.lines().find(|l| l.contains("RATE")).expect("a header");
        assert!(
            head.contains("SENT") && head.contains("GOODPUT") && head.contains("SLO"),
            "{text}"
        );
        assert!(!head.contains("CONC"), "{text}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("2.5 req/s"))
            .expect("a row");
        assert!(row.contains("2.40 req/s") && row.contains("met"), "{row}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("40 req/s"))
            .expect("a row");
        assert!(
            row.contains("missed") && row.contains("12.00 req/s"),
            "{row}"
        );
        assert!(
            text.contains("goodput: requests with TTFT ≤ 500 ms and TPOT ≤ "),
            "{text}"
        );
        assert!(
            text.contains("a level meets the SLOs when 90 % of its requests do"),
            "{text}"
        );
        assert!(!text.contains("WARNING"), "{text}");
        run.levels[1].client_saturated = Some("the load generator was saturated: x".into());
        let text = bench_run(&run);
        assert!(text.contains("WARNING at 40 req/s: the load generator was saturated: x; its numbers measure drainwatch, not the server"), "{text}");
        run.provenance = Some(shared::bench::Provenance {
            drainwatch_version: "0.1.0".into(),
            hostname: "gpu-07".into(),
            simulated: true,
            cuda_version: Some("12.9".into()),
            model: "m".into(),
            revision: Some("abc".into()),
            seed: 9,
            gpus: vec![shared::bench::GpuConditions {
                index: 0,
                power_w: Some(spread(300.0)),
                power_limit_w: Some(450.0),
                temp_c: Some(spread(83.0)),
                samples: 40,
                throttled_samples: 12,
                throttle_reasons: Some(0x4),
                ..shared::bench::GpuConditions::default()
            }],
            ..shared::bench::Provenance::default()
        });
        let text = bench_run(&run);
        assert!(text.contains("measured with: server —, model m@abc, driver —, CUDA 12.9, drainwatch 0.1.0 on gpu-07 (simulated host), seed 9"), "{text}");
        assert!(
            text.contains("GPUs meanwhile (1): power 300–300 W, cap 450 W, temperature 83–83 °C"),
            "{text}"
        );
        assert!(
            text.contains("WARNING throttled: GPU 0: software power cap in 12 of 40 samples"),
            "{text}"
        );
        assert!(
            text.contains("workload: random prompts, 0 → 0 tokens"),
            "{text}"
        );
    }
}
