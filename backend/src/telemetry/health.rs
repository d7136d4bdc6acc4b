//! Clocks and health, read through nvml-wrapper at three rates, and XID
//! errors from an NVML event set watched on a thread of its own ([`super::xid`]).
//!
//! | rate | fields | where |
//! |---|---|---|
//! | every sample | SM and memory clock, clock-event reasons, encoder and decoder load | sampler thread |
//! | every second ([`MEDIUM`]) | PCIe link generation and width, per-process SM use | sampler thread |
//! | every 10 s ([`SLOW`]), and on request | ECC mode and counts, retired pages, remapped rows, persistence and compute mode, MIG, PCIe traffic | `health-slow` thread |
//! | once, again while a read failed (not for "not supported") | max SM and memory clock, max PCIe generation and width | sampler thread |
//! | as raised | XID errors | `xid-watch` thread |
//!
//! The slow fields change rarely, and some cost a real driver time (PCIe
//! traffic is sampled over 20 ms per call, two calls per GPU; ECC and row
//! counts read the InfoROM): a thread of their own reads them, so the 10 Hz
//! samples never wait for them, and each sample carries their latest values
//! with their errors. Before a launch the restart manager asks for a fresh
//! reading ([`HealthReader::refresh`]); a reading carries when it began
//! ([`GpuHealth::slow_at_ms`]), so the health gate can wait for one that
//! began after it asked and never decides on old counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode as NvmlComputeMode, EccCounter, MemoryError, PcieUtilCounter,
    RetirementCause,
};
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use shared::FieldError;
use shared::gpu::NOT_SUPPORTED;
use shared::health::{
    ComputeMode, EccErrors, GpuHealth, MigDevice, PcieLink, RemappedRows, RetiredPages,
};

use super::nvml_error::describe;
pub use super::xid::XidSink;
use super::xid::XidWatch;
use crate::clock::now_ms;

/// How often the medium fields are read.
pub const MEDIUM: Duration = Duration::from_secs(1);
/// How often the slow fields are read.
pub const SLOW: Duration = Duration::from_secs(10);
/// MIG devices read per GPU (NVML's own limit is 7).
const MAX_MIG: u32 = 8;

/// Fields of one rate, carried between their readings.
#[derive(Debug, Clone, Default)]
struct Carried {
    health: GpuHealth,
    errors: Vec<FieldError>,
}

/// Per GPU: what the slower rates last read (the slow fields are the
/// `health-slow` thread's).
#[derive(Debug, Clone, Default)]
struct PerGpu {
    fixed: Option<Carried>,
    medium: Carried,
    /// SM use per PID, from the last medium reading.
    process_sm: HashMap<u32, u32>,
    /// NVML's timestamp of the newest per-process sample seen.
    process_seen: u64,
}

/// Reads each GPU's health at its rates; owned by the sampler thread.
#[derive(Debug)]
pub struct HealthReader {
    gpus: Vec<PerGpu>,
    last_medium: Option<Instant>,
    /// Set by anyone who needs the slow fields read afresh.
    refresh: Arc<AtomicBool>,
    xid: Option<XidWatch>,
    slow: Option<SlowWatch>,
}

/// Which rates are due in this sample.
#[derive(Debug, Clone, Copy)]
pub struct Due {
    medium: bool,
}

impl HealthReader {
    pub fn new(refresh: Arc<AtomicBool>) -> Self {
        Self {
            gpus: Vec::new(),
            last_medium: None,
            refresh,
            xid: None,
            slow: None,
        }
    }

    /// Starts the threads (once NVML is open): one watching XID errors on
    /// every GPU, one reading the slow fields.
    pub fn start_threads(&mut self, nvml: Arc<Nvml>, sink: Option<XidSink>) {
        self.xid = XidWatch::start(Arc::clone(&nvml), sink);
        self.slow = SlowWatch::start(nvml, Arc::clone(&self.refresh));
    }

    /// How long the last pass over every GPU's slow fields took, on their
    /// own thread; `None` before the first.
    pub fn slow_pass(&self) -> Option<Duration> {
        let us = self.slow.as_ref()?.pass_us.load(Ordering::Relaxed);
        (us > 0).then(|| Duration::from_micros(us))
    }

