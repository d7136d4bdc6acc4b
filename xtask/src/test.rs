//! `cargo xtask test`: everything CI runs. Installs what is missing, builds the UI
//! (browser tests load it) and every host target, checks formatting and lints,
//! then runs all tests.

use crate::{build, cargo, run_cmd, tools};

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
