//! The `[bench]` section and `server.engine`: the benchmark's defaults, and the
//! tokenizer that counts streamed tokens where the server does not.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use shared::bench::{BenchApi, BenchSettings};

use crate::bench::tokens::Tokenizer;

/// Which server the config runs, where it changes what drainwatch does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// SGLang: the benchmark loads its native `/generate`, which counts the
    /// tokens of every streamed chunk, unless `bench.defaults.api` says otherwise.
    Sglang,
    Vllm,
    /// llama.cpp's `llama-server`: its streamed chunks carry `timings`
    /// (asked for with `timings_per_token`), whose `predicted_n` counts the
    /// tokens so far; `/tokenize` sizes prompts, `/props` says what it runs.
    Llamacpp,
    /// Any other OpenAI-compatible server.
    #[default]
    Other,
}

/// The serving benchmark's defaults.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Run a benchmark whenever a restart (or start) reaches Ready.
    pub after_restart: bool,
    /// The `model` field of benchmark requests.
    pub request_model: String,
    pub defaults: BenchSettings,
    /// The model's tokenizer: `bench.tokenizer`, else the model directory's
    /// `tokenizer.json` if the model is a local directory that has one.
    pub tokenizer: Option<Tokenizer>,
    /// The directory benchmark requests may name dataset files in.
    pub datasets: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBench {
    #[serde(default)]
    after_restart: bool,
    model: Option<String>,
    /// A `tokenizer.json`, or a model directory holding one.
    tokenizer: Option<PathBuf>,
    /// Where dataset files are (relative to the config's directory).
    datasets: Option<PathBuf>,
    defaults: Option<toml::Table>,
}

impl RawBench {
    /// Validates the section; `dir` is the config file's directory, `model` the
    /// server's model (a path, perhaps with `@revision`).
    pub(super) fn check(
        self,
        engine: Engine,
        model: &str,
        dir: &Path,
    ) -> Result<BenchConfig, String> {
        let api_given = self
            .defaults
            .as_ref()
            .is_some_and(|d| d.contains_key("api"));
        let mut defaults: BenchSettings = match self.defaults {
            Some(table) => table
                .try_into()
                .map_err(|e: toml::de::Error| format!("bench.defaults: {}", e.message()))?,
            None => BenchSettings::default(),
        };
        if engine == Engine::Sglang && !api_given {
            defaults.api = BenchApi::Generate;
        }
        defaults
            .validate()
            .map_err(|e| format!("bench.defaults: {e}"))?;
        let tokenizer = match self.tokenizer {
            Some(path) => {
                let path = if path.is_relative() {
                    dir.join(path)
                } else {
                    path
                };
                Some(Tokenizer::load(&path).map_err(|e| format!("bench.tokenizer: {e}"))?)
            }
            None => model_tokenizer(model, dir),
        };
        let datasets = match self.datasets {
            Some(path) => {
                let path = if path.is_relative() {
                    dir.join(path)
                } else {
                    path
                };
                if !path.is_dir() {
                    return Err(format!(
                        "bench.datasets ({}): not a directory",
                        path.display()
                    ));
                }
                Some(path)
            }
            None => None,
        };
        Ok(BenchConfig {
            datasets,
            after_restart: self.after_restart,
            request_model: self.model.unwrap_or_else(|| "default".to_owned()),
            defaults,
            tokenizer,
        })
    }
}

/// The tokenizer in the model's directory, if it is a local one with a readable
/// `tokenizer.json`. A model named by hub id, or one whose tokenizer does not
/// read, leaves the benchmark to count per event (said in the log).
fn model_tokenizer(model: &str, dir: &Path) -> Option<Tokenizer> {
    let path = model.rsplit_once('@').map_or(model, |(path, _)| path);
    if path.is_empty() {
        return None;
    }
    let path = dir.join(path);
    let file = Tokenizer::in_model_dir(&path)?;
    match Tokenizer::load(&file) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "the model's tokenizer does not read; the benchmark counts tokens per event where the server does not count them");
            None
        }
    }
}

impl Engine {
    /// Where the server says what it is, in the order asked: a path and the
    /// field of its answer that holds its version.
    pub fn version_endpoints(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Llamacpp => &[("/props", "build_info")],
            _ => &[("/get_server_info", "version"), ("/version", "version")],
        }
    }

    /// Its name as people say it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Sglang => "SGLang",
            Self::Vllm => "vLLM",
            Self::Llamacpp => "llama.cpp",
            Self::Other => "an OpenAI-compatible server",
        }
    }
}
