//! The benchmark form: what was typed, and the `POST /api/bench` body it asks
//! for, checked with the shared rules before it is sent.

use serde::Serialize;
use shared::bench::{BenchApi, BenchSettings, Correctness};

/// The benchmark form as typed; an empty field keeps the server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BenchForm {
    pub(crate) concurrency: String,
    pub(crate) prompts: String,
    pub(crate) input_len: String,
    pub(crate) output_len: String,
    pub(crate) warmup: String,
    pub(crate) repeats: String,
    /// "", "completions", "chat" or "generate".
    pub(crate) api: String,
    pub(crate) prompt: String,
    pub(crate) expect: String,
}

/// `POST /api/bench`'s body: only the settings the form changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct BenchRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) api: Option<BenchApi>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) concurrency: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) num_prompts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warmup: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) repeats: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) correctness: Option<Correctness>,
}

/// A whole number, or `None` for an empty field.
fn whole(what: &str, text: &str) -> Result<Option<u32>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse::<u32>()
        .map(Some)
        .map_err(|_| format!("{what}: `{t}` is not a whole number"))
}

/// "1,4,16,64" (commas or spaces) as a list; `None` when empty.
pub(crate) fn parse_concurrency(text: &str) -> Result<Option<Vec<u32>>, String> {
    let mut out = Vec::new();
    for part in text.split([',', ' ', ';']).filter(|p| !p.trim().is_empty()) {
        if let Some(v) = whole("concurrency", part)? {
            out.push(v);
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The request the form asks for, or why it cannot be sent. Ranges are
/// checked with the shared rules, so the wording is the server's.
pub(crate) fn bench_request(f: &BenchForm) -> Result<BenchRequest, String> {
    let api = match f.api.as_str() {
        "completions" => Some(BenchApi::Completions),
        "chat" => Some(BenchApi::Chat),
        "generate" => Some(BenchApi::Generate),
        _ => None,
    };
    let (prompt, expect) = (f.prompt.trim(), f.expect.trim());
    let req = BenchRequest {
        api,
        concurrency: parse_concurrency(&f.concurrency)?,
        num_prompts: whole("prompts", &f.prompts)?,
        input_len: whole("input length", &f.input_len)?,
        output_len: whole("output length", &f.output_len)?,
        warmup: whole("warm-up", &f.warmup)?,
        repeats: whole("repeats", &f.repeats)?,
        correctness: (!prompt.is_empty() || !expect.is_empty()).then(|| Correctness {
            prompt: prompt.to_owned(),
            expect: expect.to_owned(),
        }),
    };
    let d = BenchSettings::default();
    let merged = BenchSettings {
        api: req.api.unwrap_or(d.api),
        concurrency: req.concurrency.clone().unwrap_or(d.concurrency),
        num_prompts: req.num_prompts.unwrap_or(d.num_prompts),
        input_len: req.input_len.unwrap_or(d.input_len),
        output_len: req.output_len.unwrap_or(d.output_len),
        warmup: req.warmup.unwrap_or(d.warmup),
        repeats: req.repeats.unwrap_or(d.repeats),
        correctness: req.correctness.clone(),
        ..d
    };
    merged.validate()?;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_form_to_request() {
        let empty = bench_request(&BenchForm::default()).expect("defaults");
        assert_eq!(serde_json::to_string(&empty).expect("json"), "{}");
        let f = BenchForm {
            concurrency: " 1, 4,16 64 ".to_owned(),
            prompts: "32".to_owned(),
            repeats: "3".to_owned(),
            api: "chat".to_owned(),
            prompt: "2+2?".to_owned(),
            expect: "4".to_owned(),
            ..BenchForm::default()
        };
        let r = bench_request(&f).expect("valid");
        assert_eq!(
            serde_json::to_string(&r).expect("json"),
            r#"{"api":"chat","concurrency":[1,4,16,64],"num_prompts":32,"repeats":3,"correctness":{"prompt":"2+2?","expect":"4"}}"#
        );
        let bad = |f: BenchForm| bench_request(&f).expect_err("invalid");
        assert_eq!(
            bad(BenchForm {
                repeats: "2".to_owned(),
                ..BenchForm::default()
            }),
            "repeats must be from 3 to 20, got 2"
        );
        assert!(
            bad(BenchForm {
                concurrency: "1,x".to_owned(),
                ..BenchForm::default()
            })
            .contains("`x` is not a whole number")
        );
        assert!(
            bad(BenchForm {
                concurrency: "0".to_owned(),
                ..BenchForm::default()
            })
            .contains("out of range")
        );
        assert!(
            bad(BenchForm {
                expect: "4".to_owned(),
                ..BenchForm::default()
            })
            .contains("correctness")
        );
    }
}
