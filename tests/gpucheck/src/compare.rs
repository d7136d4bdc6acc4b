//! What drainwatch shows against what the reference reads, per GPU: identity,
//! total and used memory, and the processes holding memory; plus the sample
//! cost and the health fields from the same `/api/state`. Pure: JSON in, JSON
//! out.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::gpus::Reading;

const MIB: u64 = 1 << 20;

fn diff(a: u64, b: u64) -> u64 {
    a.abs_diff(b)
}

/// Compares `/api/state` (`state`) with a reference reading taken right after
/// it. Memory agrees within `tol` (a sample is up to one period old); totals
/// within a MiB (nvidia-smi prints MiB).
pub(crate) fn compare(when: &str, state: &Value, reading: &Reading, tol: u64) -> Value {
    let latest = &state["latest"];
    let empty = Vec::new();
    let dw_gpus = latest["gpus"].as_array().unwrap_or(&empty);
    let procs = latest["processes"].as_array().unwrap_or(&empty);
    let gpus: Vec<Value> = reading
        .gpus
        .iter()
        .map(|r| {
            let dw = dw_gpus
                .iter()
                .find(|g| g["index"].as_u64() == Some(u64::from(r.index)));
            let Some(dw) = dw else {
                return json!({"index": r.index, "agree": false, "why": "not in /api/state"});
            };
            let used = dw["mem_used_bytes"].as_u64();
            let total = dw["mem_total_bytes"].as_u64();
            let uuid_agree = dw["uuid"].as_str() == Some(r.uuid.as_str());
            let total_agree = total.is_some_and(|t| diff(t, r.total_bytes) <= MIB);
            let used_agree = used.is_some_and(|u| diff(u, r.used_bytes) <= tol);
            let mine: BTreeMap<u64, Option<u64>> = procs
                .iter()
                .flat_map(|p| {
                    p["gpu_mem"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|m| m["gpu_index"].as_u64() == Some(u64::from(r.index)))
                        .map(move |m| (p["pid"].as_u64().unwrap_or(0), m["used_bytes"].as_u64()))
                })
                .collect();
            let theirs: BTreeMap<u64, Option<u64>> = reading
                .apps
                .iter()
                .filter(|a| a.gpu_index == r.index)
                .map(|a| (u64::from(a.pid), a.used_bytes))
                .collect();
            let same_pids = mine.keys().eq(theirs.keys());
            let same_use = mine.iter().all(|(pid, u)| match (u, theirs.get(pid)) {
                (Some(a), Some(Some(b))) => diff(*a, *b) <= tol,
                _ => true,
            });
            let listing = |m: &BTreeMap<u64, Option<u64>>| -> Vec<Value> {
                m.iter()
                    .map(|(pid, u)| json!({"pid": pid, "used_bytes": u}))
                    .collect()
            };
            json!({
                "index": r.index,
                "uuid": r.uuid,
                "uuid_agree": uuid_agree,
                "mem_total_bytes": {"drainwatch": total, "reference": r.total_bytes},
                "total_agree": total_agree,
                "mem_used_bytes": {"drainwatch": used, "reference": r.used_bytes},
                "used_agree": used_agree,
                "processes": {"drainwatch": listing(&mine), "reference": listing(&theirs)},
                "processes_agree": same_pids && same_use,
                "agree": uuid_agree && total_agree && used_agree && same_pids && same_use,
            })
        })
        .collect();
    let agree =
        !gpus.is_empty() && gpus.len() == dw_gpus.len() && gpus.iter().all(|g| g["agree"] == true);
    json!({
        "when": when,
        "sample_seq": latest["seq"],
        "sample_at_ms": latest["at_ms"],
        "reference_at_ms": reading.started_ms,
        "gpus": gpus,
        "agree": agree,
    })
}

/// The median, 90th percentile and extremes of the samples' `took_us`.
pub(crate) fn sample_cost(took_us: &[u64], interval_ms: u64, gpus: usize) -> Value {
    let mut v = took_us.to_vec();
    v.sort_unstable();
    let at = |q: f64| -> Option<u64> {
        (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * q).round() as usize])
    };
    json!({
        "samples": v.len(),
        "median_us": at(0.5),
        "p90_us": at(0.9),
        "min_us": v.first(),
        "max_us": v.last(),
        "sample_interval_ms": interval_ms,
        "gpus": gpus,
    })
}

