//! Benchmark prompts from a file: ShareGPT-format JSON (an array of
//! conversations; the first human turn is the prompt, the answer after it
//! gives the output length) or JSONL (one `{"prompt", "output_len"}` per
//! line). Files are named, not pathed: only the configured `[bench] datasets`
//! directory is read, a file of at most [`MAX_BYTES`].

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::tokens::Tokenizer;

/// The largest dataset file read.
pub const MAX_BYTES: u64 = 64 << 20;
/// The most entries kept.
const MAX_ENTRIES: usize = 1_000_000;
/// Output lengths are clamped to what a benchmark may ask for.
const MAX_OUTPUT: u32 = 32_768;

/// One prompt and, where the file says, how long its answer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub prompt: String,
    pub output_len: Option<u32>,
}

/// A loaded dataset file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// Its file name in the datasets directory.
    pub name: String,
    /// SHA-256 of the file's bytes (hex): two runs compare only on the same.
    pub sha256: String,
    pub entries: Vec<Entry>,
}

/// Why a dataset was not read: it names the dataset.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error(
        "dataset `{0}`: give a file name in the datasets directory (letters, digits, `.`, `_`, `-`)"
    )]
    BadName(String),
    #[error("dataset `{name}`: {source}")]
    Io {
        name: String,
        source: std::io::Error,
    },
    #[error("dataset `{0}`: not a file")]
    NotAFile(String),
    #[error("dataset `{name}`: {mib} MiB, over the {} MiB a dataset may be", MAX_BYTES >> 20)]
    TooLarge { name: String, mib: u64 },
    #[error("dataset `{name}`: not UTF-8 text ({source})")]
    NotUtf8 {
        name: String,
        source: std::str::Utf8Error,
    },
    #[error("dataset `{name}`: {error}")]
    Content { name: String, error: ContentError },
}

/// What is wrong inside a dataset's text: it names the line where it can.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    #[error("no prompts in it")]
    Empty,
    #[error("line {line}, column {column}: not ShareGPT JSON ({message})")]
    NotShareGpt {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("line {0}: expected {{\"prompt\": \"…\", \"output_len\": N}} ({1})")]
    BadLine(usize, String),
    #[error("line {0}: the prompt is empty")]
    EmptyPrompt(usize),
    #[error("line {line}: output_len must be from 1 to {MAX_OUTPUT}, got {got}")]
    OutputLen { line: usize, got: u32 },
    #[error("over {MAX_ENTRIES} prompts")]
    TooMany,
}

/// A dataset's name: a plain file name, never a path.
fn check_name(name: &str) -> Result<(), DatasetError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(DatasetError::BadName(name.chars().take(128).collect()))
    }
}

/// Reads `name` from `dir`; `tokenizer` counts a ShareGPT answer's tokens
/// (else its words do).
pub fn load(
    dir: &Path,
    name: &str,
    tokenizer: Option<&Tokenizer>,
) -> Result<Dataset, DatasetError> {
    check_name(name)?;
    let path = dir.join(name);
    let named = || name.to_owned();
    let io = |source| DatasetError::Io {
        name: named(),
        source,
    };
    let meta = std::fs::metadata(&path).map_err(io)?;
    if !meta.is_file() {
        return Err(DatasetError::NotAFile(named()));
    }
    if meta.len() > MAX_BYTES {
        return Err(DatasetError::TooLarge {
            name: named(),
            mib: meta.len() >> 20,
        });
    }
    let bytes = std::fs::read(&path).map_err(io)?;
    let text = std::str::from_utf8(&bytes).map_err(|source| DatasetError::NotUtf8 {
        name: named(),
        source,
    })?;
    let entries = parse(text, tokenizer).map_err(|error| DatasetError::Content {
        name: named(),
        error,
    })?;
    Ok(Dataset {
        name: name.to_owned(),
        sha256: hex(&Sha256::digest(&bytes)),
        entries,
    })
}

