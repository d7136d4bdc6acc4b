//! Builds the UI into `frontend/dist` and the host binaries.

use std::process::Command;

use anyhow::Context;

use crate::{cargo, root, run_cmd, tools};

/// Host binaries the demo and tests run (the fake NVML cdylib among them).
pub(crate) const HOST_PACKAGES: &[&str] = &["drainwatch", "fake-nvml", "simserver"];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let release = args.iter().any(|a| a == "--release");
    ui()?;
    binaries(release)
}

/// wasm32 release build, then wasm-bindgen, then the static files.
pub(crate) fn ui() -> anyhow::Result<()> {
    tools::ensure_wasm_target()?;
    tools::ensure_wasm_bindgen()?;
    run_cmd(cargo().args([
        "build",
        "-p",
        "frontend",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        "wasm-release",
    ]))?;
    let root = root();
    let dist = root.join("frontend/dist");
    if dist.exists() {
        std::fs::remove_dir_all(&dist).context("clearing frontend/dist")?;
    }
    std::fs::create_dir_all(&dist)?;
    let wasm = root.join("target/wasm32-unknown-unknown/wasm-release/frontend.wasm");
    // No wasm-opt: some distributions' binaryen breaks wasm-bindgen's output.
    run_cmd(
        Command::new("wasm-bindgen")
            .args([
                "--target",
                "web",
                "--no-typescript",
                "--remove-name-section",
                "--out-dir",
            ])
            .arg(&dist)
            .arg(&wasm),
    )?;
    for file in ["index.html", "style.css"] {
        std::fs::copy(root.join("frontend").join(file), dist.join(file))
            .with_context(|| format!("copying frontend/{file}"))?;
    }
    Ok(())
}

/// Builds the host packages and links `libnvidia-ml.so.1` beside the fake.
pub(crate) fn binaries(release: bool) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.arg("build");
    for p in HOST_PACKAGES {
        cmd.args(["-p", p]);
    }
    if release {
        cmd.arg("--release");
    }
    run_cmd(&mut cmd)?;
    link_nvml(release).map(|_| ())
}

/// `target/<profile>/nvml/libnvidia-ml.so.1` → the fake; returns the link's path.
pub(crate) fn link_nvml(release: bool) -> anyhow::Result<std::path::PathBuf> {
    let dir = profile_dir(release);
    let nvml_dir = dir.join("nvml");
    std::fs::create_dir_all(&nvml_dir)?;
    let link = nvml_dir.join("libnvidia-ml.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(dir.join("libnvidia_ml.so"), &link)
        .context("linking libnvidia-ml.so.1")?;
    Ok(link)
}

pub(crate) fn profile_dir(release: bool) -> std::path::PathBuf {
    root()
        .join("target")
        .join(if release { "release" } else { "debug" })
}
