//! One GPU as NVML reported it. Every reading is optional: a field NVML could not
//! give is `None`, and [`GpuSample::errors`] says why, so one failing query never
//! hides the others.

use serde::{Deserialize, Serialize};

use crate::health::GpuHealth;

fn is_default(h: &GpuHealth) -> bool {
    *h == GpuHealth::default()
}

/// One GPU in one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML's device index (what `CUDA_VISIBLE_DEVICES` and `nvidia-smi -i` mean).
    pub index: u32,
    /// NVML's UUID (`GPU-…`): stable across reboots, unlike the index.
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub mem_total_bytes: Option<u64>,
    pub mem_used_bytes: Option<u64>,
    /// What this GPU used when NVML last listed no process on it: the level that
    /// proves a drained server is really gone.
    pub mem_baseline_bytes: Option<u64>,
    pub util_gpu_percent: Option<u32>,
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub util_mem_percent: Option<u32>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    pub temp_c: Option<u32>,
    /// Clocks and health; fields read less often than every sample are
    /// carried over between readings (see [`GpuHealth::slow_at_ms`]).
    #[serde(default, skip_serializing_if = "is_default")]
    pub health: GpuHealth,
    /// Why a field above is `None`. A device NVML could not open at all has one
    /// entry for the field `device`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// Why one reading is missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// The field of [`GpuSample`] (or `device`, `processes`).
    pub field: String,
    /// NVML's error, as text.
    pub reason: String,
}

/// The reason a field the GPU lacks is given, in [`FieldError::reason`].
pub const NOT_SUPPORTED: &str = "not supported by this GPU";

impl GpuSample {
    /// Why `field` is missing, if it is.
    pub fn error(&self, field: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|e| e.field == field)
            .map(|e| e.reason.as_str())
    }

    /// `field` is missing because the GPU does not have it.
    pub fn unsupported(&self, field: &str) -> bool {
        self.error(field) == Some(NOT_SUPPORTED)
    }

    /// A GPU that NVML counts but could not open.
    pub fn unreadable(index: u32, reason: String) -> Self {
        Self {
            index,
            uuid: None,
            name: None,
            mem_total_bytes: None,
            mem_used_bytes: None,
            mem_baseline_bytes: None,
            util_gpu_percent: None,
            util_mem_percent: None,
            power_mw: None,
            power_limit_mw: None,
            temp_c: None,
            health: GpuHealth::default(),
            errors: vec![FieldError {
                field: "device".to_owned(),
                reason,
            }],
        }
    }
}
