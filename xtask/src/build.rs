//! Builds the UI into `frontend/dist` and the host binaries; with `--release`,
//! the portable `drainwatch` a host installs (`target/dist/drainwatch`).

use std::process::Command;

use anyhow::Context;

use crate::{cargo, root, run_cmd, tools};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let release = args.iter().any(|a| a == "--release");
    ui()?;
    if !release {
        return binaries(false);
    }
    // The UI is embedded now that it is built; the binary starts on glibc 2.28+.
    let from = crate::portable::build()?;
    let dist = root().join("target/dist");
    std::fs::create_dir_all(&dist)?;
    let to = dist.join("drainwatch");
    // A new file, not an overwrite: a running drainwatch keeps its own.
    let _ = std::fs::remove_file(&to);
    std::fs::copy(from.join("drainwatch"), &to)
        .with_context(|| format!("copying drainwatch into {}", dist.display()))?;
    println!(
        "build: {} (release, UI embedded, glibc {} or later)",
        to.display(),
        crate::portable::GLIBC
    );
    Ok(())
}

/// Flags for the UI's wasm32 build; see `ui`.
const UI_RUSTFLAGS: &str = concat!(
    // Leptos's type-erased components: a smaller bundle, a faster build.
    "--cfg erase_components",
    // A panic is a trap: no formatting machinery, no messages, no unwinding tables.
    " -Zunstable-options -Cpanic=immediate-abort",
    // No file/line/column strings for panics that can no longer print them.
    " -Zlocation-detail=none",
    // `{:?}` prints nothing: the UI shows no Debug output (tests run on the host).
    " -Zfmt-debug=none",
);

/// wasm32 release build, then wasm-bindgen, then the static files.
///
/// The standard library is compiled from source with the bundle's own settings
/// (`-Zbuild-std`), which removes about 29 KiB gzipped of panic and formatting
/// code that the prebuilt std carries (docs/PERFORMANCE.md). These are unstable
/// options, enabled on the stable toolchain with `RUSTC_BOOTSTRAP=1` for this one
/// build only: the host binaries and every test build without it.
pub(crate) fn ui() -> anyhow::Result<()> {
    tools::ensure_wasm_target()?;
    tools::ensure_rust_src()?;
    tools::ensure_wasm_bindgen()?;
    run_cmd(
        cargo()
            .env("RUSTC_BOOTSTRAP", "1")
            .env(
                "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
                UI_RUSTFLAGS,
            )
            .args([
                "build",
                "-p",
                "frontend",
                "--target",
                "wasm32-unknown-unknown",
                "--profile",
                "wasm-release",
                "-Zbuild-std=std,panic_abort",
            ]),
    )?;
    let root = root();
    let staging = root.join("target/ui-staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).context("clearing target/ui-staging")?;
    }
    std::fs::create_dir_all(&staging)?;
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
            .arg(&staging)
            .arg(&wasm),
    )?;
    for file in ["index.html", "style.css", "boot.js"] {
        std::fs::copy(root.join("frontend").join(file), staging.join(file))
            .with_context(|| format!("copying frontend/{file}"))?;
    }
    sync_dir(&staging, &root.join("frontend/dist"))
}

/// Makes `dst` hold exactly `src`'s files, touching only those that differ: the
/// backend embeds `dst` and rebuilds whenever anything in it changes.
fn sync_dir(src: &std::path::Path, dst: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dst)?;
    let mut keep = std::collections::HashSet::new();
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let name = entry.file_name();
        let body = std::fs::read(entry.path())?;
        let target = dst.join(&name);
        if std::fs::read(&target).ok().as_deref() != Some(body.as_slice()) {
            std::fs::write(&target, &body)
                .with_context(|| format!("writing {}", target.display()))?;
        }
        keep.insert(name);
    }
    for entry in std::fs::read_dir(dst)? {
        let entry = entry?;
        if !keep.contains(&entry.file_name()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Builds every default member's libraries and binaries (drainwatch, the fake
/// NVML cdylib, the simulated server, the test tools) and links
/// `libnvidia-ml.so.1` beside the fake.
pub(crate) fn binaries(release: bool) -> anyhow::Result<()> {
    // The workspace's host binaries include the tests' kernel emulation, which
    // links Debian's libseccomp.
    tools::ensure_libseccomp()?;
    let mut cmd = cargo();
    cmd.arg("build");
    if release {
        cmd.arg("--release");
    }
    run_cmd(&mut cmd)?;
    link_nvml(release).map(|_| ())
}

/// What the demo runs and nothing more: drainwatch, the simulated server and
/// the fake NVML (debug builds). A first demo on a bare machine builds no test
/// tool and installs no system package. Its dependencies' features unify
/// over these three packages only: after the tests' build (which unifies
/// over every package and its dev-dependencies) the demo recompiles the
/// dependencies whose features differ, about a minute on 2 cores.
pub(crate) fn demo_binaries() -> anyhow::Result<()> {
    run_cmd(cargo().args([
        "build",
        "-p",
        "drainwatch",
        "-p",
        "simserver",
        "-p",
        "fake-nvml",
    ]))?;
    link_nvml(false).map(|_| ())
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
