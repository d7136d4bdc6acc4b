//! The shipped binaries start on the C libraries GPU hosts run (RHEL 8's glibc
//! 2.28, Ubuntu 20.04's 2.31 and later). The portable `gpu-check` bundle,
//! which `cargo xtask test` builds and names in `DRAINWATCH_BUNDLE`:
//! - needs no glibc symbol version newer than 2.28, read from each file's ELF
//!   version needs, which are what the dynamic loader checks at start;
//! - passes its dry run on a real older glibc: Debian 11's 2.31 (the version
//!   Ubuntu 20.04 ships), fetched by `cargo xtask test` and named in
//!   `DRAINWATCH_OLD_GLIBC`, mounted over this machine's own in a mount
//!   namespace of the runner's, so that drainwatch and gpuhog, which it
//!   starts, load it too.
//!
//! The control: what this machine builds natively (glibc 2.36) needs more, the
//! reader says so, and the older glibc refuses to start it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::Endianness;
use object::read::elf::ElfFile64;
use serde_json::Value;

/// What the bundle holds, each of which a host runs or loads.
const FILES: [&str; 4] = ["gpu-check", "drainwatch", "gpuhog", "libnvidia_ml.so"];
/// The oldest glibc the binaries start on: RHEL 8's.
const OLDEST: [u32; 2] = [2, 28];
/// The runner as this machine builds it for the tests (not portable).
const NATIVE_RUNNER: &str = env!("CARGO_BIN_EXE_gpu-check");

fn from_env(var: &str, what: &str) -> PathBuf {
    let dir = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run `cargo xtask test`, which builds {what} and sets it")
    });
    assert!(dir.is_dir(), "{var}={} is not a folder", dir.display());
    dir
}

/// The portable bundle, `target/gpu-check/`.
fn bundle() -> PathBuf {
    let dir = from_env("DRAINWATCH_BUNDLE", "the portable gpu-check bundle");
    for f in FILES {
        assert!(
            dir.join(f).is_file(),
            "{} is missing",
            dir.join(f).display()
        );
    }
    dir
}

/// Debian 11's libraries: the folder holding `libc.so.6` and its loader.
fn old_glibc() -> PathBuf {
    let root = from_env("DRAINWATCH_OLD_GLIBC", "Debian 11's glibc");
    let dir = root.join(format!("lib/{}-linux-gnu", std::env::consts::ARCH));
    assert!(dir.join("libc.so.6").exists(), "{}", dir.display());
    dir
}

/// Every symbol version `path` needs: (library, version), e.g.
/// ("libc.so.6", "GLIBC_2.28").
fn needed_versions(path: &Path) -> Vec<(String, String)> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = ElfFile64::<Endianness>::parse(&*data)
        .unwrap_or_else(|e| panic!("{} is not a 64-bit ELF file: {e}", path.display()));
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    let Some((mut needs, link)) = sections.gnu_verneed(endian, &*data).expect("version needs")
    else {
        return Vec::new();
    };
    let strings = sections
        .strings(endian, &*data, link)
        .expect("the version needs' strings");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut all = Vec::new();
    while let Some((need, mut aux)) = needs.next().expect("a version need") {
        let file = text(need.file(endian, strings).expect("a library name"));
        while let Some(a) = aux.next().expect("a needed version") {
            all.push((
                file.clone(),
                text(a.name(endian, strings).expect("a version name")),
            ));
        }
    }
    all
}

/// "GLIBC_2.2.5" → [2, 2, 5]; `None` for anything else (GLIBC_PRIVATE, GCC_3.0).
fn glibc_version(name: &str) -> Option<Vec<u32>> {
    name.strip_prefix("GLIBC_")?
        .split('.')
        .map(|n| n.parse().ok())
        .collect()
}

/// The newest glibc version `path` needs, and every version it needs above `than`.
fn newest_glibc(path: &Path, than: &[u32]) -> (Vec<u32>, Vec<String>) {
    let needs = needed_versions(path);
    let mut newest = Vec::new();
    let mut above = Vec::new();
    for (_, name) in &needs {
        let Some(v) = glibc_version(name) else {
            continue;
        };
        if v.as_slice() > than {
            above.push(name.clone());
        }
        newest = newest.max(v);
    }
    assert!(
        !newest.is_empty(),
        "{} needs no glibc version at all: {needs:?}",
        path.display()
    );
    above.sort();
    above.dedup();
    (newest, above)
}

