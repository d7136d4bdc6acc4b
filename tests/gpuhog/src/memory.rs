//! Where a process's GPU memory comes from: the CUDA driver API (cudarc over
//! `libcuda.so.1`, loaded at run time, so nothing of CUDA is needed to build),
//! or the simulated host (`--sim`), where the memory is a registration that
//! the fake NVML library reports, as the simulated server's workers do.
//!
//! Memory is held until the process exits and never freed by hand: how long
//! the driver takes to give it back after an exit is what the check measures.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, bail};
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{DriverError, result};
use simhost::{GpuUse, Registration};

/// The CUDA driver library, as the loader names it.
pub(crate) const LIBCUDA: &str = "libcuda.so.1";
/// Loads another file as the CUDA driver (a path, or a name for the loader).
pub(crate) const LIBCUDA_ENV: &str = "GPUHOG_LIBCUDA";

/// The driver, opened once and kept for the life of the process.
static DRIVER: OnceLock<libloading::Library> = OnceLock::new();

/// Where memory is taken from.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    Cuda,
    /// A simulated host directory (what `DRAINWATCH_SIM_HOST` names).
    Sim(PathBuf),
}

impl Backend {
    /// The simulated host when one is named, else the CUDA driver, which must
    /// load: a machine without it fails here, saying so, before anything starts.
    pub(crate) fn new(sim: Option<PathBuf>) -> anyhow::Result<Self> {
        match sim {
            Some(dir) => {
                if !dir.is_dir() {
                    bail!("{} is not a simulated host directory", dir.display());
                }
                Ok(Self::Sim(dir))
            }
            None => {
                load_driver().map_err(anyhow::Error::msg)?;
                Ok(Self::Cuda)
            }
        }
    }

    /// The arguments that hand this backend to another gpuhog process.
    pub(crate) fn args(&self) -> Vec<String> {
        match self {
            Self::Cuda => Vec::new(),
            Self::Sim(dir) => vec!["--sim".to_owned(), dir.display().to_string()],
        }
    }

    /// Takes `bytes` on `gpu` and touches every byte; returns what the memory
    /// is on, for the log. `role` names this process on the simulated host's
    /// roster.
    pub(crate) fn hold(&self, gpu: u32, bytes: u64, role: &str) -> anyhow::Result<String> {
        match self {
            Self::Cuda => cuda_hold(gpu, bytes).map_err(anyhow::Error::msg),
            Self::Sim(dir) => sim_hold(dir, gpu, bytes, role),
        }
    }
}

/// Opens the CUDA driver (`GPUHOG_LIBCUDA`, else `libcuda.so.1`) and keeps it
/// open. cudarc then finds the same library: the loader matches a name
/// against the sonames of what is loaded already.
pub(crate) fn load_driver() -> Result<(), String> {
    if DRIVER.get().is_some() {
        return Ok(());
    }
    let name = std::env::var_os(LIBCUDA_ENV).unwrap_or_else(|| LIBCUDA.into());
    let lib = open_driver(&name)?;
    let _ = DRIVER.set(lib);
    Ok(())
}

/// Opens `name` as the CUDA driver; the error names the file and the loader's reason.
fn open_driver(name: &std::ffi::OsStr) -> Result<libloading::Library, String> {
    // SAFETY: loading the driver runs its initialisers, which need nothing of ours.
    unsafe { libloading::Library::new(name) }
        .map_err(|e| format!("cannot load {}: {e}", name.to_string_lossy()))
}

/// What one driver call failed with, named.
fn failed(call: &str) -> impl FnOnce(DriverError) -> String + '_ {
    move |e| format!("{call} failed: {e}")
}

/// cuInit, the device's primary context, cuMemAlloc and a memset over all of
/// it (so the memory is really backed), then a synchronize.
fn cuda_hold(gpu: u32, bytes: u64) -> Result<String, String> {
    load_driver()?;
    let len = usize::try_from(bytes).map_err(|_| format!("{bytes} bytes is too many"))?;
    let ordinal = i32::try_from(gpu).map_err(|_| format!("no GPU {gpu}"))?;
    result::init().map_err(failed("cuInit"))?;
    let dev = result::device::get(ordinal).map_err(failed("cuDeviceGet"))?;
    let name = result::device::get_name(dev).unwrap_or_else(|_| "?".to_owned());
    // Where it sits on the PCI bus, as NVML and nvidia-smi name it (the
    // worker's log shows which GPU a CUDA ordinal is).
    let attr = |a| {
        // SAFETY: `dev` came from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }.unwrap_or(-1)
    };
    let pci = pci_text(
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    );
    // SAFETY: `dev` came from cuDeviceGet; the context is retained (and made
    // current on this thread) for the rest of the process's life.
    let ctx =
        unsafe { result::primary_ctx::retain(dev) }.map_err(failed("cuDevicePrimaryCtxRetain"))?;
    // SAFETY: `ctx` is the live primary context retained above.
    unsafe { result::ctx::set_current(ctx) }.map_err(failed("cuCtxSetCurrent"))?;
    // SAFETY: a plain allocation in the current context; never freed by hand.
    let ptr = unsafe { result::malloc_sync(len) }.map_err(failed("cuMemAlloc"))?;
    // SAFETY: `ptr` is a live allocation of exactly `len` bytes.
    unsafe { result::memset_d8_sync(ptr, 0xa5, len) }.map_err(failed("cuMemsetD8"))?;
    result::ctx::synchronize().map_err(failed("cuCtxSynchronize"))?;
    Ok(format!("CUDA device {gpu}: {name} (PCI {pci})"))
}

/// `00000000:18:00.0`, as NVML and nvidia-smi print a bus id.
fn pci_text(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:08X}:{bus:02X}:{device:02X}.0")
}

/// Registers the memory with the simulated host, as a CUDA allocation would
/// show to the driver; a GPU too full for it is out of memory, as with CUDA.
fn sim_hold(dir: &Path, gpu: u32, bytes: u64, role: &str) -> anyhow::Result<String> {
    let inventory = simhost::Inventory::load(dir)?;
    let spec = inventory
        .gpus
        .get(gpu as usize)
        .with_context(|| format!("the simulated host has no GPU {gpu}"))?;
    let view = simhost::observe(dir, simhost::now_ms())?;
    let used = view.gpus.get(gpu as usize).map_or(0, |g| g.used_bytes);
    if used.saturating_add(bytes) > spec.total_bytes {
        bail!(
            "CUDA out of memory: tried to allocate {bytes} bytes on GPU {gpu}, {} free",
            spec.total_bytes.saturating_sub(used)
        );
    }
    simhost::enlist(dir, role)?;
    Registration::for_self(dir)
        .and_then(|reg| {
            reg.set(&[GpuUse {
                gpu,
                used_bytes: bytes,
                util_percent: 0,
            }])
        })
        .context("registering with the simulated host")?;
    Ok(format!(
        "simulated GPU {gpu}: {} ({})",
        spec.name, spec.uuid
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_driver_is_named_not_a_panic() {
        let e = open_driver("/nonexistent/libcuda.so.1".as_ref()).expect_err("cannot load");
        assert!(
            e.starts_with("cannot load /nonexistent/libcuda.so.1: "),
            "{e}"
        );
        assert!(e.contains("No such file"), "the loader's reason: {e}");
    }

    #[test]
    fn bus_ids_read_as_nvml_writes_them() {
        assert_eq!(pci_text(0, 0x18, 0), "00000000:18:00.0");
        assert_eq!(pci_text(1, 0xc1, 2), "00000001:C1:02.0");
    }
}
