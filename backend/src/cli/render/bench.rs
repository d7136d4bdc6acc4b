//! A benchmark run as text: its levels, conditions and provenance, its SLO,
//! and the exit code it means for `drainwatch bench`.

use std::fmt::Write as _;

use shared::bench::{BenchRun, LevelSummary, RunStatus, TokenSource};
use shared::units::{MISSING, fmt_ms_pair, fmt_tok_s, rate_num, tok_num, truncate};

use super::table;

/// A benchmark run: status, then one row per concurrency.
pub(in crate::cli) fn bench_run(run: &BenchRun) -> String {
    let mut out = format!(
        "benchmark #{} on flag set {}: {}",
        run.id,
        run.flagset,
        run.status.as_str()
    );
    if let Some(e) = &run.error {
        let _ = write!(out, " ({e})");
    }
    out.push('\n');
    if let Some(c) = &run.correctness {
        let _ = writeln!(
            out,
            "correctness: {} (answer: {})",
            if c.passed { "passed" } else { "WRONG ANSWER" },
            truncate(c.answer.trim(), 80)
        );
    }
    if run.levels.is_empty() {
        return out;
    }
    out.push_str(&level_table(run));
    if let Some(slo) = &run.settings.slo {
        let _ = writeln!(out, "{}", slo_text(slo));
    }
    out.push_str(&level_notes(run));
    let _ = writeln!(
        out,
        "medians of {} repeats; min–max is the output rate's spread",
        run.settings.repeats
    );
    let source = TokenSource::least_exact(run.levels.iter().map(|l| l.token_source));
    let per = if source.per_token() { "token" } else { "event" };
    let _ = writeln!(out, "ITL per {per}; token counts: {}", source.label());
    if let Some(p) = &run.provenance {
        out.push_str(&provenance_text(p));
    }
    out
}

/// One row per level: its rate or concurrency, output (median and spread),
/// total and request rates, goodput and the SLOs where set, latencies, failures.
fn level_table(run: &BenchRun) -> String {
    let open = run.settings.open_loop();
    let slo = run.settings.slo.as_ref();
    let rows: Vec<Vec<String>> = run
        .levels
        .iter()
        .map(|l| {
            let mut row = Vec::new();
            if open {
                row.push(format!("{} req/s", rate_num(l.request_rate.unwrap_or(0.0))));
                row.push(l.achieved_rate.map_or_else(
                    || "—".to_owned(),
                    |a| format!("{} req/s", rate_num(a.median)),
                ));
            } else {
                row.push(l.concurrency.to_string());
            }
            row.extend([
                fmt_tok_s(Some(l.output_tok_s.median)),
                format!(
                    "{}–{}",
                    tok_num(l.output_tok_s.min),
                    tok_num(l.output_tok_s.max)
                ),
                fmt_tok_s(Some(l.total_tok_s.median)),
                format!("{:.2} req/s", l.request_s.median),
            ]);
            if slo.is_some() {
                row.push(
                    l.goodput_req_s
                        .map_or_else(|| "—".to_owned(), |g| format!("{:.2} req/s", g.median)),
                );
                row.push(
                    match l.meets_slo {
                        Some(true) => "met",
                        Some(false) => "missed",
                        None => "—",
                    }
                    .to_owned(),
                );
            }
            row.extend([
                fmt_ms_pair(l.ttft_p50_ms.median, l.ttft_p99_ms.median),
                fmt_ms_pair(l.itl_p50_ms.median, l.itl_p99_ms.median),
                l.failed.to_string(),
            ]);
            row
        })
        .collect();
    let mut head: Vec<&str> = if open {
        vec!["RATE", "SENT"]
    } else {
        vec!["CONC"]
    };
    head.extend(["OUTPUT", "MIN–MAX", "TOTAL", "REQUESTS"]);
    if slo.is_some() {
        head.extend(["GOODPUT", "SLO"]);
    }
    head.extend(["TTFT P50/P99", "ITL P50/P99", "FAILED"]);
    let right: Vec<bool> = head.iter().map(|h| *h != "SLO").collect();
    table(&head, &right, &rows)
}

/// A level's name in a warning: `2 req/s` or `c=16`.
fn level_name(l: &LevelSummary) -> String {
    match l.request_rate {
        Some(r) => format!("{} req/s", rate_num(r)),
        None => format!("c={}", l.concurrency),
    }
}

