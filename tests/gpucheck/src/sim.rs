//! The dry run's simulated host, made as the tests make one: a directory with
//! an inventory (`host.json`) and the fake NVML library linked beside it as
//! `libnvidia-ml.so.1`, which drainwatch and the check itself load.

use std::path::{Path, PathBuf};

use anyhow::Context;
use simhost::{Fault, GpuFaults, Inventory};

/// GPUs of the simulated host.
const GPUS: u32 = 4;
/// How long the simulated driver keeps a dead process's memory: the release
/// delay the dry run must measure.
pub(crate) const RELEASE_DELAY_MS: u64 = 300;
/// The GPU that, like a Hopper board, retires no pages (it remaps rows) and
/// has no video encoder: its health lists fields "not supported".
pub(crate) const LACKING_GPU: usize = 3;

#[derive(Debug)]
pub(crate) struct SimHost {
    /// What `DRAINWATCH_SIM_HOST` names.
    pub(crate) dir: PathBuf,
    /// `libnvidia-ml.so.1`, the fake.
    pub(crate) nvml_lib: PathBuf,
}

impl SimHost {
    /// Makes the host under `scratch` with the fake library `fake` (the
    /// workspace's `libnvidia_ml.so`).
    pub(crate) fn create(scratch: &Path, fake: &Path) -> anyhow::Result<Self> {
        anyhow::ensure!(
            fake.is_file(),
            "the fake NVML library {} is missing (cargo build -p fake-nvml builds it)",
            fake.display()
        );
        let dir = scratch.join("host");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut inventory = Inventory {
            release_delay_ms: RELEASE_DELAY_MS,
            ..Inventory::with_gpus(GPUS)
        };
        inventory.gpus[LACKING_GPU].faults = GpuFaults {
            retired_pages: Some(Fault::NotSupported),
            video: Some(Fault::NotSupported),
            ..GpuFaults::default()
        };
        inventory
            .save(&dir)
            .context("writing the simulated host's host.json")?;
        let lib_dir = scratch.join("lib");
        std::fs::create_dir_all(&lib_dir)?;
        let nvml_lib = lib_dir.join("libnvidia-ml.so.1");
        std::os::unix::fs::symlink(fake, &nvml_lib).context("linking libnvidia-ml.so.1")?;
        Ok(Self { dir, nvml_lib })
    }

    /// The simulated host's own record: every process on its roster (each
    /// gpuhog process enlists) still alive, by PID and start time.
    pub(crate) fn alive_on_roster(&self) -> Vec<(u32, u64, String)> {
        simhost::roster(&self.dir)
            .into_iter()
            .filter(|e| crate::procs::alive(e.pid, e.start_ticks))
            .map(|e| (e.pid, e.start_ticks, e.role))
            .collect()
    }

    /// How many processes enlisted (gpuhog's launcher, workers, leftovers).
    pub(crate) fn enlisted(&self) -> usize {
        simhost::roster(&self.dir).len()
    }
}
