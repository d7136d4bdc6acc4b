//! `cargo xtask test`: everything CI runs. Installs what is missing, builds the UI
//! (browser tests load it), every host target and the portable `gpu-check`
//! bundle, checks formatting and lints, then runs all tests.

use crate::{build, cargo, gpu_check, portable, run_cmd, tools};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    tools::ensure_chromium()?;
    tools::ensure_prometheus()?;
    tools::ensure_libseccomp()?;
    tools::ensure_lint_tools()?;
    let pynvml = tools::ensure_pynvml()?;
    let pytools = tools::ensure_pytools()?;
    // The real engine the engine tests run (built once, cached outside the clone).
    let engine = crate::engine::ensure()?;
    build::ui()?;
    // The bundle's size budget holds without anyone remembering it.
    crate::bench::check_bundle_budget()?;
    run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))?;
    // Lints at clippy's default levels: deny-level findings fail the run,
    // warnings are printed (the tree is kept free of them).
    run_cmd(cargo().args(["clippy", "--all-targets"]))?;
    run_cmd(cargo().args([
        "clippy",
        "-p",
        "frontend",
        "--target",
        "wasm32-unknown-unknown",
    ]))?;
    // Build everything first, then test: one feature resolution, no rebuild between.
    run_cmd(cargo().args(["build", "--all-targets"]))?;
    build::link_nvml(false)?;
    let mut test = cargo();
    // The shipped binaries (portable, release) and an older glibc to start
    // them on, for the gpucheck package's tests of the bundle: built when
    // every test runs, or that package's.
    if args.is_empty() || args.iter().any(|a| a == "gpucheck") {
        test.env("DRAINWATCH_BUNDLE", gpu_check::bundle()?)
            .env("DRAINWATCH_OLD_GLIBC", portable::ensure_old_glibc()?);
    }
    test.arg("test")
        .env("DRAINWATCH_CHROMIUM", tools::CHROMIUM)
        .env("DRAINWATCH_CHROMEDRIVER", tools::CHROMEDRIVER)
        .env("DRAINWATCH_PYNVML", &pynvml)
        .env("DRAINWATCH_PYTOOLS", &pytools)
        .args(args);
    engine.env(&mut test);
    run_cmd(&mut test)?;
    // The UI's own unit tests, on the host (it is not a default member: wasm32 first).
    if args.is_empty() {
        run_cmd(cargo().args(["test", "-p", "frontend"]))?;
    }
    Ok(())
}
