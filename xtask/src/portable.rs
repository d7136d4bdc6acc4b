//! The binaries drainwatch ships, built to start on glibc 2.28 and later (RHEL 8,
//! Ubuntu 20.04, Debian 10 onward): `drainwatch`, and the `gpu-check` bundle's
//! runner, `gpuhog` and fake NVML. NVML is loaded at run time with `dlopen`, so
//! a static musl binary cannot serve; instead `cargo-zigbuild` links against
//! zig's glibc 2.28 stubs (the target `x86_64-unknown-linux-gnu.2.28`), and the
//! binaries take the newer symbol versions of the host's glibc nowhere.
//!
//! cargo-zigbuild (crates.io) and zig (the `ziglang` wheel, PyPI) are installed
//! once into the cache outside the clone, keyed by version. The build has its
//! own target folder, `target/<triple>/release`: the tests' debug build and the
//! benchmarks' native release build are left as they are.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::{cargo, engine, root, run_cmd, tools};

/// The oldest glibc the binaries start on.
pub(crate) const GLIBC: &str = "2.28";
/// cargo-zigbuild and zig, pinned: every machine links the same way.
const CARGO_ZIGBUILD: &str = "0.24.1";
const ZIGLANG: &str = "0.15.2";
/// Built together, always as one set, so features unify the same way in every
/// portable build and a second one rebuilds nothing.
const PACKAGES: [&str; 4] = ["drainwatch", "gpucheck", "gpuhog", "fake-nvml"];

/// The Rust target without the glibc suffix (the host's architecture).
fn triple() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// Builds the shipped binaries (release) for glibc [`GLIBC`]; returns the
/// folder they are in.
pub(crate) fn build() -> anyhow::Result<PathBuf> {
    let zig = ensure_zig()?;
    let zigbuild = ensure_cargo_zigbuild()?;
    let triple = triple();
    let mut cmd = Command::new(zigbuild);
    cmd.args(["zigbuild", "--release", "--target"])
        .arg(format!("{triple}.{GLIBC}"))
        .env("CARGO_ZIGBUILD_ZIG_PATH", &zig)
        // cargo-zigbuild runs cargo itself: the same one as this task.
        .env("CARGO", cargo().get_program());
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    run_cmd(&mut cmd)?;
    Ok(root().join("target").join(triple).join("release"))
}

/// zig from the `ziglang` wheel, in the cache; returns the `zig` executable.
fn ensure_zig() -> anyhow::Result<PathBuf> {
    let dir = engine::cache_dir().join(format!("ziglang-{ZIGLANG}"));
    tools::pip_target(&dir, &[("ziglang", ZIGLANG)])?;
    let zig = dir.join("ziglang/zig");
    anyhow::ensure!(
        zig.is_file(),
        "the ziglang wheel holds no {}",
        zig.display()
    );
    Ok(zig)
}

/// cargo-zigbuild built from crates.io into the cache; returns its executable.
fn ensure_cargo_zigbuild() -> anyhow::Result<PathBuf> {
    let dir = engine::cache_dir().join(format!("cargo-zigbuild-{CARGO_ZIGBUILD}"));
    let bin = dir.join("bin/cargo-zigbuild");
    if runs(&bin) {
        return Ok(bin);
    }
    eprintln!(
        "xtask: installing cargo-zigbuild {CARGO_ZIGBUILD} into {} (a minute, once)",
        dir.display()
    );
    run_cmd(
        cargo()
            .args([
                "install",
                "cargo-zigbuild",
                "--locked",
                "--version",
                CARGO_ZIGBUILD,
                "--root",
            ])
            .arg(&dir),
    )?;
    Ok(bin)
}

fn runs(bin: &Path) -> bool {
    Command::new(bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Debian 11's glibc (2.31, the C library of Ubuntu 20.04 too) and its
/// libgcc_s, unpacked into the cache: the tests run the bundle on it. Fetched
/// with apt from Debian's archive under a sources list of its own, so the
/// machine's apt configuration is left untouched. Returns the folder whose
/// `lib/<arch>-linux-gnu` holds the libraries.
pub(crate) fn ensure_old_glibc() -> anyhow::Result<PathBuf> {
    let dir = engine::cache_dir().join("glibc-2.31-debian11");
    let root_dir = dir.join("root");
    let libc = root_dir.join(format!(
        "lib/{}-linux-gnu/libc.so.6",
        std::env::consts::ARCH
    ));
    if libc.exists() {
        return Ok(root_dir);
    }
    eprintln!(
        "xtask: fetching Debian 11's libc6 and libgcc-s1 (glibc 2.31) into {}",
        dir.display()
    );
    let apt_dir = dir.join("apt");
    for d in ["lists/partial", "archives/partial"] {
        std::fs::create_dir_all(apt_dir.join(d))?;
    }
    let sources = apt_dir.join("sources.list");
    std::fs::write(
        &sources,
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
         http://deb.debian.org/debian bullseye main\n",
    )?;
    let opt = |k: &str, v: &Path| format!("-o{k}={}", v.display());
    let apt = |args: &[&str]| {
        let mut c = Command::new("apt-get");
        c.arg(opt("Dir::Etc::SourceList", &sources))
            .arg("-oDir::Etc::SourceParts=/nonexistent")
            .arg(opt("Dir::State::Lists", &apt_dir.join("lists")))
            // Not the machine's installed packages: every candidate is Debian 11's.
            .arg("-oDir::State::status=/dev/null")
            .arg(opt("Dir::Cache", &apt_dir))
            .arg("-oDir::Cache::pkgcache=")
            .arg("-oDir::Cache::srcpkgcache=")
            .arg("-oAPT::Sandbox::User=root")
            .args(args)
            .current_dir(&apt_dir);
        c
    };
    run_cmd(&mut apt(&["update"]))
        .context("reading Debian 11's package lists (apt and deb.debian.org are required)")?;
    // run_cmd runs in the workspace root; `download` writes to the current folder.
    let status = apt(&["download", "libc6", "libgcc-s1"])
        .status()
        .context("running apt-get download")?;
    anyhow::ensure!(
        status.success(),
        "apt-get download libc6 libgcc-s1 failed ({status})"
    );
    let _ = std::fs::remove_dir_all(&root_dir);
    for entry in std::fs::read_dir(&apt_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "deb") {
            run_cmd(Command::new("dpkg-deb").arg("-x").arg(&path).arg(&root_dir))?;
            std::fs::remove_file(&path)?;
        }
    }
    anyhow::ensure!(
        libc.exists(),
        "Debian 11's libc6 holds no {}",
        libc.display()
    );
    // The package lists (12 MB) have served: the cache keeps the libraries.
    let _ = std::fs::remove_dir_all(&apt_dir);
    Ok(root_dir)
}
