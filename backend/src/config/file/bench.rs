//! The `[bench]` section and `server.engine`: the benchmark's defaults, and
//! where the tokenizer is that counts streamed tokens where the server does
//! not (the benchmark loads it: `bench::tokens::Tokenizer::configured`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::Problem;
use shared::bench::{BenchApi, BenchSettings};

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
    pub tokenizer: Option<TokenizerFile>,
    /// The directory benchmark requests may name dataset files in.
    pub datasets: Option<PathBuf>,
}

/// Where the model's `tokenizer.json` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerFile {
    /// Named by `bench.tokenizer`: it must read.
    Named(PathBuf),
    /// Found in the local model directory: used if it reads.
    InModel(PathBuf),
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
    ) -> Result<BenchConfig, Problem> {
        let api_given = self
            .defaults
            .as_ref()
            .is_some_and(|d| d.contains_key("api"));
        let mut defaults: BenchSettings = match self.defaults {
            Some(table) => table
                .try_into()
                .map_err(|e: toml::de::Error| Problem::refused("bench.defaults", e.message()))?,
            None => BenchSettings::default(),
        };
        if engine == Engine::Sglang && !api_given {
            defaults.api = BenchApi::Generate;
        }
        defaults
            .validate()
            .map_err(|e| Problem::refused("bench.defaults", e))?;
        let tokenizer = match self.tokenizer {
            Some(path) => {
                let path = dir.join(path);
                let file = if path.is_dir() {
                    path.join("tokenizer.json")
                } else {
                    path
                };
                if !file.is_file() {
                    return Err(Problem::refused(
                        "bench.tokenizer",
                        format!("cannot read the tokenizer {}: no such file", file.display()),
                    ));
                }
                Some(TokenizerFile::Named(file))
            }
            None => model_tokenizer(model, dir).map(TokenizerFile::InModel),
        };
        let datasets = match self.datasets {
            Some(path) => {
                let path = dir.join(path);
                if !path.is_dir() {
                    return Err(Problem::refused(
                        format!("bench.datasets ({})", path.display()),
                        "not a directory",
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

/// The tokenizer in the model's directory, if it is a local one with a
/// `tokenizer.json`. A model named by hub id has none here: the benchmark
/// counts per event.
fn model_tokenizer(model: &str, dir: &Path) -> Option<PathBuf> {
    let path = model.rsplit_once('@').map_or(model, |(path, _)| path);
    if path.is_empty() {
        return None;
    }
    let file = dir.join(path).join("tokenizer.json");
    file.is_file().then_some(file)
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
