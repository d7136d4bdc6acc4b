//! The plan builder's model: which allow-listed flags vary and over which
//! values, the benchmark every step runs, what a failure leads to; the number
//! of combinations; and the JSON plan `POST /api/campaigns` takes. The backend
//! checks the plan whole; the builder shows its answer.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use shared::campaign::{FailurePolicy, PlanOrder};
use shared::flags::{FlagSpec, FlagType, Flags};

/// One varied flag and its values ("" is the config's own value).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    pub(crate) name: String,
    pub(crate) values: Vec<String>,
}

/// Everything the builder's form holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Builder {
    pub(crate) name: String,
    /// Flags in the allow-list's order; an axis with no values is not varied.
    pub(crate) axes: Vec<Axis>,
    /// "16" or "1, 4, 16".
    pub(crate) concurrency: String,
    pub(crate) repeats: String,
    pub(crate) num_prompts: String,
    pub(crate) on_failure: FailurePolicy,
    pub(crate) order: PlanOrder,
    pub(crate) reuse: bool,
    /// The goal in tok/s ("" for none).
    pub(crate) target: String,
}

impl Builder {
    /// An empty plan over `specs` (nothing varied yet).
    pub(crate) fn new(specs: &[FlagSpec]) -> Self {
        Self {
            name: String::new(),
            axes: specs
                .iter()
                .map(|s| Axis {
                    name: s.name.clone(),
                    values: Vec::new(),
                })
                .collect(),
            concurrency: "16".to_owned(),
            repeats: "3".to_owned(),
            num_prompts: String::new(),
            on_failure: FailurePolicy::Continue,
            order: PlanOrder::Given,
            reuse: true,
            target: String::new(),
        }
    }

    /// Adds `value` to flag `name`'s values (`on`), or takes it out.
    pub(crate) fn set(&mut self, name: &str, value: &str, on: bool) {
        if let Some(a) = self.axes.iter_mut().find(|a| a.name == name) {
            let at = a.values.iter().position(|v| v == value);
            match (at, on) {
                (Some(i), false) => {
                    a.values.remove(i);
                }
                (None, true) => a.values.push(value.to_owned()),
                _ => {}
            }
        }
    }

    /// A field of the form (`data-field`) as edited: its text, or for a box,
    /// whether it is ticked.
    pub(crate) fn edit(&mut self, field: &str, text: &str, ticked: bool) {
        let text = text.to_owned();
        match field {
            "name" => self.name = text,
            "concurrency" => self.concurrency = text,
            "repeats" => self.repeats = text,
            "prompts" => self.num_prompts = text,
            "target" => self.target = text,
            "on_failure" => {
                self.on_failure = match text.as_str() {
                    "retry" => FailurePolicy::Retry,
                    "stop" => FailurePolicy::Stop,
                    _ => FailurePolicy::Continue,
                }
            }
            "order" => {
                self.order = match text.as_str() {
                    "env_first" => PlanOrder::EnvFirst,
                    _ => PlanOrder::Given,
                }
            }
            "reuse" => self.reuse = ticked,
            _ => {}
        }
    }

    /// Sets a number flag's values from "1, 4, 8".
    pub(crate) fn set_list(&mut self, name: &str, text: &str) {
        if let Some(a) = self.axes.iter_mut().find(|a| a.name == name) {
            a.values = text
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }

    /// Flag sets the grid makes: the product of the varied flags' counts
    /// (one, the config's own flags, when none varies).
    pub(crate) fn combinations(&self) -> u64 {
        self.axes
            .iter()
            .filter(|a| !a.values.is_empty())
            .map(|a| a.values.len() as u64)
            .product()
    }

    /// The plan as JSON, or what is missing.
    pub(crate) fn to_json(&self) -> Result<String, String> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err("give the campaign a name".to_owned());
        }
        let list = |text: &str, what: &str| -> Result<Vec<u32>, String> {
            text.split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse()
                        .map_err(|_| format!("{what}: `{v}` is not a whole number"))
                })
                .collect()
        };
        let concurrency = list(&self.concurrency, "concurrency")?;
        if concurrency.is_empty() {
            return Err("give at least one concurrency".to_owned());
        }
        let repeats = list(&self.repeats, "repeats")?;
        let prompts = list(&self.num_prompts, "prompts")?;
        let target = match self.target.trim() {
            "" => None,
            t => Some(
                shared::decimal::parse_f64(t)
                    .ok_or_else(|| format!("target: `{t}` is not a number"))?,
            ),
        };
        let plan = PlanJson {
            name,
            order: self.order,
            on_failure: self.on_failure,
            reuse: self.reuse,
            target,
            bench: BenchJson {
                concurrency,
                repeats: repeats.first().copied(),
                num_prompts: prompts.first().copied(),
            },
            grid: Grid(&self.axes),
        };
        serde_json::to_string(&plan).map_err(|e| e.to_string())
    }
}