    /// A handle that asks for the slow fields to be read afresh.
    pub fn refresh(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.refresh)
    }

    /// Which rates this sample reads; call once per sample.
    pub fn due(&mut self, gpus: usize, now: Instant) -> Due {
        self.gpus.resize_with(gpus, PerGpu::default);
        let is_due = |last: Option<Instant>, every: Duration| {
            last.is_none_or(|t| now.duration_since(t) >= every)
        };
        let medium = is_due(self.last_medium, MEDIUM);
        if medium {
            self.last_medium = Some(now);
        }
        Due { medium }
    }

    /// GPU `index`'s health now, with the errors of fields missing from it,
    /// and its processes' SM use.
    pub fn read(
        &mut self,
        dev: &Device,
        index: u32,
        due: Due,
    ) -> (GpuHealth, Vec<FieldError>, HashMap<u32, u32>) {
        let Some(g) = self.gpus.get_mut(index as usize) else {
            return (GpuHealth::default(), Vec::new(), HashMap::new());
        };
        // Read once; again (at the medium rate) while a read failed for a
        // reason other than the GPU lacking the field.
        let retry = |f: &Carried| f.errors.iter().any(|e| e.reason != NOT_SUPPORTED);
        if g.fixed.is_none() || (due.medium && g.fixed.as_ref().is_some_and(retry)) {
            g.fixed = Some(read_fixed(dev));
        }
        if due.medium {
            g.medium = read_medium(dev, &mut g.process_sm, &mut g.process_seen);
        }
        let slow = self
            .slow
            .as_ref()
            .and_then(|w| w.latest(index))
            .unwrap_or_default();
        let mut errors = Vec::new();
        let mut h = read_fast(dev, &mut errors);
        let fixed = g.fixed.as_ref().expect("set above");
        for part in [fixed, &g.medium, &slow] {
            errors.extend(part.errors.iter().cloned());
        }
        h.sm_clock_max_mhz = fixed.health.sm_clock_max_mhz;
        h.mem_clock_max_mhz = fixed.health.mem_clock_max_mhz;
        h.pcie = match (g.medium.health.pcie, fixed.health.pcie) {
            (Some(now), Some(max)) => Some(PcieLink {
                gen_max: max.gen_max,
                width_max: max.width_max,
                ..now
            }),
            _ => None,
        };
        let s = &slow.health;
        h.pcie_tx_kib_s = s.pcie_tx_kib_s;
        h.pcie_rx_kib_s = s.pcie_rx_kib_s;
        h.ecc_enabled = s.ecc_enabled;
        h.ecc = s.ecc;
        h.retired_pages = s.retired_pages;
        h.remapped_rows = s.remapped_rows;
        h.persistence_mode = s.persistence_mode;
        h.compute_mode = s.compute_mode;
        h.mig_enabled = s.mig_enabled;
        h.mig = s.mig.clone();
        h.slow_at_ms = s.slow_at_ms;
        match &self.xid {
            Some(w) => {
                let (recent, error) = w.recent(index);
                h.xid = recent;
                if let Some(reason) = error {
                    errors.push(FieldError {
                        field: "xid".to_owned(),
                        reason,
                    });
                }
            }
            None => errors.push(FieldError {
                field: "xid".to_owned(),
                reason: "XID errors are not being watched".to_owned(),
            }),
        }
        (h, errors, g.process_sm.clone())
    }
}

