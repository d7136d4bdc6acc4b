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
