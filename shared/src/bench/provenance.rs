//! What a result was measured with and under ([`Provenance`]): versions, the
//! workload, and what the GPUs did meanwhile.

use serde::{Deserialize, Serialize};

use super::spread::Spread;

/// The context that makes a result believable later.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub drainwatch_version: String,
    pub hostname: String,
    /// The GPUs were drainwatch's simulated host, not real ones.
    pub simulated: bool,
    pub driver_version: Option<String>,
    /// CUDA driver API version, e.g. "12.9".
    pub cuda_version: Option<String>,
    /// The server's own version (SGLang's `/get_server_info`, vLLM's
    /// `/version`), and which endpoint said so.
    pub server_version: Option<String>,
    pub server_version_from: Option<String>,
    /// The model as the server was told, and its revision when pinned.
    pub model: String,
    pub revision: Option<String>,
    /// The prompts' seed: each level and repeat derives its own from it.
    pub seed: u64,
    /// What was asked: random words, a dataset file, or shared prefixes.
    #[serde(default)]
    pub workload: Workload,
    /// Per GPU over the run's repeats: min, median and max.
    pub gpus: Vec<GpuConditions>,
    /// What the server said of itself besides its version (llama.cpp's
    /// `/props`): the model it loaded, its build, context and slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineProps>,
    /// How the prompts were sized to the asked length in the model's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sizing: Option<PromptSizing>,
}

/// A server's account of itself (llama.cpp's `/props`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineProps {
    /// "llama.cpp".
    pub engine: String,
    /// The model file the server loaded.
    pub model: Option<String>,
    /// Its build ("b11434-…").
    pub build: Option<String>,
    /// Context size per slot and the number of slots (parallel sequences).
    pub ctx_size: Option<u64>,
    pub slots: Option<u32>,
}

/// How random prompts were sized: the words a prompt gets for `n` tokens
/// are `(n - overhead_tokens) / tokens_per_word`, measured with the model's
/// own tokenizer before the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptSizing {
    /// What counted: "the server's /tokenize", "the model's tokenizer.json",
    /// "the server's usage" — or "not measured" (one word a token).
    pub by: String,
    pub tokens_per_word: f64,
    /// Tokens every prompt gets besides its words (a BOS token, a template).
    pub overhead_tokens: f64,
}

/// The prompts of a run. Two results compare only with the same workload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// "random", "dataset" or "shared_prefix".
    pub kind: String,
    pub input_len: u32,
    pub output_len: u32,
    /// The dataset's file name, its SHA-256 and how many prompts it has.
    pub dataset: Option<String>,
    pub dataset_sha256: Option<String>,
    pub dataset_prompts: Option<u32>,
    pub prefix_groups: Option<u32>,
    pub prefix_len: Option<u32>,
}

impl Workload {
    /// Why two workloads make two results incomparable, if they do. The
    /// seed is not part of it: random prompts of one length are alike.
    pub fn differs(&self, other: &Self) -> Option<String> {
        if self.kind != other.kind {
            return Some(format!(
                "one ran {} prompts, the other {} prompts",
                self.kind.replace('_', "-"),
                other.kind.replace('_', "-")
            ));
        }
        if self.dataset_sha256 != other.dataset_sha256 {
            return Some("they ran different dataset files".to_owned());
        }
        if (self.prefix_groups, self.prefix_len) != (other.prefix_groups, other.prefix_len) {
            return Some("their shared prefixes differ".to_owned());
        }
        // A dataset's own lengths make the settings' moot where it gives them.
        if self.kind != "dataset"
            && (self.input_len, self.output_len) != (other.input_len, other.output_len)
        {
            return Some(format!(
                "one ran {} → {} tokens, the other {} → {}",
                self.input_len, self.output_len, other.input_len, other.output_len
            ));
        }
        None
    }
}

/// A run's GPU conditions in brief, for the ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConditions {
    /// The lowest power cap of any GPU during the run (W).
    pub power_limit_w: Option<f64>,
    /// The hottest any GPU got (°C).
    pub temp_max_c: Option<f64>,
    /// Clocks held down for power or heat during the run, in words: "GPU 7:
    /// hardware thermal slowdown in 12 of 40 samples"; one line per GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttled: Vec<String>,
    pub server_version: Option<String>,
    /// Its workload: the compare panel says when two sets' differ.
    #[serde(default)]
    pub workload: Workload,
}

impl RunConditions {
    /// From this temperature on, a GPU may be slowing itself down.
    pub const HOT_C: f64 = 85.0;

    pub fn of(p: &Provenance) -> Self {
        Self {
            power_limit_w: p
                .gpus
                .iter()
                .filter_map(|g| g.power_limit_w)
                .reduce(f64::min),
            temp_max_c: p
                .gpus
                .iter()
                .filter_map(|g| g.temp_c.map(|t| t.max))
                .reduce(f64::max),
            throttled: p
                .gpus
                .iter()
                .filter_map(GpuConditions::throttle_line)
                .collect(),
            server_version: p.server_version.clone(),
            workload: p.workload.clone(),
        }
    }
}

/// What one GPU did while the benchmark ran, from drainwatch's own samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuConditions {
    pub index: u32,
    pub samples: u32,
    pub util_pct: Option<Spread>,
    pub power_w: Option<Spread>,
    /// The power cap it ran under (its lowest during the run).
    pub power_limit_w: Option<f64>,
    pub temp_c: Option<Spread>,
    pub mem_used_gib: Option<Spread>,
    /// Samples in which its clocks were held down for power or heat
    /// ([`crate::health::THROTTLE_MASK`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub throttled_samples: u32,
    /// Those reasons, all seen during the run (`nvmlClocksEventReason*` bits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<u64>,
}

impl GpuConditions {
    /// "GPU 7: hardware thermal slowdown in 12 of 40 samples", when throttled.
    pub fn throttle_line(&self) -> Option<String> {
        (self.throttled_samples > 0).then(|| {
            let names = crate::health::reason_names(self.throttle_reasons.unwrap_or(0));
            format!(
                "GPU {}: {} in {} of {} samples",
                self.index,
                if names.is_empty() {
                    "throttled".to_owned()
                } else {
                    names.join(", ")
                },
                self.throttled_samples,
                self.samples
            )
        })
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
