//! The only code that calls NVML, with [`super::health`] (whose clocks, health
//! and XID readers it owns). Initialises once and keeps the outcome: a
//! failure is reported as [`NvmlStatus::Unavailable`] with NVML's reason, never
//! retried in a loop, never turned into an empty GPU list. Per-device and
//! per-field failures become `None` plus a [`FieldError`], never a lost sample.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use shared::health::GpuHealth;
use shared::{FieldError, GpuSample, NvmlStatus};

use super::health::{HealthReader, XidSink};
use super::nvml_error::describe;

/// What one GPU holds per process, as NVML attributes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_bytes: Option<u64>,
    /// Its SM use over the last second, where NVML attributes it.
    pub sm_percent: Option<u32>,
}

/// One GPU's reading, before the sampler adds its baseline.
#[derive(Debug, Clone)]
pub struct GpuReading {
    pub gpu: GpuSample,
    /// `None` when the process query failed (the reason is in `gpu.errors`).
    pub processes: Option<Vec<GpuProcess>>,
}

/// NVML, opened once.
#[derive(Debug)]
pub struct NvmlReader {
    nvml: Option<Arc<Nvml>>,
    health: HealthReader,
    status: NvmlStatus,
    /// Name and UUID per index: fixed while the driver is loaded.
    identity: Vec<Option<(String, String)>>,
}

impl NvmlReader {
    /// Loads `lib` and initialises NVML, and starts watching XID errors (new
    /// ones go to `xid_sink`). Never fails: the outcome is in [`Self::status`].
    pub fn open(lib: &Path, xid_sink: Option<XidSink>) -> Self {
        let mut health = HealthReader::new(Arc::new(AtomicBool::new(false)));
        let shown = lib.display().to_string();
        match Nvml::builder().lib_path(OsStr::new(lib)).init() {
            Ok(nvml) => {
                let library = loaded_path(lib).unwrap_or(shown);
                let status = NvmlStatus::Ok {
                    simulated: is_simulated(lib),
                    driver_version: nvml.sys_driver_version().ok(),
                    nvml_version: nvml.sys_nvml_version().ok(),
                    cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
                    library,
                };
                tracing::info!(?status, "nvml initialised");
                let nvml = Arc::new(nvml);
                health.start_threads(Arc::clone(&nvml), xid_sink);
                Self {
                    nvml: Some(nvml),
                    health,
                    status,
                    identity: Vec::new(),
                }
            }
            Err(e) => {
                let reason = describe(&e);
                tracing::warn!(library = %shown, %reason, "nvml unavailable");
                Self {
                    nvml: None,
                    health,
                    status: NvmlStatus::Unavailable {
                        library: shown,
                        reason,
                    },
                    identity: Vec::new(),
                }
            }
        }
    }

    pub fn status(&self) -> &NvmlStatus {
        &self.status
    }

    /// How long the last pass over the slow health fields took (their thread's).
    pub fn health_slow_pass(&self) -> Option<std::time::Duration> {
        self.health.slow_pass()
    }

    /// A handle that asks for the slow health fields to be read afresh.
    pub fn health_refresh(&self) -> Arc<AtomicBool> {
        self.health.refresh()
    }

    /// Reads every GPU. `Err` only when NVML is unavailable or cannot count devices.
    pub fn read(&mut self) -> Result<Vec<GpuReading>, NoReading> {
        let Some(nvml) = &self.nvml else {
            return Err(match &self.status {
                NvmlStatus::Unavailable { reason, .. } => NoReading::Unavailable(reason.clone()),
                NvmlStatus::Ok { .. } => NoReading::NotInitialised,
            });
        };
        let count = nvml
            .device_count()
            .map_err(|e| NoReading::Count(describe(&e)))?;
        self.identity.resize(count as usize, None);
        let due = self.health.due(count as usize, Instant::now());
        let health = &mut self.health;
        Ok((0..count)
            .map(|index| {
                read_device(nvml, index, &mut self.identity[index as usize], |dev| {
                    health.read(dev, index, due)
                })
            })
            .collect())
    }
}

/// Why no GPU could be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoReading {
    /// NVML did not load or initialise: why, as the status says.
    #[error("{0}")]
    Unavailable(String),
    #[error("nvml not initialised")]
    NotInitialised,
    /// The driver's answer to counting the devices.
    #[error("counting GPUs: {0}")]
    Count(String),
}