/// The builder's form as HTML, at [`Builder::new`]'s values: the name, the
/// flags ([`flag_rows`]), every step's benchmark, the failure policy, the
/// order, reuse. Every field names itself (`data-field`, or `data-flag` for
/// a flag's values); the page reads the edits from the events.
pub(crate) fn form(specs: &[FlagSpec], defaults: &Flags) -> String {
    let b = Builder::new(specs);
    let field = |label: &str, key: &str, testid: &str, value: &str| {
        format!(
            r#"<label class="plan-field"><span class="dlg-label">{label}</span><input type="text" data-field="{key}" data-testid="{testid}" value="{value}"/></label>"#
        )
    };
    format!(
        r#"{}<section class="dlg-section"><h3 class="dlg-h">flags to vary</h3><div class="plan-flags">{}</div></section><section class="dlg-section plan-bench"><h3 class="dlg-h">every step's benchmark</h3>{}{}{}{}</section><section class="dlg-section plan-policy"><label class="plan-field"><span class="dlg-label">when a step fails</span><select data-field="on_failure" data-testid="plan-on-failure"><option value="continue">record it and go on</option><option value="retry">retry once</option><option value="stop">stop the campaign</option></select></label><label class="plan-field"><span class="dlg-label">order</span><select data-field="order" data-testid="plan-order"><option value="given">as written</option><option value="env_first">group by arguments (environment changes first)</option></select></label><label class="plan-check-box"><input type="checkbox" data-field="reuse"{}/> reuse a set already measured with these settings on this server version</label></section>"#,
        field("name", "name", "plan-name", &b.name),
        flag_rows(specs, defaults),
        field(
            "concurrency",
            "concurrency",
            "plan-concurrency",
            &b.concurrency
        ),
        field("repeats", "repeats", "plan-repeats", &b.repeats),
        field(
            "prompts per repeat",
            "prompts",
            "plan-prompts",
            &b.num_prompts
        ),
        field("target tok/s", "target", "plan-target", &b.target),
        if b.reuse { " checked" } else { "" }
    )
}

/// A plan as drainwatch's dry run laid it out (`POST /api/campaigns?dry_run=true`
/// answers with the whole campaign), read as far as the builder tells of it:
/// the steps' order and the time a step is expected to take.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize)]
pub(crate) struct Laid {
    info: LaidInfo,
    steps: Vec<LaidStep>,
}

/// A laid-out campaign's `info`, read for the time a step is expected to take.
#[derive(Debug, Clone, PartialEq, Default, serde::Deserialize)]
struct LaidInfo {
    #[serde(default)]
    step_estimate_ms: Option<u64>,
}

/// One step of a [`Laid`] plan: where it is in the plan.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct LaidStep {
    plan_index: u32,
}

