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

impl Tokenizer {
    /// Reads `path`: a `tokenizer.json`, or a model directory holding one.
    pub fn load(path: &Path) -> Result<Self, String> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_owned()
        };
        let inner = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| format!("cannot read the tokenizer {}: {e}", file.display()))?;
        Ok(Self {
            path: file,
            inner: Arc::new(inner),
        })
    }

    /// The `tokenizer.json` of a model directory, if `model` is one that has it
    /// (a model the server downloads by name has none here).
    pub fn in_model_dir(model: &Path) -> Option<PathBuf> {
        let file = model.join("tokenizer.json");
        file.is_file().then_some(file)
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
        assert_eq!(
            Tokenizer::in_model_dir(dir.path()).as_deref(),
            Some(t.path())
        );
        std::fs::write(dir.path().join("tokenizer.json"), "{not json").expect("write");
        let e = Tokenizer::load(dir.path()).expect_err("refused");
        assert!(e.contains("tokenizer.json"), "{e}");
    }
}
