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

/// A dataset's name: a plain file name, never a path.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "dataset `{}`: give a file name in the datasets directory (letters, digits, `.`, `_`, `-`)",
            name.chars().take(128).collect::<String>()
        ))
    }
}

/// Reads `name` from `dir`; `tokenizer` counts a ShareGPT answer's tokens
/// (else its words do).
pub fn load(dir: &Path, name: &str, tokenizer: Option<&Tokenizer>) -> Result<Dataset, String> {
    check_name(name)?;
    let path = dir.join(name);
    let meta = std::fs::metadata(&path).map_err(|e| format!("dataset `{name}`: {e}"))?;
    if !meta.is_file() {
        return Err(format!("dataset `{name}`: not a file"));
    }
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "dataset `{name}`: {} MiB, over the {} MiB a dataset may be",
            meta.len() >> 20,
            MAX_BYTES >> 20
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("dataset `{name}`: {e}"))?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| format!("dataset `{name}`: not UTF-8 text ({e})"))?;
    let entries = parse(text, tokenizer).map_err(|e| format!("dataset `{name}`: {e}"))?;
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
pub fn parse(text: &str, tokenizer: Option<&Tokenizer>) -> Result<Vec<Entry>, String> {
    let entries = if text.trim_start().starts_with('[') {
        sharegpt(text, tokenizer)?
    } else {
        jsonl(text)?
    };
    if entries.is_empty() {
        return Err("no prompts in it".to_owned());
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
fn sharegpt(text: &str, tokenizer: Option<&Tokenizer>) -> Result<Vec<Entry>, String> {
    let all: Vec<Conversation> = serde_json::from_str(text).map_err(|e| {
        format!(
            "line {}, column {}: not ShareGPT JSON ({e})",
            e.line(),
            e.column()
        )
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
fn jsonl(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = i + 1;
        let l: Line = serde_json::from_str(line).map_err(|e| {
            format!("line {n}: expected {{\"prompt\": \"…\", \"output_len\": N}} ({e})")
        })?;
        if l.prompt.trim().is_empty() {
            return Err(format!("line {n}: the prompt is empty"));
        }
        if let Some(len) = l.output_len
            && !(1..=MAX_OUTPUT).contains(&len)
        {
            return Err(format!(
                "line {n}: output_len must be from 1 to {MAX_OUTPUT}, got {len}"
            ));
        }
        if out.len() == MAX_ENTRIES {
            return Err(format!("over {MAX_ENTRIES} prompts"));
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
        let err = parse(bad, None).expect_err("line 2 is cut");
        assert!(err.starts_with("line 2: "), "{err}");
        let err = parse("{\"prompt\": \"a\", \"output_len\": 0}", None).expect_err("zero");
        assert!(err.contains("line 1: output_len"), "{err}");
        let err = parse("{\"prompt\": \" \"}", None).expect_err("empty");
        assert!(err.contains("line 1: the prompt is empty"), "{err}");
        let err = parse("{\"text\": \"a\"}", None).expect_err("unknown field");
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
        let err = parse("[{\"conversations\": [}]", None).expect_err("broken");
        assert!(err.starts_with("line 1, column "), "{err}");
        assert!(parse("[]", None).expect_err("empty").contains("no prompts"));
    }

    #[test]
    fn only_plain_names_in_the_directory_are_read() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("ok.jsonl"), "{\"prompt\": \"x\"}\n").expect("write");
        let d = load(dir.path(), "ok.jsonl", None).expect("loads");
        assert_eq!(d.entries.len(), 1);
        assert_eq!(d.sha256.len(), 64);
        for name in ["../etc/passwd", "/etc/passwd", ".hidden", "a/b", "", "x y"] {
            let e = load(dir.path(), name, None).expect_err(name);
            assert!(e.contains("give a file name"), "{name}: {e}");
        }
        assert!(load(dir.path(), "absent.jsonl", None).is_err());
    }
}
