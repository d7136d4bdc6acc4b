//! The report: one JSON document of everything measured (`gpu-check.json`)
//! and a short human summary of it (`gpu-check.txt`), which is also printed.
//! A check that fails says which, in `failures`; what was measured before it
//! failed is still written.

use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value, json};

/// The report as it is filled in.
#[derive(Debug, Default)]
pub(crate) struct Report {
    fields: Map<String, Value>,
    failures: Vec<String>,
    notes: Vec<String>,
}

impl Report {
    pub(crate) fn set(&mut self, key: &str, value: Value) {
        self.fields.insert(key.to_owned(), value);
    }

    /// Appends to the array under `key`.
    pub(crate) fn push(&mut self, key: &str, value: Value) {
        let slot = self
            .fields
            .entry(key.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(a) = slot.as_array_mut() {
            a.push(value);
        }
    }

    /// A check that did not hold.
    pub(crate) fn fail(&mut self, why: impl Into<String>) {
        self.failures.push(why.into());
    }

    /// Something the reader should know (what was compared with what, say).
    pub(crate) fn note(&mut self, what: impl Into<String>) {
        self.notes.push(what.into());
    }

    pub(crate) fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The whole document.
    pub(crate) fn json(&self) -> Value {
        let mut m = self.fields.clone();
        m.insert("passed".to_owned(), json!(self.passed()));
        m.insert("failures".to_owned(), json!(self.failures));
        m.insert("notes".to_owned(), json!(self.notes));
        Value::Object(m)
    }

    /// Writes `gpu-check.json` and `gpu-check.txt` into `dir`; returns the text.
    pub(crate) fn write(&self, dir: &Path) -> anyhow::Result<String> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let doc = self.json();
        let text = summary(&doc);
        std::fs::write(dir.join("gpu-check.json"), serde_json::to_vec_pretty(&doc)?)
            .context("writing gpu-check.json")?;
        std::fs::write(dir.join("gpu-check.txt"), &text).context("writing gpu-check.txt")?;
        Ok(text)
    }
}

fn ms(v: &Value) -> String {
    v.as_i64()
        .map_or_else(|| "?".to_owned(), |n| format!("{n} ms"))
}

fn gib(v: &Value) -> String {
    v.as_u64().map_or_else(
        || "?".to_owned(),
        |b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
    )
}

/// How many GPUs of a comparison agree.
fn agreeing(c: &Value) -> String {
    let gpus = c["gpus"].as_array().map_or(&[][..], Vec::as_slice);
    let ok = gpus.iter().filter(|g| g["agree"] == true).count();
    format!(
        "{} {ok}/{} agree",
        c["when"].as_str().unwrap_or("?"),
        gpus.len()
    )
}

fn restart_line(r: &Value) -> String {
    let per_gpu: Vec<String> = r["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| {
            // Back before the server's last process exited: that GPU's own
            // processes went earlier (an orphan elsewhere lived on).
            let after_exit = match g["exit_to_back_ms"].as_i64() {
                Some(n) if n < 0 => "before the last exit".to_owned(),
                _ => ms(&g["exit_to_back_ms"]),
            };
            format!(
                "GPU {} {} / {after_exit}",
                g["gpu"],
                ms(&g["sigterm_to_back_ms"]),
            )
        })
        .collect();
    let lags: Vec<String> = r["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| ms(&g["verify_after_reference_back_ms"]))
        .collect();
    format!(
        "restart draining {}: {}; SIGTERM→exit {}{}; memory released {} after the last exit\n  memory back per GPU (SIGTERM→back / exit→back): {}\n  verified after the reference saw memory back: {} (verify − reference back: {}; {} reference polls, median gap {})",
        r["drained_mode"].as_str().unwrap_or("?"),
        r["outcome"].as_str().unwrap_or("?"),
        ms(&r["sigterm_to_exit_ms"]),
        if r["sigkill_at_ms"].is_null() {
            ""
        } else {
            " (SIGKILL after the drain timeout)"
        },
        ms(&r["release_after_last_exit_ms"]),
        per_gpu.join(", "),
        if r["verified_after_memory_back"] == true {
            "yes"
        } else {
            "NO"
        },
        lags.join(", "),
        r["reference_polls"],
        ms(&r["reference_poll_gap_ms_median"]),
    )
}

