//! A stream's events as the load generator reads them: the chunks of the
//! OpenAI APIs, SGLang's `/generate` and llama.cpp (with their cumulative
//! counts), each event's arrival and its tokens, and where one event ends in
//! the bytes received.

use serde::Deserialize;
use shared::bench::TokenSource;

use super::tokens::Tokenizer;

/// A streamed chunk of either OpenAI API, or of SGLang's `/generate`.
#[derive(Debug, Deserialize)]
pub(super) struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<Usage>,
    /// `/generate`: the text so far.
    text: Option<String>,
    /// `/generate`: the counts so far.
    meta_info: Option<Usage>,
    /// llama.cpp: its timings so far (in every chunk with `timings_per_token`).
    timings: Option<Timings>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
pub(super) struct Timings {
    /// Tokens generated so far.
    predicted_n: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Choice {
    text: Option<String>,
    delta: Option<Delta>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Delta {
    content: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy)]
pub(super) struct Usage {
    pub(super) prompt_tokens: Option<u64>,
    pub(super) completion_tokens: Option<u64>,
}

impl Chunk {
    /// The new text of an OpenAI chunk, if it has any.
    fn content(&self) -> Option<&str> {
        self.choices
            .iter()
            .filter_map(|c| {
                c.text
                    .as_deref()
                    .or_else(|| c.delta.as_ref().and_then(|d| d.content.as_deref()))
            })
            .find(|t| !t.is_empty())
    }
}

/// Content events of one stream: arrival time and tokens with how they were
/// counted (`None`: not counted).
#[derive(Debug, Default)]
pub(super) struct Events {
    pub(super) at: Vec<f64>,
    pub(super) tokens: Vec<Option<(u64, TokenSource)>>,
    pub(super) final_usage: Option<Usage>,
}

impl Events {
    /// Reads one chunk that arrived at `now`; `cumulative` is the server's
    /// count so far, `text_len` the length of `/generate`'s text so far.
    pub(super) fn read(
        &mut self,
        chunk: Chunk,
        now: f64,
        tokenizer: Option<&Tokenizer>,
        cumulative: &mut u64,
        text_len: &mut usize,
    ) {
        if let Some(meta) = chunk.meta_info {
            // `/generate`: a chunk is an event when the count or the text grew.
            let text = chunk.text.unwrap_or_default();
            let count = meta.completion_tokens;
            let grew = count.is_some_and(|c| c > *cumulative) || text.len() > *text_len;
            if grew {
                let tokens = match count {
                    Some(c) => Some((c.saturating_sub(*cumulative), TokenSource::ChunkUsage)),
                    None => tokenizer.map(|t| {
                        let new = text.get(*text_len..).unwrap_or_default();
                        (t.count(new), TokenSource::Tokenizer)
                    }),
                };
                self.at.push(now);
                self.tokens.push(tokens);
            }
            *cumulative = count.unwrap_or(*cumulative).max(*cumulative);
            *text_len = text.len().max(*text_len);
            self.final_usage = Some(meta);
            return;
        }
        let usage = chunk.usage;
        let so_far = usage
            .and_then(|u| u.completion_tokens)
            .or_else(|| chunk.timings.and_then(|t| t.predicted_n));
        if let Some(text) = chunk.content() {
            let tokens = match so_far {
                Some(c) => {
                    let k = c.saturating_sub(*cumulative);
                    *cumulative = c;
                    Some((k, TokenSource::ChunkUsage))
                }
                None => tokenizer.map(|t| (t.count(text), TokenSource::Tokenizer)),
            };
            self.at.push(now);
            self.tokens.push(tokens);
        }
        // The newest usage is the whole request's once the stream ends
        // (cumulative where a server sends it with every chunk).
        if usage.is_some() {
            self.final_usage = usage;
        }
    }
}

/// `(payload length, separator length)` of the first complete event in `buf`.
pub(super) fn find_event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}