impl Dataset {
    /// The longest prompt, in bytes: what each request in flight may hold.
    pub fn max_prompt_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.prompt.len() as u64)
            .max()
            .unwrap_or(0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Either format, told apart by the first character.
pub fn parse(text: &str, tokenizer: Option<&Tokenizer>) -> Result<Vec<Entry>, ContentError> {
    let entries = if text.trim_start().starts_with('[') {
        sharegpt(text, tokenizer)?
    } else {
        jsonl(text)?
    };
    if entries.is_empty() {
        return Err(ContentError::Empty);
    }
    Ok(entries)
}

#[derive(Deserialize)]
struct Conversation {
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    from: String,
    value: String,
}

/// ShareGPT: conversations without a human turn followed by an answer are
/// left out (as `vllm bench serve` does).
fn sharegpt(text: &str, tokenizer: Option<&Tokenizer>) -> Result<Vec<Entry>, ContentError> {
    let all: Vec<Conversation> =
        serde_json::from_str(text).map_err(|e| ContentError::NotShareGpt {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
    let count = |t: &str| match tokenizer {
        Some(tk) => tk.count(t),
        None => t.split_whitespace().count() as u64,
    };
    Ok(all
        .iter()
        .filter_map(|c| {
            let i = c
                .conversations
                .iter()
                .position(|t| matches!(t.from.as_str(), "human" | "user"))?;
            let answer = c.conversations.get(i + 1)?;
            let prompt = c.conversations[i].value.trim();
            (!prompt.is_empty()).then(|| Entry {
                prompt: prompt.to_owned(),
                output_len: Some((count(&answer.value) as u32).clamp(1, MAX_OUTPUT)),
            })
        })
        .take(MAX_ENTRIES)
        .collect())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    prompt: String,
    #[serde(default)]
    output_len: Option<u32>,
}

/// JSONL: every line an object; an error names its line.
fn jsonl(text: &str) -> Result<Vec<Entry>, ContentError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let l: Line =
            serde_json::from_str(line).map_err(|e| ContentError::BadLine(n, e.to_string()))?;
        if l.prompt.trim().is_empty() {
            return Err(ContentError::EmptyPrompt(n));
        }
        if let Some(len) = l.output_len
            && !(1..=MAX_OUTPUT).contains(&len)
        {
            return Err(ContentError::OutputLen { line: n, got: len });
        }
        if out.len() == MAX_ENTRIES {
            return Err(ContentError::TooMany);
        }
        out.push(Entry {
            prompt: l.prompt,
            output_len: l.output_len,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_read_and_errors_name_the_line() {
        let jl = "{\"prompt\": \"a b c\", \"output_len\": 7}\n\n{\"prompt\": \"d\"}\n";
        let e = parse(jl, None).expect("valid");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].output_len, Some(7));
        assert_eq!(e[1].output_len, None);
        let bad = "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"output_len\": 3\n";
        let err = parse(bad, None).expect_err("line 2 is cut").to_string();
        assert!(err.starts_with("line 2: "), "{err}");
        let err = parse("{\"prompt\": \"a\", \"output_len\": 0}", None)
            .expect_err("zero")
            .to_string();
        assert!(err.contains("line 1: output_len"), "{err}");
        let err = parse("{\"prompt\": \" \"}", None)
            .expect_err("empty")
            .to_string();
        assert!(err.contains("line 1: the prompt is empty"), "{err}");
        let err = parse("{\"text\": \"a\"}", None)
            .expect_err("unknown field")
            .to_string();
        assert!(err.starts_with("line 1:"), "{err}");

        let sg = r#"[
          {"id": "1", "conversations": [{"from": "human", "value": "Hi there"},
                                        {"from": "gpt", "value": "one two three four"}]},
          {"id": "2", "conversations": [{"from": "human", "value": "no answer"}]},
          {"id": "3", "conversations": [{"from": "system", "value": "s"},
                                        {"from": "user", "value": "Q"},
                                        {"from": "assistant", "value": "A B"}]}
        ]"#;
        let e = parse(sg, None).expect("valid");
        assert_eq!(
            e,
            [
                Entry {
                    prompt: "Hi there".into(),
                    output_len: Some(4)
                },
                Entry {
                    prompt: "Q".into(),
                    output_len: Some(2)
                },
            ]
        );
        let err = parse("[{\"conversations\": [}]", None)
            .expect_err("broken")
            .to_string();
        assert!(err.starts_with("line 1, column "), "{err}");
        assert!(parse("[]", None).expect_err("empty") == ContentError::Empty);
    }

    #[test]
    fn only_plain_names_in_the_directory_are_read() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("ok.jsonl"), "{\"prompt\": \"x\"}\n").expect("write");
        let d = load(dir.path(), "ok.jsonl", None).expect("loads");
        assert_eq!(d.entries.len(), 1);
        assert_eq!(d.sha256.len(), 64);
        for name in ["../etc/passwd", "/etc/passwd", ".hidden", "a/b", "", "x y"] {
            let e = load(dir.path(), name, None).expect_err(name).to_string();
            assert!(e.contains("give a file name"), "{name}: {e}");
        }
        assert!(load(dir.path(), "absent.jsonl", None).is_err());
    }
}