/// What the builder says of the plan as it stands: `n` combinations, and
/// drainwatch's check of it — the steps laid out (how many, the time they
/// would take, the order), or why it is refused.
pub(crate) fn check_markup(n: u64, laid: Option<&Laid>, refused: Option<&str>) -> String {
    use crate::markup::escape;
    match (laid, refused) {
        (_, Some(why)) => format!(
            r#"<div class="plan-bad" data-testid="plan-check" data-steps="0">{n} combinations · {}</div>"#,
            escape(why)
        ),
        (Some(c), None) => {
            let steps = c.steps.len() as u64;
            let time = c
                .info
                .step_estimate_ms
                .map(|ms| {
                    format!(
                        " · ≈ {} at past phase and benchmark times",
                        shared::html::duration(ms * steps)
                    )
                })
                .unwrap_or_else(|| " · time: after the first step".to_owned());
            let order: Vec<String> = c
                .steps
                .iter()
                .take(12)
                .map(|s| (s.plan_index + 1).to_string())
                .collect();
            format!(
                r#"<div class="plan-ok" data-testid="plan-check" data-steps="{steps}">{steps} steps{time}<span class="cpg-muted"> · runs sets {}{}</span></div>"#,
                order.join(", "),
                if c.steps.len() > 12 { " …" } else { "" }
            )
        }
        (None, None) => {
            format!(r#"<div class="plan-ok" data-testid="plan-check">{n} combinations</div>"#)
        }
    }
}

/// The flags as the builder lists them, as HTML: for each, its name (its
/// help on hover) and its values — a box to tick per value of an enum or a
/// boolean (`data-flag`, `data-value`), a text field for a list of numbers
/// (`data-flag`). The page reads what is ticked or typed from the events.
pub(crate) fn flag_rows(specs: &[FlagSpec], defaults: &Flags) -> String {
    use std::fmt::Write as _;

    use crate::markup::escape;
    let mut out = String::new();
    for spec in specs {
        let name = escape(&spec.name);
        let _ = write!(
            out,
            r#"<div class="plan-flag" data-testid="plan-flag"><code class="plan-flag-name" title="{}">{name}</code><div class="plan-values">"#,
            escape(spec.help.as_deref().unwrap_or(""))
        );
        match choices(spec, defaults) {
            Some(options) => {
                for (value, label) in options {
                    let _ = write!(
                        out,
                        r#"<label class="plan-choice"><input type="checkbox" data-testid="plan-value" data-flag="{name}" data-value="{}"/>{}</label>"#,
                        escape(&value),
                        escape(&label)
                    );
                }
            }
            None => {
                let hint = spec
                    .range_text()
                    .map(|r| format!("e.g. values in {r}, comma-separated"))
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    r#"<input type="text" class="plan-list" data-testid="plan-list" data-flag="{name}" placeholder="{}"/>"#,
                    escape(&hint)
                );
            }
        }
        out.push_str("</div></div>");
    }
    out
}

/// The values a flag offers as boxes to tick (enums and booleans), with the
/// config's own value first; `None` for numbers, which take a list.
pub(crate) fn choices(spec: &FlagSpec, defaults: &Flags) -> Option<Vec<(String, String)>> {
    let own = match defaults.get(&spec.name) {
        Some(v) => format!("config ({v})"),
        None => "config (unset)".to_owned(),
    };
    let mut out = vec![(String::new(), own)];
    match &spec.ty {
        FlagType::Bool => {
            for v in ["true", "false"] {
                out.push((v.to_owned(), v.to_owned()));
            }
        }
        FlagType::Enum { values } => {
            for v in values {
                out.push((v.clone(), v.clone()));
            }
        }
        FlagType::Int { .. } | FlagType::Float { .. } => return None,
    }
    Some(out)
}

#[derive(Serialize)]
struct PlanJson<'a> {
    name: &'a str,
    order: PlanOrder,
    on_failure: FailurePolicy,
    reuse: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<f64>,
    bench: BenchJson,
    grid: Grid<'a>,
}

#[derive(Serialize)]
struct BenchJson {
    concurrency: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeats: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_prompts: Option<u32>,
}

/// The varied flags as a JSON object in the builder's order (the first
/// varies slowest); "" is written as `null`, the config's own value.
struct Grid<'a>(&'a [Axis]);

