//! Counting the tokens of a streamed event's text with the model's own
//! tokenizer (`tokenizer.json`, read by Hugging Face's `tokenizers`), for
//! servers that do not say how many tokens each chunk carries.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A loaded `tokenizer.json`; cheap to clone, shared by every stream.
#[derive(Clone)]
pub struct Tokenizer {
    path: PathBuf,
    inner: Arc<tokenizers::Tokenizer>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
            .finish()
    }
}

/// A tokenizer file that does not read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot read the tokenizer {}: {why}", path.display())]
pub struct TokenizerError {
    pub path: std::path::PathBuf,
    /// The tokenizers library's words.
    pub why: String,
}

impl Tokenizer {
    /// The config's tokenizer, loaded: one named by `bench.tokenizer` must
    /// read (an error names the key); one found in the model's directory that
    /// does not read leaves the benchmark to count per event (said in the log).
    pub fn configured(
        file: &crate::config::file::TokenizerFile,
    ) -> Result<Option<Self>, crate::config::Problem> {
        use crate::config::file::TokenizerFile;
        match file {
            TokenizerFile::Named(path) => Self::load(path)
                .map(Some)
                .map_err(|e| crate::config::Problem::refused("bench.tokenizer", e)),
            TokenizerFile::InModel(path) => match Self::load(path) {
                Ok(t) => Ok(Some(t)),
                Err(e) => {
                    tracing::warn!(error = %e, "the model's tokenizer does not read; the benchmark counts tokens per event where the server does not count them");
                    Ok(None)
                }
            },
        }
    }

    /// Reads `path`: a `tokenizer.json`, or a model directory holding one.
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_owned()
        };
        let inner = tokenizers::Tokenizer::from_file(&file).map_err(|e| TokenizerError {
            path: file.clone(),
            why: e.to_string(),
        })?;
        Ok(Self {
            path: file,
            inner: Arc::new(inner),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens in `text` as a prompt: with the special tokens the model adds.
    pub fn count_prompt(&self, text: &str) -> u64 {
        self.inner
            .encode_fast(text, true)
            .map(|e| e.len() as u64)
            .unwrap_or(0)
    }

    /// Tokens in `text`, without the special tokens a prompt would get.
    pub fn count(&self, text: &str) -> u64 {
        self.inner
            .encode_fast(text, false)
            .map(|e| e.len() as u64)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_with_the_model_tokenizer_and_names_a_bad_file() {
        use crate::config::file::TokenizerFile;
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(
            dir.path().join("tokenizer.json"),
            include_str!("../../../tests/data/sim-model/tokenizer.json"),
        )
        .expect("write");
        let t = Tokenizer::load(dir.path()).expect("loads");
        assert_eq!(t.count("tok1 tok2 tok3 "), 3);
        assert_eq!(t.count("tok4 "), 1);
        assert_eq!(t.count(""), 0);
        let in_model = TokenizerFile::InModel(dir.path().join("tokenizer.json"));
        let found = Tokenizer::configured(&in_model).expect("reads");
        assert_eq!(found.as_ref().map(Tokenizer::path), Some(t.path()));
        std::fs::write(dir.path().join("tokenizer.json"), "{not json").expect("write");
        let e = Tokenizer::load(dir.path())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("tokenizer.json"), "{e}");
        // The model's own that does not read is left aside; a named one is an error.
        assert!(
            Tokenizer::configured(&in_model)
                .expect("no error")
                .is_none()
        );
        let named = TokenizerFile::Named(dir.path().join("tokenizer.json"));
        let e = Tokenizer::configured(&named)
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with("bench.tokenizer: "), "{e}");
    }
}