impl Drop for HealthReader {
    fn drop(&mut self) {
        if let Some(w) = &self.xid {
            w.stop();
        }
        if let Some(w) = &self.slow {
            w.stop.store(true, Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------- slow fields

/// How often the slow thread looks for a refresh request (or a stop).
const SLOW_POLL: Duration = Duration::from_millis(20);

/// The thread that reads the slow fields, and its latest reading per GPU.
#[derive(Debug)]
struct SlowWatch {
    latest: Arc<Mutex<Vec<Option<Carried>>>>,
    stop: Arc<AtomicBool>,
    /// How long the last full pass over every GPU took (µs; 0: none yet).
    pass_us: Arc<AtomicU64>,
}

impl SlowWatch {
    fn start(nvml: Arc<Nvml>, refresh: Arc<AtomicBool>) -> Option<Self> {
        let count = nvml.device_count().ok()? as usize;
        let latest = Arc::new(Mutex::new(vec![None; count]));
        let stop = Arc::new(AtomicBool::new(false));
        let pass_us = Arc::new(AtomicU64::new(0));
        let (latest2, stop2, pass2) =
            (Arc::clone(&latest), Arc::clone(&stop), Arc::clone(&pass_us));
        let spawned = std::thread::Builder::new()
            .name("health-slow".to_owned())
            .spawn(move || read_slow_loop(&nvml, count, &latest2, &refresh, &stop2, &pass2));
        match spawned {
            Ok(_) => Some(Self {
                latest,
                stop,
                pass_us,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the slow health reader");
                None
            }
        }
    }

    /// GPU `index`'s latest slow reading, if there is one yet.
    fn latest(&self, index: u32) -> Option<Carried> {
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        latest.get(index as usize).cloned().flatten()
    }
}

/// Reads every GPU's slow fields at once, then every [`SLOW`] or when asked,
/// until told to stop. Each GPU's reading is published as soon as it is done,
/// stamped with when it began.
fn read_slow_loop(
    nvml: &Nvml,
    count: usize,
    latest: &Mutex<Vec<Option<Carried>>>,
    refresh: &AtomicBool,
    stop: &AtomicBool,
    pass_us: &AtomicU64,
) {
    let mut last: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let asked = refresh.swap(false, Ordering::Relaxed);
        if asked || last.is_none_or(|t| t.elapsed() >= SLOW) {
            let pass = Instant::now();
            last = Some(pass);
            for i in 0..count {
                let began = now_ms();
                let Ok(dev) = nvml.device_by_index(i as u32) else {
                    // The sample says why the GPU cannot be opened.
                    continue;
                };
                let mut c = read_slow(&dev);
                c.health.slow_at_ms = Some(began);
                let mut l = latest.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(slot) = l.get_mut(i) {
                    *slot = Some(c);
                }
            }
            let took = u64::try_from(pass.elapsed().as_micros()).unwrap_or(u64::MAX);
            pass_us.store(took.max(1), Ordering::Relaxed);
        }
        std::thread::sleep(SLOW_POLL);
    }
}

/// Keeps a value, or records why it is missing under `name`.
fn keep<T>(errors: &mut Vec<FieldError>, name: &str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| {
        if !errors.iter().any(|f| f.field == name) {
            errors.push(FieldError {
                field: name.to_owned(),
                reason: describe(&e),
            });
        }
    })
    .ok()
}

fn read_fast(dev: &Device, errors: &mut Vec<FieldError>) -> GpuHealth {
    GpuHealth {
        sm_clock_mhz: keep(errors, "sm_clock_mhz", dev.clock_info(Clock::SM)),
        mem_clock_mhz: keep(errors, "mem_clock_mhz", dev.clock_info(Clock::Memory)),
        clocks_event_reasons: keep(
            errors,
            "clocks_event_reasons",
            dev.current_throttle_reasons().map(|r| r.bits()),
        ),
        encoder_percent: keep(
            errors,
            "encoder_percent",
            dev.encoder_utilization().map(|u| u.utilization),
        ),
        decoder_percent: keep(
            errors,
            "decoder_percent",
            dev.decoder_utilization().map(|u| u.utilization),
        ),
        ..GpuHealth::default()
    }
}

fn read_fixed(dev: &Device) -> Carried {
    let mut errors = Vec::new();
    let sm = keep(
        &mut errors,
        "sm_clock_max_mhz",
        dev.max_clock_info(Clock::SM),
    );
    let mem = keep(
        &mut errors,
        "mem_clock_max_mhz",
        dev.max_clock_info(Clock::Memory),
    );
    let gen_max = keep(&mut errors, "pcie", dev.max_pcie_link_gen());
    let width_max = keep(&mut errors, "pcie", dev.max_pcie_link_width());
    Carried {
        health: GpuHealth {
            sm_clock_max_mhz: sm,
            mem_clock_max_mhz: mem,
            pcie: gen_max.zip(width_max).map(|(gen_max, width_max)| PcieLink {
                gen_max,
                width_max,
                ..PcieLink::default()
            }),
            ..GpuHealth::default()
        },
        errors,
    }
}

fn read_medium(dev: &Device, process_sm: &mut HashMap<u32, u32>, seen: &mut u64) -> Carried {
    let mut errors = Vec::new();
    let gen_current = keep(&mut errors, "pcie", dev.current_pcie_link_gen());
    let width_current = keep(&mut errors, "pcie", dev.current_pcie_link_width());
    // NOT_FOUND: no process ran on the GPU since the last look; nothing to say.
    match dev.process_utilization_stats(Some(*seen).filter(|s| *s > 0)) {
        Ok(samples) => {
            process_sm.clear();
            let mut newest: HashMap<u32, u64> = HashMap::new();
            for s in samples {
                *seen = (*seen).max(s.timestamp);
                if newest.get(&s.pid).is_none_or(|t| *t <= s.timestamp) {
                    newest.insert(s.pid, s.timestamp);
                    process_sm.insert(s.pid, s.sm_util);
                }
            }
        }
        Err(NvmlError::NotFound) => process_sm.clear(),
        Err(e) => {
            process_sm.clear();
            errors.push(FieldError {
                field: "process_sm_percent".to_owned(),
                reason: describe(&e),
            });
        }
    }
    Carried {
        health: GpuHealth {
            pcie: gen_current
                .zip(width_current)
                .map(|(gen_current, width_current)| PcieLink {
                    gen_current,
                    width_current,
                    ..PcieLink::default()
                }),
            ..GpuHealth::default()
        },
        errors,
    }
}

fn read_slow(dev: &Device) -> Carried {
    let mut errors = Vec::new();
    let ecc_enabled = keep(&mut errors, "ecc", dev.is_ecc_enabled()).map(|m| m.currently_enabled);
    let ecc = match ecc_enabled {
        Some(true) => {
            let mut count = |e, c| keep(&mut errors, "ecc", dev.total_ecc_errors(e, c));
            let vc = count(MemoryError::Corrected, EccCounter::Volatile);
            let vu = count(MemoryError::Uncorrected, EccCounter::Volatile);
            let ac = count(MemoryError::Corrected, EccCounter::Aggregate);
            let au = count(MemoryError::Uncorrected, EccCounter::Aggregate);
            match (vc, vu, ac, au) {
                (Some(vc), Some(vu), Some(ac), Some(au)) => Some(EccErrors {
                    volatile_corrected: vc,
                    volatile_uncorrected: vu,
                    aggregate_corrected: ac,
                    aggregate_uncorrected: au,
                }),
                _ => None,
            }
        }
        Some(false) => {
            errors.push(FieldError {
                field: "ecc".to_owned(),
                reason: "ECC is off".to_owned(),
            });
            None
        }
        None => None,
    };
    let single = keep(
        &mut errors,
        "retired_pages",
        dev.retired_pages(RetirementCause::MultipleSingleBitEccErrors),
    );
    let double = keep(
        &mut errors,
        "retired_pages",
        dev.retired_pages(RetirementCause::DoubleBitEccError),
    );
    let pending = keep(
        &mut errors,
        "retired_pages",
        dev.are_pages_pending_retired(),
    );
    let retired_pages = match (single, double, pending) {
        (Some(s), Some(d), Some(pending)) => Some(RetiredPages {
            single_bit: s.len() as u32,
            double_bit: d.len() as u32,
            pending,
        }),
        _ => None,
    };
    let remapped_rows = keep(&mut errors, "remapped_rows", remapped_rows(dev));
    let tx = keep(
        &mut errors,
        "pcie_throughput",
        dev.pcie_throughput(PcieUtilCounter::Send),
    );
    let rx = keep(
        &mut errors,
        "pcie_throughput",
        dev.pcie_throughput(PcieUtilCounter::Receive),
    );
    let persistence_mode = keep(&mut errors, "persistence_mode", dev.is_in_persistent_mode());
    let compute_mode = keep(&mut errors, "compute_mode", dev.compute_mode()).map(|m| match m {
        NvmlComputeMode::Default => ComputeMode::Default,
        NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
        NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
        NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
    });
    let mig_enabled = keep(&mut errors, "mig", dev.mig_mode()).map(|m| m.current == 1);
    let mig = if mig_enabled == Some(true) {
        read_mig(dev, &mut errors)
    } else {
        Vec::new()
    };
    Carried {
        health: GpuHealth {
            ecc_enabled,
            ecc,
            retired_pages,
            remapped_rows,
            pcie_tx_kib_s: tx,
            pcie_rx_kib_s: rx,
            persistence_mode,
            compute_mode,
            mig_enabled,
            mig,
            ..GpuHealth::default()
        },
        errors,
    }
}

fn read_mig(dev: &Device, errors: &mut Vec<FieldError>) -> Vec<MigDevice> {
    let max = keep(errors, "mig", dev.mig_device_count())
        .unwrap_or(0)
        .min(MAX_MIG);
    let mut out = Vec::new();
    for i in 0..max {
        let mig = match dev.mig_device_by_index(i) {
            Ok(m) => m,
            // An empty slot: instances need not be numbered without gaps.
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
            Err(e) => {
                keep::<()>(errors, "mig", Err(e));
                continue;
            }
        };
        let mem = mig.memory_info().ok();
        out.push(MigDevice {
            index: i,
            uuid: mig.uuid().ok(),
            name: mig.name().ok(),
            gpu_instance_id: instance_id(&mig),
            mem_total_bytes: mem.as_ref().map(|m| m.total),
            mem_used_bytes: mem.as_ref().map(|m| m.used),
        });
    }
    out
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper does not wrap.
#[allow(unsafe_code)]
fn remapped_rows(dev: &Device) -> Result<RemappedRows, NvmlError> {
    let f = nvml_sym(dev.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the header's signature: a live handle and four writable counters.
    let rc = unsafe {
        f(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    nvml_try(rc)?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
    })
}

/// A MIG device's GPU instance id (`nvmlDeviceGetGpuInstanceId`, not wrapped).
#[allow(unsafe_code)]
fn instance_id(dev: &Device) -> Option<u32> {
    let f = dev.nvml().lib().nvmlDeviceGetGpuInstanceId.as_ref().ok()?;
    let mut id = 0u32;
    // SAFETY: the header's signature: a live handle and a writable id.
    let rc = unsafe { f(dev.handle(), &mut id) };
    (rc == 0).then_some(id)
}