impl Serialize for Grid<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let varied: Vec<&Axis> = self.0.iter().filter(|a| !a.values.is_empty()).collect();
        let mut m = s.serialize_map(Some(varied.len()))?;
        for a in varied {
            let values: Vec<Option<&str>> = a
                .values
                .iter()
                .map(|v| (!v.is_empty()).then_some(v.as_str()))
                .collect();
            m.serialize_entry(&a.name, &values)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::flags::FlagKind;

    fn specs() -> Vec<FlagSpec> {
        vec![
            FlagSpec {
                name: "SGLANG_OPT_USE_TILELANG_INDEXER".into(),
                kind: FlagKind::Env,
                ty: FlagType::Enum {
                    values: vec!["0".into(), "1".into()],
                },
                help: None,
            },
            FlagSpec {
                name: "--ep-size".into(),
                kind: FlagKind::Arg,
                ty: FlagType::Int { min: 1, max: 8 },
                help: None,
            },
        ]
    }

    #[test]
    fn the_builder_counts_combinations_and_writes_the_plan() {
        let mut b = Builder::new(&specs());
        assert_eq!(b.combinations(), 1);
        assert_eq!(b.to_json(), Err("give the campaign a name".to_owned()));
        b.name = " tilelang × EP ".into();
        b.set("SGLANG_OPT_USE_TILELANG_INDEXER", "", true);
        b.set("SGLANG_OPT_USE_TILELANG_INDEXER", "1", true);
        b.set("SGLANG_OPT_USE_TILELANG_INDEXER", "1", true);
        b.set_list("--ep-size", "1, 4,8,");
        assert_eq!(b.combinations(), 6);
        b.target = "1000".into();
        b.concurrency = "16".into();
        assert_eq!(
            b.to_json().expect("a plan"),
            r#"{"name":"tilelang × EP","order":"given","on_failure":"continue","reuse":true,"target":1000.0,"bench":{"concurrency":[16],"repeats":3},"grid":{"SGLANG_OPT_USE_TILELANG_INDEXER":[null,"1"],"--ep-size":["1","4","8"]}}"#
        );
        b.set("SGLANG_OPT_USE_TILELANG_INDEXER", "1", false);
        assert_eq!(b.combinations(), 3);
        b.concurrency = "16, x".into();
        assert_eq!(
            b.to_json(),
            Err("concurrency: `x` is not a whole number".to_owned())
        );
    }

    #[test]
    fn enums_and_booleans_are_ticked_numbers_listed() {
        let s = specs();
        let defaults: Flags = [("SGLANG_OPT_USE_TILELANG_INDEXER".to_owned(), "0".to_owned())]
            .into_iter()
            .collect();
        let c = choices(&s[0], &defaults).expect("an enum");
        assert_eq!(c[0], (String::new(), "config (0)".to_owned()));
        assert_eq!(c.len(), 3);
        assert_eq!(choices(&s[1], &defaults), None);
        let mut b = Builder::new(&s);
        b.edit("on_failure", "stop", false);
        b.edit("reuse", "", false);
        b.edit("prompts", "32", false);
        assert_eq!(
            (b.on_failure, b.reuse, b.num_prompts.as_str()),
            (FailurePolicy::Stop, false, "32")
        );
        let whole = form(&s, &defaults);
        assert!(
            whole.contains(r#"data-field="concurrency" data-testid="plan-concurrency" value="16""#),
            "{whole}"
        );
        assert!(whole.contains(r#"data-field="reuse" checked"#), "{whole}");
        assert_eq!(
            check_markup(6, None, Some("bad <x>")),
            r#"<div class="plan-bad" data-testid="plan-check" data-steps="0">6 combinations · bad &lt;x&gt;</div>"#
        );
        let html = flag_rows(&s, &defaults);
        assert_eq!(html.matches(r#"data-testid="plan-value""#).count(), 3);
        assert!(
            html.contains(
                r#"data-flag="--ep-size" placeholder="e.g. values in 1–8, comma-separated""#
            ),
            "{html}"
        );
    }

    #[test]
    fn the_dry_run_is_read_for_its_order_and_time() {
        let laid: Laid = crate::json::from_str(
            r#"{"info":{"id":0,"name":"x","step_estimate_ms":60000,"varied":["A"]},"bench":{},"steps":[{"plan_index":2,"flags":{}},{"plan_index":0}]}"#,
        )
        .expect("a laid-out plan");
        assert_eq!(
            check_markup(2, Some(&laid), None),
            r#"<div class="plan-ok" data-testid="plan-check" data-steps="2">2 steps · ≈ 2 min 00 s at past phase and benchmark times<span class="cpg-muted"> · runs sets 3, 1</span></div>"#
        );
        let fresh: Laid =
            crate::json::from_str(r#"{"info":{},"steps":[{"plan_index":0}]}"#).expect("laid");
        assert!(check_markup(1, Some(&fresh), None).contains("time: after the first step"));
    }
}
