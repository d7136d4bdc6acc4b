//! `cargo xtask gpu-check [--dry-run] [--out DIR]`: builds the check's bundle
//! and runs it. The bundle, `target/gpu-check/`, is what a GPU machine needs,
//! carried there and run without cargo as `gpu-check --out DIR`: release
//! `drainwatch`, `gpuhog` (tests/gpuhog) and `gpu-check` (tests/gpucheck),
//! and the fake `libnvidia_ml.so` for a dry run there, stripped (it must stay
//! under 64 MiB). They are the portable build (`portable`): GPU hosts run old
//! C libraries, and the bundle must start on glibc 2.28. drainwatch embeds
//! `frontend/dist` when it was built and serves a page saying the UI is
//! missing otherwise: the check needs no UI, so none is built here.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{flag, portable, root};

/// What the bundle holds, from the portable build's folder.
const FILES: [&str; 4] = ["gpu-check", "drainwatch", "gpuhog", "libnvidia_ml.so"];
/// The most the bundle may weigh.
const LIMIT: u64 = 64 << 20;

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let dry_run = args.iter().any(|a| a == "--dry-run");
    let out =
        flag(args, "--out").map_or_else(|| root().join("target/gpu-check-report"), PathBuf::from);
    let dir = bundle()?;
    let mut check = Command::new(dir.join("gpu-check"));
    check.arg("--out").arg(&out);
    if dry_run {
        check.arg("--dry-run");
    }
    eprintln!("xtask: $ {}", crate::show(&check));
    let status = check.status().context("cannot run gpu-check")?;
    if !status.success() {
        // 2: no GPU here; 1: a check failed (the report says which).
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// Builds the portable release binaries and copies the bundle's files,
/// stripped, into `target/gpu-check/`; returns that folder.
pub(crate) fn bundle() -> anyhow::Result<PathBuf> {
    let from = portable::build()?;
    let dir = root().join("target/gpu-check");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).context("clearing target/gpu-check")?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut total = 0;
    for name in FILES {
        let to = dir.join(name);
        std::fs::copy(from.join(name), &to)
            .with_context(|| format!("copying {}", from.join(name).display()))?;
        strip(&to);
        let size = std::fs::metadata(&to)?.len();
        println!("bundle: {name}: {:.1} MiB", mib(size));
        total += size;
    }
    println!(
        "bundle: {} holds {:.1} MiB (limit {:.0} MiB); carry it and run `gpu-check --out DIR` there",
        dir.display(),
        mib(total),
        mib(LIMIT)
    );
    if total >= LIMIT {
        bail!(
            "the bundle is {:.1} MiB, over the {:.0} MiB limit",
            mib(total),
            mib(LIMIT)
        );
    }
    Ok(dir)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// `strip` where it is installed (binutils); else the file stays as built.
fn strip(file: &Path) {
    let stripped = Command::new("strip")
        .arg("--strip-unneeded")
        .arg(file)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        eprintln!(
            "xtask: could not strip {} (is binutils' strip installed?)",
            file.display()
        );
    }
}
