//! `cargo xtask bench`: see docs/PERFORMANCE.md.

pub(crate) fn run(_args: &[String]) -> anyhow::Result<()> {
    anyhow::bail!("the benchmarks are not written yet")
}
