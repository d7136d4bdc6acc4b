//! Installs what builds and tests need, only when missing: the wasm32 target, the
//! wasm-bindgen CLI at exactly Cargo.lock's version (built from crates.io: prebuilt
//! downloads do not work everywhere), Debian's Chromium + chromedriver, and for
//! the tests that run other NVML clients Debian's python3 + pip, NVIDIA's
//! nvidia-ml-py, nvitop and gpustat.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};

use crate::{output, root, run_cmd};

pub(crate) fn ensure_wasm_target() -> anyhow::Result<()> {
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed
        .lines()
        .any(|l| l.trim() == "wasm32-unknown-unknown")
    {
        return Ok(());
    }
    run_cmd(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))
}

/// The standard library's source, which the UI build compiles with the bundle's
/// own settings (see `build::ui`).
pub(crate) fn ensure_rust_src() -> anyhow::Result<()> {
    let installed = output(Command::new("rustup").args(["component", "list", "--installed"]))
        .unwrap_or_default();
    if installed.lines().any(|l| l.trim() == "rust-src") {
        return Ok(());
    }
    run_cmd(Command::new("rustup").args(["component", "add", "rust-src"]))
}

/// rustfmt and clippy, which `test` runs (rustup's minimal profile lacks them).
pub(crate) fn ensure_lint_tools() -> anyhow::Result<()> {
    let installed = output(Command::new("rustup").args(["component", "list", "--installed"]))
        .unwrap_or_default();
    let missing: Vec<&str> = ["rustfmt", "clippy"]
        .into_iter()
        .filter(|c| !installed.lines().any(|l| l.starts_with(&format!("{c}-"))))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    run_cmd(
        Command::new("rustup")
            .args(["component", "add"])
            .args(&missing),
    )
}

/// The wasm-bindgen version Cargo.lock pins: the CLI must match it exactly.
pub(crate) fn locked_wasm_bindgen() -> anyhow::Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).context("reading Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|v| v.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_owned());
        }
    }
    bail!("Cargo.lock has no wasm-bindgen entry")
}

pub(crate) fn ensure_wasm_bindgen() -> anyhow::Result<()> {
    let want = locked_wasm_bindgen()?;
    let have = output(Command::new("wasm-bindgen").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) == Some(want.as_str()) {
        return Ok(());
    }
    eprintln!("xtask: installing wasm-bindgen-cli {want} (a few minutes, once)");
    // Not --locked: the CLI's own lockfile pins crates some registries lack.
    run_cmd(crate::cargo().args(["install", "wasm-bindgen-cli", "--version", &want, "--force"]))
}

/// Debian's Prometheus server and promtool, for the tests of `deploy/prometheus/`.
pub(crate) fn ensure_prometheus() -> anyhow::Result<()> {
    if Path::new("/usr/bin/prometheus").exists() && Path::new("/usr/bin/promtool").exists() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's prometheus (server and promtool) for the fleet tests");
    apt_install(&["prometheus"])
        .context("installing prometheus (Debian/Ubuntu with apt is required for its tests)")
}

/// Debian's libseccomp-dev: `kernelsim`, the tests' older-kernel emulation,
/// links the C library.
pub(crate) fn ensure_libseccomp() -> anyhow::Result<()> {
    if Path::new("/usr/include/seccomp.h").exists() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's libseccomp-dev for the kernel emulation of the tests");
    apt_install(&["libseccomp-dev", "pkg-config"])
        .context("installing libseccomp-dev (Debian/Ubuntu with apt is required for the tests)")
}

pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";
pub(crate) const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

pub(crate) fn ensure_chromium() -> anyhow::Result<()> {
    if Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's chromium and chromium-driver for browser tests");
    apt_install(&["chromium", "chromium-driver"])
        .context("installing chromium (Debian/Ubuntu with apt is required for browser tests)")
}