/// The short human summary of a report.
pub(crate) fn summary(doc: &Value) -> String {
    let mut out = Vec::new();
    let verdict = if doc["passed"] == true {
        "PASSED"
    } else {
        "FAILED"
    };
    out.push(format!(
        "gpu-check {verdict}{} in {:.1} s",
        if doc["simulated"] == true {
            " (simulated: the fake NVML and gpuhog --sim, no real GPU)"
        } else {
            " on real hardware"
        },
        doc["elapsed_ms"].as_f64().unwrap_or(0.0) / 1e3
    ));
    let h = &doc["host"];
    out.push(format!(
        "host {}: driver {}, NVML {}, CUDA driver API {}",
        h["hostname"].as_str().unwrap_or("?"),
        h["driver_version"].as_str().unwrap_or("?"),
        h["nvml_version"].as_str().unwrap_or("?"),
        h["cuda_driver_version"]
    ));
    for g in h["gpus"].as_array().into_iter().flatten() {
        out.push(format!(
            "  GPU {}: {} {} ({})",
            g["index"],
            g["name"].as_str().unwrap_or("?"),
            gib(&g["mem_total_bytes"]),
            g["uuid"].as_str().unwrap_or("?")
        ));
    }
    let s = &doc["setup"];
    out.push(format!(
        "gpuhog on GPUs {} holding {} each; drainwatch sampling every {} ms; containment: {}",
        s["gpus"],
        gib(&s["bytes_per_gpu"]),
        s["sample_interval_ms"],
        s["containment"].as_str().unwrap_or("?")
    ));
    out.push(format!(
        "reference: {}",
        doc["reference"]["source"].as_str().unwrap_or("?")
    ));
    let cmp: Vec<String> = doc["comparisons"]
        .as_array()
        .into_iter()
        .flatten()
        .map(agreeing)
        .collect();
    out.push(format!("/api/state vs reference: {}", cmp.join("; ")));
    let c = &doc["sample_cost"];
    out.push(format!(
        "sample cost: median {} µs, p90 {} µs, max {} µs over {} samples",
        c["median_us"], c["p90_us"], c["max_us"], c["samples"]
    ));
    for r in doc["restarts"].as_array().into_iter().flatten() {
        out.push(restart_line(r));
    }
    for g in doc["health"].as_array().into_iter().flatten() {
        let read = g["read"].as_object().map_or(0, Map::len);
        let list = |v: &Value| -> String {
            let names: Vec<&str> = v
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().or_else(|| x["field"].as_str()))
                .collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        out.push(format!(
            "health GPU {}: {read} fields read; not supported: {}; errors: {}; empty: {}",
            g["index"],
            list(&g["not_supported"]),
            list(&g["errors"]),
            list(&g["empty"])
        ));
    }
    let k = &doc["cleanup"];
    out.push(format!(
        "cleanup: server stopped: {}; drainwatch: {}; left running: {} ({} server processes seen, {} still alive)",
        k["server_stopped"],
        k["drainwatch_exit"].as_str().unwrap_or("?"),
        k["left_running"].as_array().map_or(0, Vec::len),
        k["server_processes_seen"],
        k["server_processes_alive"].as_array().map_or(0, Vec::len),
    ));
    for n in doc["notes"].as_array().into_iter().flatten() {
        out.push(format!("note: {}", n.as_str().unwrap_or("?")));
    }
    for f in doc["failures"].as_array().into_iter().flatten() {
        out.push(format!("FAILED: {}", f.as_str().unwrap_or("?")));
    }
    out.join("\n") + "\n"
}
