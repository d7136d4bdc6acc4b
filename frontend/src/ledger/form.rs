//! The benchmark form: what was typed, and the `POST /api/bench` body it asks
//! for, checked with the shared rules before it is sent.

use serde::Serialize;
use shared::bench::{BenchApi, BenchSettings, Correctness, Slo};

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
    /// Open loop: "2,4,8" requests/s, and the cap on what is in flight.
    pub(crate) rates: String,
    pub(crate) max_in_flight: String,
    /// Goodput's objectives, in ms.
    pub(crate) slo_ttft: String,
    pub(crate) slo_tpot: String,
    pub(crate) slo_e2e: String,
    /// A dataset file's name, or shared prefixes: groups and their length.
    pub(crate) dataset: String,
    pub(crate) prefix_groups: String,
    pub(crate) prefix_len: String,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) request_rate: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) slo: Option<Slo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dataset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prefix_groups: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prefix_len: Option<u32>,
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

/// A number of milliseconds or requests per second, or `None` for an empty field.
fn number(what: &str, text: &str) -> Result<Option<f64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    shared::decimal::parse_f64(t)
        .filter(|v| v.is_finite())
        .map(Some)
        .ok_or_else(|| format!("{what}: `{t}` is not a number"))
}

/// "2, 4.5 8" as a list of rates; `None` when empty.
fn parse_rates(text: &str) -> Result<Option<Vec<f64>>, String> {
    let mut out = Vec::new();
    for part in text.split([',', ' ', ';']).filter(|p| !p.trim().is_empty()) {
        if let Some(v) = number("request rate", part)? {
            out.push(v);
        }
    }
    Ok((!out.is_empty()).then_some(out))
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
        request_rate: parse_rates(&f.rates)?,
        max_concurrency: whole("max in flight", &f.max_in_flight)?,
        slo: None,
        dataset: Some(f.dataset.trim().to_owned()).filter(|d| !d.is_empty()),
        prefix_groups: whole("prefix groups", &f.prefix_groups)?,
        prefix_len: whole("prefix length", &f.prefix_len)?,
    };
    let (ttft, tpot, e2e) = (
        number("SLO TTFT", &f.slo_ttft)?,
        number("SLO TPOT", &f.slo_tpot)?,
        number("SLO E2E", &f.slo_e2e)?,
    );
    let req = BenchRequest {
        slo: (ttft.is_some() || tpot.is_some() || e2e.is_some()).then_some(Slo {
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: e2e,
            attainment_pct: 90.0,
        }),
        ..req
    };
    if req.max_concurrency.is_some() && req.request_rate.is_none() {
        return Err("max in flight: give request rates too (it caps the open loop)".to_owned());
    }
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
        request_rate: req.request_rate.clone().unwrap_or(d.request_rate),
        max_concurrency: req.max_concurrency.or(d.max_concurrency),
        slo: req.slo.or(d.slo),
        dataset: req.dataset.clone(),
        prefix_groups: req.prefix_groups,
        prefix_len: req.prefix_len.unwrap_or(d.prefix_len),
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

    #[test]
    fn open_loop_and_slos_from_the_form() {
        let f = BenchForm {
            rates: "2, 4.5 8".to_owned(),
            max_in_flight: "64".to_owned(),
            slo_tpot: "40".to_owned(),
            ..BenchForm::default()
        };
        let r = bench_request(&f).expect("valid");
        assert_eq!(
            serde_json::to_string(&r).expect("json"),
            r#"{"request_rate":[2.0,4.5,8.0],"max_concurrency":64,"slo":{"ttft_ms":null,"tpot_ms":40.0,"e2e_ms":null,"attainment_pct":90.0}}"#
        );
        let bad = |f: BenchForm| bench_request(&f).expect_err("invalid");
        let e = bad(BenchForm {
            rates: "2,fast".to_owned(),
            ..BenchForm::default()
        });
        assert_eq!(e, "request rate: `fast` is not a number");
        let e = bad(BenchForm {
            rates: "0".to_owned(),
            ..BenchForm::default()
        });
        assert!(e.contains("request_rate 0 is out of range"), "{e}");
        let e = bad(BenchForm {
            max_in_flight: "8".to_owned(),
            ..BenchForm::default()
        });
        assert!(e.contains("give request rates too"), "{e}");
        let e = bad(BenchForm {
            slo_ttft: "-5".to_owned(),
            ..BenchForm::default()
        });
        assert!(e.contains("slo.ttft_ms"), "{e}");
        let w = bench_request(&BenchForm {
            dataset: " sharegpt-mini.json ".to_owned(),
            ..BenchForm::default()
        })
        .expect("valid");
        assert_eq!(w.dataset.as_deref(), Some("sharegpt-mini.json"));
        let e = bad(BenchForm {
            prefix_len: "100".to_owned(),
            ..BenchForm::default()
        });
        assert!(e.contains("prefix_len needs prefix_groups"), "{e}");
        let p = bench_request(&BenchForm {
            prefix_groups: "4".to_owned(),
            prefix_len: "1000".to_owned(),
            ..BenchForm::default()
        })
        .expect("valid");
        assert_eq!((p.prefix_groups, p.prefix_len), (Some(4), Some(1000)));
    }
}