fn dotted(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
}

/// Makes `cmd` run in a mount namespace of its own where each library of
/// `old` that this machine also has (`libc.so.6`, the loader, `libm.so.6`,
/// `libgcc_s.so.1`…) is bind-mounted over this machine's file: the program
/// and everything it starts load the older C library, as on an older host.
#[allow(unsafe_code)]
fn on_older_glibc(cmd: &mut Command, old: &Path) {
    let here = PathBuf::from(format!("/lib/{}-linux-gnu", std::env::consts::ARCH));
    let mut binds: Vec<(CString, CString)> = Vec::new();
    let mut replaced = Vec::new();
    for entry in std::fs::read_dir(old).expect("the older glibc's folder") {
        let name = entry.expect("an entry").file_name();
        let (Ok(src), Ok(dst)) = (
            std::fs::canonicalize(old.join(&name)),
            std::fs::canonicalize(here.join(&name)),
        ) else {
            continue;
        };
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("no NUL");
        let dst = c(&dst);
        if !src.is_file() || binds.iter().any(|(_, d)| *d == dst) {
            continue;
        }
        binds.push((c(&src), dst));
        replaced.push(name.to_string_lossy().into_owned());
    }
    assert!(
        replaced.iter().any(|n| n == "libc.so.6")
            && replaced.iter().any(|n| n.starts_with("ld-linux")),
        "the C library and its loader are not both replaced: {replaced:?}"
    );
    let root = CString::new("/").expect("no NUL");
    // SAFETY: between fork and exec only system calls are made (unshare,
    // mount), on strings built before the fork; nothing allocates.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Nothing of this namespace's mounts propagates back to the host.
            let none = std::ptr::null();
            if libc::mount(
                none,
                root.as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for (src, dst) in &binds {
                if libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[test]
fn every_shipped_binary_needs_at_most_glibc_2_28() {
    let dir = bundle();
    for f in FILES {
        let (newest, above) = newest_glibc(&dir.join(f), &OLDEST);
        assert!(
            above.is_empty(),
            "{f} needs glibc {} (above {}: {above:?}); build it with `cargo xtask build --release` or `cargo xtask gpu-check`",
            dotted(&newest),
            dotted(&OLDEST)
        );
        println!("{f}: needs glibc {} at most", dotted(&newest));
    }
}

#[test]
fn what_this_machine_builds_natively_needs_more_and_the_older_glibc_refuses_it() {
    // Built for the tests against this machine's glibc (Debian 12: 2.36).
    let native = Path::new(NATIVE_RUNNER);
    let (newest, above) = newest_glibc(native, &[2, 31]);
    assert!(
        !above.is_empty(),
        "the native runner needs only glibc {}: this control needs a build machine with glibc 2.32 or later",
        dotted(&newest)
    );
    let mut cmd = Command::new(native);
    cmd.arg("--help");
    on_older_glibc(&mut cmd, &old_glibc());
    let out = cmd.output().expect("start the native runner");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it started on glibc 2.31: {stderr}");
    // The loader names exactly what the reader found missing.
    for v in &above {
        assert!(
            stderr.contains(&format!("version `{v}' not found")),
            "{v}: {stderr}"
        );
    }
}

#[test]
fn the_bundle_passes_its_dry_run_on_glibc_2_31() {
    let dir = bundle();
    let out = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(dir.join("gpu-check"));
    cmd.args(["--dry-run", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    on_older_glibc(&mut cmd, &old_glibc());
    let run = cmd.output().expect("run the bundle's gpu-check");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        run.status.success(),
        "gpu-check failed on glibc 2.31: {said}"
    );
    let doc: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("gpu-check.json")).expect("gpu-check.json"),
    )
    .expect("JSON");
    assert_eq!(doc["passed"], true, "{said}");
    assert_eq!(doc["simulated"], true);
    // drainwatch and gpuhog really ran there: three restarts of gpuhog,
    // verified by drainwatch, and nothing left running.
    let restarts = doc["restarts"].as_array().expect("restarts");
    assert_eq!(restarts.len(), 3, "{said}");
    for r in restarts {
        assert_eq!(r["outcome"], "succeeded", "{r}");
    }
    assert_eq!(doc["cleanup"]["left_running"], serde_json::json!([]));
    assert_eq!(doc["cleanup"]["server_stopped"], true);
}