/// Every GPU's health fields as the sample has them: those read (with their
/// values), those the GPU does not support, those that failed otherwise, and
/// those empty without an error (such as ECC counts where ECC is off).
pub(crate) fn health(latest: &Value) -> Value {
    let empty = Vec::new();
    let gpus = latest["gpus"].as_array().unwrap_or(&empty);
    let per_gpu: Vec<Value> = gpus
        .iter()
        .map(|g| {
            let errors = g["errors"].as_array().unwrap_or(&empty);
            let not_supported: Vec<&str> = errors
                .iter()
                .filter(|e| e["reason"] == "not supported by this GPU")
                .filter_map(|e| e["field"].as_str())
                .collect();
            let failed: Vec<&Value> = errors
                .iter()
                .filter(|e| e["reason"] != "not supported by this GPU")
                .collect();
            let mut read = serde_json::Map::new();
            let mut absent = Vec::new();
            if let Some(h) = g["health"].as_object() {
                for (k, v) in h {
                    let listed = errors.iter().any(|e| e["field"] == k.as_str());
                    if !v.is_null() {
                        read.insert(k.clone(), v.clone());
                    } else if !listed {
                        absent.push(k.clone());
                    }
                }
            }
            json!({
                "index": g["index"],
                "health_reported": g["health"].is_object(),
                "read": read,
                "not_supported": not_supported,
                "errors": failed,
                "empty": absent,
            })
        })
        .collect();
    json!(per_gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::{RefApp, RefGpu};

    fn state(used: u64, pid: u64) -> Value {
        json!({"latest": {"seq": 7, "at_ms": 1, "gpus": [
            {"index": 0, "uuid": "GPU-a", "mem_total_bytes": 100 * MIB, "mem_used_bytes": used},
        ], "processes": [
            {"pid": pid, "role": "server", "gpu_mem": [{"gpu_index": 0, "used_bytes": 40 * MIB}]},
        ]}})
    }

    fn reading(used: u64) -> Reading {
        Reading {
            started_ms: 2,
            ended_ms: 3,
            gpus: vec![RefGpu {
                index: 0,
                uuid: "GPU-a".into(),
                used_bytes: used,
                total_bytes: 100 * MIB,
            }],
            apps: vec![RefApp {
                gpu_index: 0,
                pid: 42,
                used_bytes: Some(40 * MIB),
            }],
        }
    }

    #[test]
    fn agrees_within_tolerance_and_names_what_differs() {
        let ok = compare("running", &state(50 * MIB, 42), &reading(51 * MIB), 2 * MIB);
        assert_eq!(ok["agree"], true, "{ok}");
        let far = compare("running", &state(50 * MIB, 42), &reading(60 * MIB), 2 * MIB);
        assert_eq!(far["agree"], false);
        assert_eq!(far["gpus"][0]["used_agree"], false);
        let other = compare("running", &state(50 * MIB, 43), &reading(50 * MIB), 2 * MIB);
        assert_eq!(other["gpus"][0]["processes_agree"], false);
    }

    #[test]
    fn sample_cost_takes_the_median() {
        let c = sample_cost(&[900, 700, 800, 1000, 600], 50, 4);
        assert_eq!(c["median_us"], 800);
        assert_eq!(c["max_us"], 1000);
        assert_eq!(c["samples"], 5);
    }

    #[test]
    fn health_lists_read_unsupported_and_failed_fields() {
        let latest = json!({"gpus": [{"index": 0,
            "health": {"sm_clock_mhz": 1980, "ecc": null, "remapped_rows": null, "mig_enabled": null},
            "errors": [{"field": "remapped_rows", "reason": "not supported by this GPU"},
                       {"field": "mig_enabled", "reason": "Unknown error"}]}]});
        let h = health(&latest);
        assert_eq!(h[0]["read"]["sm_clock_mhz"], 1980);
        assert_eq!(h[0]["not_supported"], json!(["remapped_rows"]));
        assert_eq!(h[0]["errors"][0]["field"], "mig_enabled");
        assert_eq!(h[0]["empty"], json!(["ecc"]));
    }
}