/// What the numbers do not say by themselves: a level where the client could
/// not keep up, a level whose prompts were not the length asked, and the
/// prompt tokens the server counted.
fn level_notes(run: &BenchRun) -> String {
    let mut out = String::new();
    for l in &run.levels {
        if let Some(why) = &l.client_saturated {
            let _ = writeln!(
                out,
                "WARNING at {}: {why}; its numbers measure drainwatch, not the server",
                level_name(l)
            );
        }
        if let Some(why) = &l.prompt_len_off {
            let _ = writeln!(
                out,
                "WARNING at {}: {why}; this result measured another workload than asked",
                level_name(l)
            );
        }
    }
    let counted: Vec<String> = run
        .levels
        .iter()
        .filter_map(|l| l.prompt_tokens)
        .map(|t| format!("{t:.0}"))
        .collect();
    if !counted.is_empty() {
        let asked = run
            .repeats
            .first()
            .and_then(|m| m.prompt_tokens_asked)
            .map(|a| format!(" (asked {a})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "prompt tokens a request, by the server's count: {}{asked}",
            counted.join(" / ")
        );
    }
    out
}

/// Two lines: what the run measured with, and what the GPUs did meanwhile.
fn provenance_text(p: &shared::bench::Provenance) -> String {
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| MISSING.to_owned());
    let mut out = format!(
        "measured with: server {}, model {}{}, driver {}, CUDA {}, drainwatch {} on {}{}, seed {}\n",
        or(&p.server_version),
        p.model,
        p.revision
            .as_ref()
            .map(|r| format!("@{r}"))
            .unwrap_or_default(),
        or(&p.driver_version),
        or(&p.cuda_version),
        p.drainwatch_version,
        p.hostname,
        if p.simulated { " (simulated host)" } else { "" },
        p.seed
    );
    let w = &p.workload;
    let _ = match (&w.dataset, w.prefix_groups) {
        (Some(name), _) => writeln!(
            out,
            "workload: dataset {name} ({} prompts, sha256 {})",
            w.dataset_prompts.unwrap_or_default(),
            w.dataset_sha256
                .as_deref()
                .map_or("—", |h| &h[..h.len().min(12)])
        ),
        (None, Some(g)) => writeln!(
            out,
            "workload: {g} shared prefixes of {} words, then {} → {} tokens",
            w.prefix_len.unwrap_or_default(),
            w.input_len,
            w.output_len
        ),
        (None, None) => writeln!(
            out,
            "workload: random prompts, {} → {} tokens",
            w.input_len, w.output_len
        ),
    };
    if let Some(sz) = &p.prompt_sizing {
        let _ = writeln!(
            out,
            "prompts sized by {}: {:.2} tokens a word, {:.0} more a prompt",
            sz.by, sz.tokens_per_word, sz.overhead_tokens,
        );
    }
    if let Some(e) = &p.engine {
        let _ = writeln!(
            out,
            "engine: {} {}, model {}, context {} tokens, {} slots",
            e.engine,
            or(&e.build),
            or(&e.model),
            e.ctx_size
                .map_or_else(|| MISSING.to_owned(), |n| n.to_string()),
            e.slots
                .map_or_else(|| MISSING.to_owned(), |n| n.to_string()),
        );
    }
    out.push_str(&gpu_conditions(&p.gpus));
    out
}

/// The GPUs' load, power, cap and temperature while the run was measured, and
/// any throttling; nothing when none was recorded.
fn gpu_conditions(gpus: &[shared::bench::GpuConditions]) -> String {
    let mut out = String::new();
    let spread = |f: fn(&shared::bench::GpuConditions) -> Option<shared::bench::Spread>| {
        let v: Vec<shared::bench::Spread> = gpus.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| {
            (
                v.iter().map(|s| s.min).fold(f64::INFINITY, f64::min),
                v.iter().map(|s| s.max).fold(f64::NEG_INFINITY, f64::max),
            )
        })
    };
    if gpus.is_empty() {
        return out;
    }
    let mut parts = Vec::new();
    if let Some((lo, hi)) = spread(|g| g.util_pct) {
        parts.push(format!("util {lo:.0}–{hi:.0} %"));
    }
    if let Some((lo, hi)) = spread(|g| g.power_w) {
        parts.push(format!("power {lo:.0}–{hi:.0} W"));
    }
    if let Some(cap) = gpus.iter().filter_map(|g| g.power_limit_w).reduce(f64::min) {
        parts.push(format!("cap {cap:.0} W"));
    }
    if let Some((lo, hi)) = spread(|g| g.temp_c) {
        parts.push(format!("temperature {lo:.0}–{hi:.0} °C"));
    }
    let _ = writeln!(out, "GPUs meanwhile ({}): {}", gpus.len(), parts.join(", "));
    for line in gpus.iter().filter_map(|g| g.throttle_line()) {
        let _ = writeln!(out, "WARNING throttled: {line}");
    }
    out
}

/// "goodput: requests with TTFT ≤ 500 ms and TPOT ≤ 20 ms; a level meets the
/// SLOs when 90 % of its requests do".
fn slo_text(slo: &shared::bench::Slo) -> String {
    let parts: Vec<String> = [
        ("TTFT", slo.ttft_ms),
        ("TPOT", slo.tpot_ms),
        ("E2E", slo.e2e_ms),
    ]
    .iter()
    .filter_map(|(n, v)| v.map(|v| format!("{n} ≤ {} ms", shared::units::ms_num(v))))
    .collect();
    format!(
        "goodput: requests with {}; a level meets the SLOs when {} % of its requests do",
        parts.join(" and "),
        rate_num(slo.attainment_pct)
    )
}

/// Whether a finished run is what a script should call success.
pub(in crate::cli) fn bench_exit(run: &BenchRun) -> crate::cli::Exit {
    use crate::cli::Exit;
    match run.status {
        RunStatus::Succeeded if run.correctness.as_ref().is_some_and(|c| !c.passed) => {
            Exit::WrongAnswer
        }
        RunStatus::Succeeded => Exit::Ok,
        RunStatus::Cancelled => Exit::BenchCancelled,
        RunStatus::Failed | RunStatus::Interrupted | RunStatus::Running => Exit::BenchFailed,
    }
}
