//! The GPUs as the check sees them without drainwatch: NVML opened through
//! nvml-wrapper (is there a GPU at all; names, driver, totals), and the
//! reference that `/api/state` is compared with — `nvidia-smi`, or where it is
//! absent (the dry run, a container without it) NVML read directly.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, bail};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use serde_json::{Value, json};

const MIB: u64 = 1 << 20;

/// NVML, opened once.
#[derive(Debug, Clone)]
pub(crate) struct Gpus {
    pub(crate) nvml: Arc<Nvml>,
    pub(crate) count: u32,
}

impl Gpus {
    /// NVML from `lib` with at least one GPU; the error says why there is none.
    pub(crate) fn open(lib: &Path) -> Result<Self, String> {
        let nvml = Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .map_err(|e| format!("cannot open NVML ({}): {e}", lib.display()))?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML cannot count the GPUs: {e}"))?;
        if count == 0 {
            return Err("NVML lists no GPU".to_owned());
        }
        Ok(Self {
            nvml: Arc::new(nvml),
            count,
        })
    }

    /// The driver and each GPU's fixed facts, for the report.
    pub(crate) fn facts(&self) -> Value {
        let n = &self.nvml;
        let gpus: Vec<Value> = (0..self.count)
            .map(|i| match n.device_by_index(i) {
                Ok(d) => json!({
                    "index": i,
                    "name": d.name().ok(),
                    "uuid": d.uuid().ok(),
                    "pci_bus_id": d.pci_info().ok().map(|p| p.bus_id),
                    "mem_total_bytes": d.memory_info().ok().map(|m| m.total),
                }),
                Err(e) => json!({"index": i, "error": e.to_string()}),
            })
            .collect();
        json!({
            "driver_version": n.sys_driver_version().ok(),
            "nvml_version": n.sys_nvml_version().ok(),
            "cuda_driver_version": n.sys_cuda_driver_version().ok(),
            "gpus": gpus,
        })
    }
}

/// One GPU in one reference reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefGpu {
    pub(crate) index: u32,
    pub(crate) uuid: String,
    pub(crate) used_bytes: u64,
    pub(crate) total_bytes: u64,
}

/// One process with memory on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefApp {
    pub(crate) gpu_index: u32,
    pub(crate) pid: u32,
    /// `None` where the driver cannot attribute memory per process.
    pub(crate) used_bytes: Option<u64>,
}

/// What the reference read, and when (Unix ms, before and after).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    pub(crate) started_ms: u64,
    pub(crate) ended_ms: u64,
    pub(crate) gpus: Vec<RefGpu>,
    pub(crate) apps: Vec<RefApp>,
}

/// Who the check believes about memory.
#[derive(Debug, Clone)]
pub(crate) enum Reference {
    NvidiaSmi,
    Nvml(Gpus),
}

impl Reference {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::NvidiaSmi => "nvidia-smi",
            Self::Nvml(_) => "nvml",
        }
    }

    /// How often to read during a restart: NVML in-process costs about a
    /// millisecond; nvidia-smi starts a process each time (and reads back to
    /// back where that takes longer).
    pub(crate) fn poll_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(match self {
            Self::NvidiaSmi => 25,
            Self::Nvml(_) => 10,
        })
    }

    /// Reads every GPU's memory, and with `apps` the processes holding it.
    pub(crate) fn read(&self, apps: bool) -> anyhow::Result<Reading> {
        let started_ms = simhost::now_ms();
        let (gpus, list) = match self {
            Self::NvidiaSmi => {
                let gpus = parse_smi_gpus(&smi(&[
                    "--query-gpu=index,uuid,memory.used,memory.total",
                    "--format=csv,noheader,nounits",
                ])?)?;
                let list = if apps {
                    parse_smi_apps(
                        &smi(&[
                            "--query-compute-apps=gpu_uuid,pid,used_memory",
                            "--format=csv,noheader,nounits",
                        ])?,
                        &gpus,
                    )?
                } else {
                    Vec::new()
                };
                (gpus, list)
            }
            Self::Nvml(g) => nvml_read(g, apps)?,
        };
        Ok(Reading {
            started_ms,
            ended_ms: simhost::now_ms(),
            gpus,
            apps: list,
        })
    }
}