/// Installs Debian packages with apt-get, as root or through sudo. The package
/// lists are refreshed once per run (a bare image has none).
fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    static UPDATED: AtomicBool = AtomicBool::new(false);
    let sudo: &[&str] = if is_root() { &[] } else { &["sudo"] };
    let apt = |args: &[&str]| {
        let mut all: Vec<&str> = sudo.to_vec();
        all.push("apt-get");
        all.extend_from_slice(args);
        let mut c = Command::new(all[0]);
        c.args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    if !UPDATED.load(Ordering::SeqCst) {
        run_cmd(&mut apt(&["update"]))?;
        UPDATED.store(true, Ordering::SeqCst);
    }
    run_cmd(apt(&["install", "-y", "--no-install-recommends"]).args(packages))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Debian's `python3` (the tests of other NVML clients run it) and, when
/// `with_pip`, its pip (python3-pip, to install those clients).
pub(crate) fn ensure_python(with_pip: bool) -> anyhow::Result<()> {
    let runs = |args: &[&str]| output(Command::new("python3").args(args)).is_some();
    let mut missing = Vec::new();
    if !runs(&["--version"]) {
        missing.push("python3");
    }
    if with_pip && !runs(&["-m", "pip", "--version"]) {
        missing.push("python3-pip");
    }
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing Debian's {} for the tests of other NVML clients",
        missing.join(" and ")
    );
    apt_install(&missing)
        .context("installing python3 (Debian/Ubuntu with apt is required for the python tests)")
}

/// NVIDIA's Python NVML binding, of the driver generation the fake claims: the
/// pynvml test's, and the one nvitop and gpustat load.
const NVIDIA_ML_PY: &str = "12.575.51";

/// NVIDIA's Python NVML binding in `target/pynvml` (a test checks that it reads
/// what drainwatch reads).
pub(crate) fn ensure_pynvml() -> anyhow::Result<PathBuf> {
    pip_target(
        &root().join("target/pynvml"),
        &[("nvidia-ml-py", NVIDIA_ML_PY)],
    )
}

/// nvitop and gpustat, the GPU monitors operators run, in `target/pytools`
/// with everything they import, each pinned (a test checks that they read the
/// fake without an error and agree with drainwatch). Both import pynvml:
/// theirs is [`NVIDIA_ML_PY`], the pynvml test's.
pub(crate) fn ensure_pytools() -> anyhow::Result<PathBuf> {
    pip_target(
        &root().join("target/pytools"),
        &[
            ("nvitop", "1.7.2"),
            ("gpustat", "1.1.1"),
            ("nvidia-ml-py", NVIDIA_ML_PY),
            ("psutil", "7.2.2"),
            // gpustat's terminal library, and its own two.
            ("blessed", "1.53.0"),
            ("wcwidth", "0.9.5"),
            ("jinxed", "2.1.1"),
        ],
    )
}

/// Installs exactly `packages` (name, version) with python3's pip into
/// `path`, unless every one is there already at its version. No dependency is resolved: the list is the whole closure, so
/// every run installs the same files.
pub(crate) fn pip_target(path: &Path, packages: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let installed = packages.iter().all(|(name, version)| {
        let dist = format!("{}-{version}.dist-info", name.replace('-', "_"));
        path.join(dist).is_dir()
    });
    ensure_python(!installed)?;
    if installed {
        return Ok(path.to_owned());
    }
    let specs: Vec<String> = packages
        .iter()
        .map(|(name, version)| format!("{name}=={version}"))
        .collect();
    eprintln!(
        "xtask: installing {} into {}",
        specs.join(" "),
        path.display()
    );
    let _ = std::fs::remove_dir_all(path);
    // `--target` is not an install into the system's Python, so Debian's pip
    // allows it (PEP 668's externally-managed check skips --target, --prefix, --root).
    run_cmd(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .arg("--target")
            .arg(path)
            .args(&specs),
    )
    .with_context(|| format!("installing {} with python3's pip", path.display()))?;
    Ok(path.to_owned())
}
