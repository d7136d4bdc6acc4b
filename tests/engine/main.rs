//! drainwatch managing a real engine: llama.cpp's `llama-server` with Gemma 3
//! 270M on the CPU, through `examples/llamacpp.toml`, beside a simulated GPU
//! host (the GPUs are the fake NVML's; the engine, its tokens, timings, log
//! lines and exits are real). Nothing stands between drainwatch and the
//! engine: every number checked here is checked against what the engine
//! itself says (its per-response `usage` and `timings`, its `/metrics`
//! counters, its `/props`). Every host traces the kernel's signals, and fails
//! its test if one reached a process not drainwatch's own.

mod bench;
mod campaign;
mod lifecycle;

use std::time::Duration;

/// The benchmark settings of the engine tests: small, and without the
/// correctness check unless a test adds it.
pub(crate) fn settings(c: u32, prompts: u32, input: u32, output: u32) -> serde_json::Value {
    serde_json::json!({
        "concurrency": [c],
        "num_prompts": prompts,
        "input_len": input,
        "output_len": output,
        "warmup": 0,
        "repeats": 3,
        "correctness": null,
    })
}

/// A benchmark of a few seconds can take a minute on two busy cores.
pub(crate) const BENCH: Duration = Duration::from_secs(240);