/// Runs nvidia-smi; its output, or why it could not run.
pub(crate) fn smi(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("nvidia-smi")
        .args(args)
        .output()
        .context("cannot run nvidia-smi")?;
    if !out.status.success() {
        bail!(
            "nvidia-smi {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

/// `index, uuid, memory.used [MiB], memory.total [MiB]` per line.
pub(crate) fn parse_smi_gpus(text: &str) -> anyhow::Result<Vec<RefGpu>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match fields(l)[..] {
            [i, uuid, used, total] => Ok(RefGpu {
                index: i.parse().with_context(|| format!("index in `{l}`"))?,
                uuid: uuid.to_owned(),
                used_bytes: used
                    .parse::<u64>()
                    .with_context(|| format!("used in `{l}`"))?
                    * MIB,
                total_bytes: total
                    .parse::<u64>()
                    .with_context(|| format!("total in `{l}`"))?
                    * MIB,
            }),
            _ => bail!("nvidia-smi printed `{l}`, not index, uuid, used, total"),
        })
        .collect()
}

/// `gpu_uuid, pid, used_memory [MiB]` per line (`[N/A]` where not attributed).
pub(crate) fn parse_smi_apps(text: &str, gpus: &[RefGpu]) -> anyhow::Result<Vec<RefApp>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match fields(l)[..] {
            [uuid, pid, used] => Ok(RefApp {
                gpu_index: gpus
                    .iter()
                    .find(|g| g.uuid == uuid)
                    .map(|g| g.index)
                    .with_context(|| format!("nvidia-smi names no GPU {uuid}"))?,
                pid: pid.parse().with_context(|| format!("pid in `{l}`"))?,
                used_bytes: used.parse::<u64>().ok().map(|m| m * MIB),
            }),
            _ => bail!("nvidia-smi printed `{l}`, not gpu_uuid, pid, used_memory"),
        })
        .collect()
}

fn nvml_read(g: &Gpus, apps: bool) -> anyhow::Result<(Vec<RefGpu>, Vec<RefApp>)> {
    let mut gpus = Vec::new();
    let mut list = Vec::new();
    for index in 0..g.count {
        let d = g.nvml.device_by_index(index)?;
        let mem = d.memory_info()?;
        gpus.push(RefGpu {
            index,
            uuid: d.uuid()?,
            used_bytes: mem.used,
            total_bytes: mem.total,
        });
        if apps {
            for p in d.running_compute_processes()? {
                list.push(RefApp {
                    gpu_index: index,
                    pid: p.pid,
                    used_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b),
                        UsedGpuMemory::Unavailable => None,
                    },
                });
            }
        }
    }
    Ok((gpus, list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nvidia_smis_csv() {
        let gpus =
            parse_smi_gpus("0, GPU-aaa, 2571, 81559\n1, GPU-bbb, 3, 81559\n").expect("parses");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].used_bytes, 2571 * MIB);
        assert_eq!(gpus[1].total_bytes, 81559 * MIB);
        let apps =
            parse_smi_apps("GPU-bbb, 4242, 2048\nGPU-aaa, 7, [N/A]\n", &gpus).expect("parses");
        assert_eq!(
            apps,
            vec![
                RefApp {
                    gpu_index: 1,
                    pid: 4242,
                    used_bytes: Some(2048 * MIB)
                },
                RefApp {
                    gpu_index: 0,
                    pid: 7,
                    used_bytes: None
                },
            ]
        );
        assert!(parse_smi_gpus("0, GPU-aaa, lots, 1").is_err());
        assert!(parse_smi_apps("GPU-zzz, 1, 1", &gpus).is_err());
    }
}
