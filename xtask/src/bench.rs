//! `cargo xtask bench`: the measurements behind docs/PERFORMANCE.md — sample cost,
//! delivery latency and CPU (tests/benches/live.rs, release build), the real
//! engine's (tests/benches/engine.rs), and the UI bundle's gzipped size.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::{build, cargo, root, run_cmd};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    build::ui()?;
    bundle_size()?;
    build::binaries(true)?;
    let engine = crate::engine::ensure()?;
    let mut bench = cargo();
    bench.args(["bench", "--benches", "--"]).args(args);
    engine.env(&mut bench);
    // The peer client, only for the bench that runs it.
    if args.iter().any(|a| "engine-peer".contains(a.as_str())) {
        let (aiperf, tokenizer) = crate::engine::ensure_aiperf(&engine)?;
        bench
            .env("DRAINWATCH_AIPERF", aiperf)
            .env("DRAINWATCH_AIPERF_TOKENIZER", tokenizer);
    }
    run_cmd(&mut bench)
}

/// Raw and `gzip -9` sizes of what the browser downloads for the app.
fn bundle_size() -> anyhow::Result<()> {
    let dist = root().join("frontend/dist");
    let mut total = (0, 0);
    for file in [
        "frontend_bg.wasm",
        "frontend.js",
        "boot.js",
        "index.html",
        "style.css",
    ] {
        let body =
            std::fs::read(dist.join(file)).with_context(|| format!("reading dist/{file}"))?;
        let gz = gzip_len(&body)?;
        println!(
            "bundle: {file}: {} KiB raw, {} KiB gzipped",
            body.len() / 1024,
            gz / 1024
        );
        total = (total.0 + body.len(), total.1 + gz);
    }
    println!(
        "bundle: total {} KiB raw, {} KiB gzipped",
        total.0 / 1024,
        total.1 / 1024
    );
    Ok(())
}

/// The most the app's code may weigh, `gzip -9`'d: the wasm and its JS glue
/// (docs/PERFORMANCE.md). `cargo xtask test` fails above it.
pub(crate) const BUNDLE_BUDGET: usize = 400 * 1024;

/// Fails when the built app's code (wasm + JS glue, gzipped) is over
/// [`BUNDLE_BUDGET`]; says what it weighs either way.
pub(crate) fn check_bundle_budget() -> anyhow::Result<()> {
    let dist = root().join("frontend/dist");
    let mut total = 0;
    for file in ["frontend_bg.wasm", "frontend.js"] {
        let body =
            std::fs::read(dist.join(file)).with_context(|| format!("reading dist/{file}"))?;
        total += gzip_len(&body)?;
    }
    let kib = |b: usize| b as f64 / 1024.0;
    anyhow::ensure!(
        total <= BUNDLE_BUDGET,
        "the UI bundle is {:.1} KiB gzipped (wasm + js), over its {:.0} KiB budget: see docs/PERFORMANCE.md, \"The bundle\"",
        kib(total),
        kib(BUNDLE_BUDGET)
    );
    eprintln!(
        "xtask: UI bundle {:.1} KiB gzipped (wasm + js), budget {:.0} KiB",
        kib(total),
        kib(BUNDLE_BUDGET)
    );
    Ok(())
}

fn gzip_len(body: &[u8]) -> anyhow::Result<usize> {
    let mut gz = Command::new("gzip")
        .arg("-9c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = gz.stdin.take().context("gzip stdin")?;
    let body = body.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = gz.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    Ok(out.stdout.len())
}
