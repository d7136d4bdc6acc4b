//! Random prompts sized in the model's own tokens. A prompt is made of
//! random words; how many tokens a word makes depends on the model's
//! tokenizer (one for the simulated model, about six for a SentencePiece
//! model reading `w12345`). Before a run, an empty prompt (its special
//! tokens) and a long text of the same words are counted by the best counter
//! at hand, and each prompt then gets the number of words that makes the
//! asked length:
//! 1. llama.cpp's and vLLM's `/tokenize` (the server's own tokenizer, with the
//!    special tokens it adds to a prompt);
//! 2. the model's `tokenizer.json`, where the config names one;
//! 3. the server's `usage.prompt_tokens` for two one-token completions (of
//!    one word, since a server may refuse an empty prompt, and of the text).
//!
//! What the server then counted per request is recorded with every result
//! and checked against the asked length (`shared::bench::prompt_len_warning`).

use std::time::Duration;

use shared::bench::PromptSizing;

use super::load::{self, Target};
use super::prompts::calibration_text;
use crate::config::file::Engine;

/// Words in the calibration text: long enough that its tokens per word is
/// the mean's to well under 1 %, whatever its random words.
const LONG: u32 = 512;

/// How many words make `tokens` tokens under `s` (at least one).
pub fn words(s: &PromptSizing, tokens: u32, with_overhead: bool) -> u32 {
    let per = if s.tokens_per_word > 0.0 {
        s.tokens_per_word
    } else {
        1.0
    };
    let overhead = if with_overhead {
        s.overhead_tokens
    } else {
        0.0
    };
    ((f64::from(tokens) - overhead) / per).round().max(1.0) as u32
}

/// One word a token: what a run assumes when nothing could count.
pub fn unmeasured() -> PromptSizing {
    PromptSizing {
        by: "not measured (one word a token)".to_owned(),
        tokens_per_word: 1.0,
        overhead_tokens: 0.0,
    }
}

/// Measures how the target's model counts the prompts' words: what an
/// empty prompt counts (its special tokens; a server that refuses an empty
/// prompt is asked for one word, and that word's share taken off), then a
/// long text of the prompts' words.
pub async fn measure(client: &reqwest::Client, target: &Target) -> PromptSizing {
    let long = calibration_text(LONG);
    let counters: [(&str, Counter); 3] = [
        ("the server's /tokenize", Counter::Tokenize),
        ("the model's tokenizer.json", Counter::Local),
        ("the server's usage.prompt_tokens", Counter::Usage),
    ];
    for (by, counter) in counters {
        let Some(b) = counter.count(client, target, &long).await else {
            continue;
        };
        let (short, words) = match counter {
            Counter::Usage => (calibration_text(1), 1),
            _ => (String::new(), 0),
        };
        let Some(a) = counter.count(client, target, &short).await else {
            continue;
        };
        if b <= a {
            continue;
        }
        let per = (b - a) as f64 / f64::from(LONG - words);
        let overhead = (a as f64 - per * f64::from(words)).max(0.0);
        tracing::debug!(by, per, overhead, "prompt sizing");
        return PromptSizing {
            by: by.to_owned(),
            tokens_per_word: per,
            overhead_tokens: overhead,
        };
    }
    tracing::warn!(
        "no tokenizer could count the prompts' tokens: one word is taken for a token, and each result says how long the server counted its prompts"
    );
    unmeasured()
}

#[derive(Debug, Clone, Copy)]
enum Counter {
    Tokenize,
    Local,
    Usage,
}

impl Counter {
    async fn count(self, client: &reqwest::Client, target: &Target, text: &str) -> Option<u64> {
        match self {
            Self::Tokenize => tokenize(client, target, text).await,
            Self::Local => target.tokenizer.as_ref().map(|t| t.count_prompt(text)),
            Self::Usage => usage(client, target, text).await,
        }
    }
}

/// POSTs `body` to the server's `url` and reads its JSON answer (up to 1 MiB).
async fn post_json(
    client: &reqwest::Client,
    target: &Target,
    url: &str,
    body: &serde_json::Value,
) -> Option<serde_json::Value> {
    let mut req = client.post(url).json(body).timeout(Duration::from_secs(30));
    if let Some(key) = &target.api_key {
        req = req.header(reqwest::header::AUTHORIZATION, key.bearer());
    }
    // 512 words are a few thousand token ids: far under the 1 MiB read.
    load::read_json(req).await
}

/// The server's own tokenizer, with the special tokens a prompt gets.
async fn tokenize(client: &reqwest::Client, target: &Target, text: &str) -> Option<u64> {
    let url = format!("{}/tokenize", target.base_url);
    match target.engine {
        Engine::Llamacpp => {
            let v = post_json(
                client,
                target,
                &url,
                &serde_json::json!({"content": text, "add_special": true}),
            )
            .await?;
            v["tokens"].as_array().map(|t| t.len() as u64)
        }
        Engine::Vllm => {
            let v = post_json(
                client,
                target,
                &url,
                &serde_json::json!({"model": target.model, "prompt": text}),
            )
            .await?;
            v["count"].as_u64()
        }
        Engine::Sglang | Engine::Other => None,
    }
}

/// The prompt tokens the server counted for a one-token completion of `text`.
async fn usage(client: &reqwest::Client, target: &Target, text: &str) -> Option<u64> {
    let v = post_json(client, target, &target.url(), &target.body(text, 1, false)).await?;
    v["usage"]["prompt_tokens"]
        .as_u64()
        .or_else(|| v["meta_info"]["prompt_tokens"].as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_make_the_asked_tokens() {
        let gemma = PromptSizing {
            by: "x".into(),
            tokens_per_word: 5.9,
            overhead_tokens: 1.0,
        };
        // 11 words of ~5.9 tokens and a BOS: 65.9, the nearest to 64.
        assert_eq!(words(&gemma, 64, true), 11);
        assert_eq!(words(&gemma, 1024, true), 173);
        assert_eq!(words(&gemma, 1, true), 1, "never no words");
        assert_eq!(words(&gemma, 59, false), 10);
        let sim = unmeasured();
        assert_eq!(words(&sim, 128, true), 128);
    }
}