/// What [`HealthReader::read`] gives for one device.
type HealthRead = (GpuHealth, Vec<FieldError>, HashMap<u32, u32>);

fn read_device(
    nvml: &Nvml,
    index: u32,
    identity: &mut Option<(String, String)>,
    health: impl FnOnce(&Device) -> HealthRead,
) -> GpuReading {
    let dev = match nvml.device_by_index(index) {
        Ok(d) => d,
        Err(e) => {
            return GpuReading {
                gpu: GpuSample::unreadable(index, describe(&e)),
                processes: None,
            };
        }
    };
    let mut errors = Vec::new();
    if identity.is_none()
        && let (Ok(name), Ok(uuid)) = (dev.name(), dev.uuid())
    {
        *identity = Some((name, uuid));
    }
    let (name, uuid) = match identity {
        Some((n, u)) => (Some(n.clone()), Some(u.clone())),
        None => (
            field(&mut errors, "name", dev.name()),
            field(&mut errors, "uuid", dev.uuid()),
        ),
    };
    let mem = field(&mut errors, "mem_used_bytes", dev.memory_info());
    let (health, health_errors, process_sm) = health(&dev);
    let util = field(&mut errors, "util_gpu_percent", dev.utilization_rates());
    let gpu = GpuSample {
        index,
        uuid,
        name,
        mem_total_bytes: mem.as_ref().map(|m| m.total),
        mem_used_bytes: mem.as_ref().map(|m| m.used),
        mem_baseline_bytes: None,
        util_gpu_percent: util.as_ref().map(|u| u.gpu),
        util_mem_percent: util.as_ref().map(|u| u.memory),
        power_mw: field(&mut errors, "power_mw", dev.power_usage()),
        power_limit_mw: field(&mut errors, "power_limit_mw", dev.enforced_power_limit()),
        temp_c: field(
            &mut errors,
            "temp_c",
            dev.temperature(TemperatureSensor::Gpu),
        ),
        health,
        errors: Vec::new(),
    };
    let processes = match (
        dev.running_compute_processes(),
        dev.running_graphics_processes(),
    ) {
        (Ok(mut compute), graphics) => {
            // A headless server has no graphics contexts; a failure there is not fatal.
            if let Ok(g) = graphics {
                let fresh: Vec<_> = g
                    .into_iter()
                    .filter(|p| !compute_has(&compute, p.pid))
                    .collect();
                compute.extend(fresh);
            }
            Some(
                compute
                    .into_iter()
                    .map(|p| GpuProcess {
                        sm_percent: process_sm.get(&p.pid).copied(),
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect(),
            )
        }
        (Err(e), _) => {
            errors.push(FieldError {
                field: "processes".to_owned(),
                reason: describe(&e),
            });
            None
        }
    };
    errors.extend(health_errors);
    GpuReading {
        gpu: GpuSample { errors, ..gpu },
        processes,
    }
}

fn compute_has(list: &[nvml_wrapper::struct_wrappers::device::ProcessInfo], pid: u32) -> bool {
    list.iter().any(|p| p.pid == pid)
}

/// Keeps a field's value, or records why it is missing.
fn field<T>(errors: &mut Vec<FieldError>, name: &str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| {
        errors.push(FieldError {
            field: name.to_owned(),
            reason: describe(&e),
        })
    })
    .ok()
}

/// True when the loaded library is drainwatch's simulated host, which exports a
/// marker no real driver has. Loading the same path again returns the library
/// already mapped by NVML's own loader.
#[allow(unsafe_code)]
fn is_simulated(lib: &Path) -> bool {
    // SAFETY: the library is already loaded and initialised (its constructors ran);
    // the marker takes no arguments and returns an int.
    unsafe {
        libloading::Library::new(lib).is_ok_and(|l| {
            l.get::<unsafe extern "C" fn() -> std::ffi::c_int>(b"drainwatch_simulated_host\0")
                .is_ok_and(|f| f() == 1)
        })
    }
}

/// Where the library came from: a path as given, or for a bare name (resolved
/// through the loader's search path) the file the loader mapped.
fn loaded_path(lib: &Path) -> Option<String> {
    if lib.components().count() > 1 {
        return Some(lib.display().to_string());
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libnvidia-ml") || p.contains("libnvidia_ml"))
        .map(str::to_owned)
}
