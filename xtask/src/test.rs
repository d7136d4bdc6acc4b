//! `cargo xtask test`: everything CI runs. Installs what is missing, builds the UI
//! (browser tests load it) and every host target, then runs all tests.

use crate::{build, cargo, run_cmd, tools};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    tools::ensure_chromium()?;
    build::ui()?;
    run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))?;
    // Build everything first, then test: one feature resolution, no rebuild between.
    run_cmd(cargo().args(["build", "--all-targets"]))?;
    build::link_nvml(false)?;
    let mut test = cargo();
    test.arg("test")
        .env("DRAINWATCH_CHROMIUM", tools::CHROMIUM)
        .env("DRAINWATCH_CHROMEDRIVER", tools::CHROMEDRIVER)
        .args(args);
    run_cmd(&mut test)
}
