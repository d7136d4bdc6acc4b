//! One row of the dialog's flag editor: the flag's name and kind, a select
//! (enum, bool) or number field (int, float) with its range, its help, its
//! default, and whether the value as typed would be accepted.

use leptos::prelude::*;
use shared::flags::{FlagKind, FlagSpec, FlagType};

use crate::flags::{check, step};
use crate::markup::escape;

/// The select's value for "(default)": no flag value can contain a NUL.
const DEFAULT_OPTION: &str = "\u{0}default";

/// The editor row of one allowed flag.
#[component]
pub(crate) fn FlagRow(
    /// The flag and the values it may take.
    spec: FlagSpec,
    /// The editor's value: `None` is "(default)" (an empty number field).
    value: RwSignal<Option<String>>,
    /// The flag's value when the dialog opened, `None` when it was not set.
    current: Option<String>,
    /// What "(default)" resets it to, `None` when that unsets it.
    default: Option<String>,
) -> impl IntoView {
    let name = spec.name.clone();
    let kind = match spec.kind {
        FlagKind::Env => "env",
        FlagKind::Arg => "arg",
    };
    let changed = move || value.with(|v| *v != current);
    let problem = {
        let spec = spec.clone();
        Memo::new(move |_| {
            value.with(|v| match v.as_deref().map(str::trim) {
                Some(v) if !v.is_empty() => check(&spec, v).err(),
                _ => None,
            })
        })
    };
    // Help and default never change: one piece of text.
    let help = {
        let mut h = spec.help.as_deref().map(escape).unwrap_or_default();
        if !h.is_empty() {
            h.push_str("<br>");
        }
        match &default {
            Some(d) => h.push_str(&format!("default {}", escape(d))),
            None => h.push_str("default: not set"),
        }
        h
    };

    let control = match &spec.ty {
        FlagType::Enum { .. } | FlagType::Bool => {
            let mut options: Vec<String> = match &spec.ty {
                FlagType::Enum { values } => values.clone(),
                _ => vec!["true".to_owned(), "false".to_owned()],
            };
            // A value set outside the allow-list still shows as what it is.
            if let Some(v) = value.get_untracked().filter(|v| !options.contains(v)) {
                options.push(v);
            }
            let options = options
                .into_iter()
                .map(|o| view! { <option value=o.clone()>{o.clone()}</option> })
                .collect::<Vec<_>>();
            view! {
                <select
                    class="flag-control"
                    name=name.clone()
                    aria-label=name.clone()
                    prop:value=move || value.get().unwrap_or_else(|| DEFAULT_OPTION.to_owned())
                    on:change=move |ev| {
                        let v = event_target_value(&ev);
                        value.set(if v == DEFAULT_OPTION { None } else { Some(v) });
                    }
                >
                    <option value=DEFAULT_OPTION>"(default)"</option>
                    {options}
                </select>
            }
            .into_any()
        }
        FlagType::Int { min, max } => {
            number_input(&name, value, min.to_string(), max.to_string(), step(&spec)).into_any()
        }
        FlagType::Float { min, max } => {
            number_input(&name, value, min.to_string(), max.to_string(), step(&spec)).into_any()
        }
    };
    let range = spec.range_text().unwrap_or_default();

    view! {
        <div
            class="flag-row"
            class:flag-changed=changed
            class:flag-bad=move || problem.with(Option::is_some)
            data-testid="flag-input"
            data-flag=name.clone()
        >
            <span class="flag-name" data-kind=kind title=format!("{name} ({kind} flag)")>
                {name.clone()}
            </span>
            {control}
            <span class="flag-range" data-testid="flag-range">{range}</span>
            <span class="flag-help" inner_html=help></span>
            <span class="flag-problem">{move || problem.get()}</span>
        </div>
    }
}

/// A number field; empty means "(default)".
fn number_input(
    name: &str,
    value: RwSignal<Option<String>>,
    min: String,
    max: String,
    step: &'static str,
) -> impl IntoView {
    view! {
        <input
            class="flag-control"
            type="number"
            name=name.to_owned()
            aria-label=name.to_owned()
            min=min
            max=max
            step=step
            placeholder="(default)"
            prop:value=move || value.get().unwrap_or_default()
            on:input=move |ev| {
                let v = event_target_value(&ev);
                value.set(if v.trim().is_empty() { None } else { Some(v) });
            }
        />
    }
}
