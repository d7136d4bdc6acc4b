//! The flags a restart may change: the allow-list's entries ([`FlagSpec`]), the
//! one rule that checks a value against its entry ([`check`]), how a set of
//! changes applies to the current flags ([`apply`]), and how two flag sets differ
//! ([`diff`]). The backend answers with these rules and the UI predicts with the
//! same ones, so a value the dialog accepts is a value the API accepts.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::flat::{BadField, need};

/// Flag name → value. Environment flags keep their variable name; arguments their
/// `--` spelling. Booleans are `"true"`/`"false"`.
pub type Flags = BTreeMap<String, String>;

/// Whether a flag is passed in the environment or on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagKind {
    Env,
    Arg,
}

/// The values a flag may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FlagType {
    /// `"true"` / `"false"`; for an argument, present or absent.
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    Float {
        min: f64,
        max: f64,
    },
    Enum {
        values: Vec<String>,
    },
}

/// One entry of the allow-list: a restart may change this flag, within these values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SpecFields")]
pub struct FlagSpec {
    pub name: String,
    pub kind: FlagKind,
    #[serde(flatten)]
    pub ty: FlagType,
    /// What it does, for the restart dialog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

impl FlagSpec {
    /// "1–8" for a number flag, `None` for the others.
    pub fn range_text(&self) -> Option<String> {
        match &self.ty {
            FlagType::Int { min, max } => Some(format!("{min}–{max}")),
            FlagType::Float { min, max } => Some(format!("{min}–{max}")),
            FlagType::Bool | FlagType::Enum { .. } => None,
        }
    }
}

/// Why a value does not fit its flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagRefusal {
    ControlCharacter,
    NotBool,
    NotInteger,
    NotNumber,
    OutOfRange,
    NotOneOf,
}

impl FlagRefusal {
    /// The refusal in a few words, beside the field that holds `spec`'s value:
    /// "out of range 1–8", "one of a, b".
    pub fn hint(self, spec: &FlagSpec) -> String {
        match (self, &spec.ty) {
            (Self::ControlCharacter, _) => "no control characters".to_owned(),
            (Self::NotBool, _) => "true or false".to_owned(),
            (Self::NotInteger, _) => "not an integer".to_owned(),
            (Self::NotNumber, _) => "not a number".to_owned(),
            (Self::OutOfRange, _) => {
                format!("out of range {}", spec.range_text().unwrap_or_default())
            }
            (Self::NotOneOf, FlagType::Enum { values }) => format!("one of {}", values.join(", ")),
            (Self::NotOneOf, _) => "not allowed".to_owned(),
        }
    }

    /// The refusal as a whole sentence naming the flag and what was sent:
    /// "`--tp` must be an integer from 1 to 8, got `9`".
    pub fn message(self, spec: &FlagSpec, raw: &str) -> String {
        let name = &spec.name;
        match (self, &spec.ty) {
            (Self::ControlCharacter, _) => {
                format!("`{name}`: values cannot contain control characters")
            }
            (_, FlagType::Bool) => format!("`{name}` must be true or false, got `{raw}`"),
            (_, FlagType::Int { min, max }) => {
                format!("`{name}` must be an integer from {min} to {max}, got `{raw}`")
            }
            (_, FlagType::Float { min, max }) => {
                format!("`{name}` must be a number from {min} to {max}, got `{raw}`")
            }
            (_, FlagType::Enum { values }) => {
                format!("`{name}` must be one of {}, got `{raw}`", values.join(", "))
            }
        }
    }
}

/// `raw` in the canonical form the flag is stored and run with (trimmed; numbers
/// re-printed, so "04" is "4" and "0.90" is "0.9"), or why it does not fit.
pub fn check(spec: &FlagSpec, raw: &str) -> Result<String, FlagRefusal> {
    let v = raw.trim();
    if v.chars().any(char::is_control) {
        return Err(FlagRefusal::ControlCharacter);
    }
    match &spec.ty {
        FlagType::Bool => match v {
            "true" | "false" => Ok(v.to_owned()),
            _ => Err(FlagRefusal::NotBool),
        },
        FlagType::Int { min, max } => match v.parse::<i64>() {
            Ok(n) if (*min..=*max).contains(&n) => Ok(n.to_string()),
            Ok(_) => Err(FlagRefusal::OutOfRange),
            Err(_) => Err(FlagRefusal::NotInteger),
        },
        FlagType::Float { min, max } => match crate::decimal::parse_f64(v).ok_or(()) {
            Ok(x) if x.is_finite() && *min <= x && x <= *max => Ok(x.to_string()),
            Ok(_) => Err(FlagRefusal::OutOfRange),
            Err(_) => Err(FlagRefusal::NotNumber),
        },
        FlagType::Enum { values } => match values.iter().any(|a| a == v) {
            true => Ok(v.to_owned()),
            false => Err(FlagRefusal::NotOneOf),
        },
    }
}

/// A set of flag changes: name → the value to set, or `None` for the default.
pub type Changes = BTreeMap<String, Option<String>>;

/// Why a set of flag changes is refused: its first wrong entry. One wording for
/// the config, the API, the CLI, campaign plans and the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeError {
    /// The same flag twice in one set.
    Twice { name: String },
    /// A flag the allow-list does not have; `allowed` is what it has.
    Unknown { name: String, allowed: Vec<String> },
    /// A value its flag refuses, as the value check words it.
    Value(String),
}

impl fmt::Display for ChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Twice { name } => write!(f, "`{name}` is given twice"),
            Self::Unknown { name, allowed } if allowed.is_empty() => {
                write!(
                    f,
                    "unknown flag `{name}`: this server allows no flag changes"
                )
            }
            Self::Unknown { name, allowed } => write!(
                f,
                "unknown flag `{name}`: not in the allow-list (allowed: {})",
                allowed.join(", ")
            ),
            Self::Value(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ChangeError {}

/// `items` as one set of changes; a name given twice is refused.
pub fn gather(
    items: impl IntoIterator<Item = (String, Option<String>)>,
) -> Result<Changes, ChangeError> {
    let mut out = Changes::new();
    for (name, value) in items {
        if out.contains_key(&name) {
            return Err(ChangeError::Twice { name });
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// `name`'s entry in `specs`, or why it is unknown.
pub fn spec_of<'a>(specs: &'a [FlagSpec], name: &str) -> Result<&'a FlagSpec, ChangeError> {
    specs
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| ChangeError::Unknown {
            name: name.to_owned(),
            allowed: specs.iter().map(|s| s.name.clone()).collect(),
        })
}

/// The one check of a whole set of changes against an allow-list: no name twice,
/// none off the list, every value one its flag takes. `value` checks one value
/// (a secret flag's check does not quote it back) and returns it canonical;
/// [`plain_value`] is the check for flags that are not secret. A reset (`None`)
/// is always allowed. Returns the set with canonical values.
pub fn check_changes<E: std::fmt::Display>(
    specs: &[FlagSpec],
    items: impl IntoIterator<Item = (String, Option<String>)>,
    mut value: impl FnMut(&FlagSpec, &str) -> Result<String, E>,
) -> Result<Changes, ChangeError> {
    let mut out = gather(items)?;
    for (name, change) in &mut out {
        let spec = spec_of(specs, name)?;
        if let Some(v) = change {
            *v = value(spec, v).map_err(|e| ChangeError::Value(e.to_string()))?;
        }
    }
    Ok(out)
}

/// [`check`] with its refusal as a whole sentence that quotes the value.
pub fn plain_value(spec: &FlagSpec, raw: &str) -> Result<String, String> {
    check(spec, raw).map_err(|r| r.message(spec, raw))
}

/// `current` after `changes`. Each change goes through `value(name, value)`
/// first, which refuses it or says what the flag becomes: `Some` sets it, `None`
/// resets it to its default (which removes it when it has none). A change of
/// `None` asks for the default. All or nothing: the first refusal is the answer.
pub fn apply<E>(
    current: &Flags,
    defaults: &Flags,
    changes: &BTreeMap<String, Option<String>>,
    mut value: impl FnMut(&str, Option<&str>) -> Result<Option<String>, E>,
) -> Result<Flags, E> {
    let mut next = current.clone();
    for (name, change) in changes {
        match (value(name, change.as_deref())?, defaults.get(name)) {
            (Some(v), _) => {
                next.insert(name.clone(), v);
            }
            (None, Some(d)) => {
                next.insert(name.clone(), d.clone());
            }
            (None, None) => {
                next.remove(name);
            }
        }
    }
    Ok(next)
}

/// One flag's change between two sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case", try_from = "ChangeFields")]
pub enum FlagChange {
    Added {
        name: String,
        value: String,
    },
    Removed {
        name: String,
        value: String,
    },
    Changed {
        name: String,
        from: String,
        to: String,
    },
}

impl FlagChange {
    /// `changed`, `added` or `removed`, for styling.
    pub fn class(&self) -> &'static str {
        match self {
            Self::Changed { .. } => "changed",
            Self::Added { .. } => "added",
            Self::Removed { .. } => "removed",
        }
    }

    /// The flag's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Changed { name, .. } | Self::Added { name, .. } | Self::Removed { name, .. } => {
                name
            }
        }
    }
}

/// "--tp: 8 → 4", "+ SGLANG_X=1", "− --enable-torch-compile".
impl fmt::Display for FlagChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Changed { name, from, to } => write!(f, "{name}: {from} → {to}"),
            Self::Added { name, value } => write!(f, "+ {name}={value}"),
            Self::Removed { name, .. } => write!(f, "− {name}"),
        }
    }
}

/// The flags of `b` compared with `a`: removed and changed flags in name order,
/// then added ones in name order.
pub fn diff(a: &Flags, b: &Flags) -> Vec<FlagChange> {
    let mut out = Vec::new();
    for (name, va) in a {
        match b.get(name) {
            None => out.push(FlagChange::Removed {
                name: name.clone(),
                value: va.clone(),
            }),
            Some(vb) if vb != va => out.push(FlagChange::Changed {
                name: name.clone(),
                from: va.clone(),
                to: vb.clone(),
            }),
            Some(_) => {}
        }
    }
    for (name, vb) in b {
        if !a.contains_key(name) {
            out.push(FlagChange::Added {
                name: name.clone(),
                value: vb.clone(),
            });
        }
    }
    out
}

/// [`diff`] in name order, as the views show a change. (The browser's page
/// orders it with its own one sort, `frontend::sort`, which keeps another
/// copy of the standard sort out of its bundle.)
pub fn diff_by_name(a: &Flags, b: &Flags) -> Vec<FlagChange> {
    let mut out = diff(a, b);
    out.sort_by(|x, y| x.name().cmp(y.name()));
    out
}

// Reading a `FlagChange` and a `FlagSpec`: one flat struct each, checked
// against the tag (see [`crate::flat`]).

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// Every field of every [`FlagChange`].
#[derive(Debug, Deserialize)]
struct ChangeFields {
    change: ChangeKind,
    name: String,
    value: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

impl TryFrom<ChangeFields> for FlagChange {
    type Error = BadField;

    fn try_from(f: ChangeFields) -> Result<Self, BadField> {
        let name = f.name;
        Ok(match f.change {
            ChangeKind::Added => Self::Added {
                name,
                value: need(f.value, "value")?,
            },
            ChangeKind::Removed => Self::Removed {
                name,
                value: need(f.value, "value")?,
            },
            ChangeKind::Changed => Self::Changed {
                name,
                from: need(f.from, "from")?,
                to: need(f.to, "to")?,
            },
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TypeKind {
    Bool,
    Int,
    Float,
    Enum,
}

/// A bound as JSON wrote it: an integer stays exact, as `i64` reads it.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NumVisitor;
        impl Visitor<'_> for NumVisitor {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(i64::try_from(v).map_or(Num::Float(v as f64), Num::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num::Float(v))
            }
        }
        d.deserialize_any(NumVisitor)
    }
}

/// An integer flag's bound: a fraction or an integer past `i64` is refused.
fn int(bound: Option<Num>, field: &'static str) -> Result<i64, BadField> {
    match need(bound, field)? {
        Num::Int(v) => Ok(v),
        Num::Float(_) => Err(BadField::NotInteger(field)),
    }
}

fn float(bound: Option<Num>, field: &'static str) -> Result<f64, BadField> {
    Ok(match need(bound, field)? {
        Num::Int(v) => v as f64,
        Num::Float(v) => v,
    })
}

/// Every field of a [`FlagSpec`] with any [`FlagType`].
#[derive(Debug, Deserialize)]
struct SpecFields {
    name: String,
    kind: FlagKind,
    #[serde(rename = "type")]
    ty: TypeKind,
    min: Option<Num>,
    max: Option<Num>,
    values: Option<Vec<String>>,
    help: Option<String>,
}

impl TryFrom<SpecFields> for FlagSpec {
    type Error = BadField;

    fn try_from(f: SpecFields) -> Result<Self, BadField> {
        let ty = match f.ty {
            TypeKind::Bool => FlagType::Bool,
            TypeKind::Int => FlagType::Int {
                min: int(f.min, "min")?,
                max: int(f.max, "max")?,
            },
            TypeKind::Float => FlagType::Float {
                min: float(f.min, "min")?,
                max: float(f.max, "max")?,
            },
            TypeKind::Enum => FlagType::Enum {
                values: need(f.values, "values")?,
            },
        };
        Ok(Self {
            name: f.name,
            kind: f.kind,
            ty,
            help: f.help,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, ty: FlagType) -> FlagSpec {
        FlagSpec {
            name: name.to_owned(),
            kind: FlagKind::Arg,
            ty,
            help: None,
        }
    }

    fn flags(pairs: &[(&str, &str)]) -> Flags {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// One check for a whole set: a name twice, a name off the list (worded by
    /// whether the list is empty), a refused value, and canonical values back.
    #[test]
    fn a_set_of_changes_is_checked_as_one() {
        let specs = [
            spec("--tp", FlagType::Int { min: 1, max: 8 }),
            spec("--ratio", FlagType::Float { min: 0.5, max: 1.0 }),
        ];
        let item = |k: &str, v: Option<&str>| (k.to_owned(), v.map(str::to_owned));
        let ok = check_changes(
            &specs,
            [item("--tp", Some("04")), item("--ratio", None)],
            plain_value,
        )
        .expect("valid");
        assert_eq!(
            ok,
            Changes::from([item("--tp", Some("4")), item("--ratio", None)])
        );

        let twice = check_changes(
            &specs,
            [item("--tp", Some("2")), item("--tp", None)],
            plain_value,
        );
        assert_eq!(
            twice.expect_err("twice").to_string(),
            "`--tp` is given twice"
        );

        let unknown = check_changes(&specs, [item("--rm-rf", Some("/"))], plain_value);
        assert_eq!(
            unknown.expect_err("unknown").to_string(),
            "unknown flag `--rm-rf`: not in the allow-list (allowed: --tp, --ratio)"
        );
        let none = check_changes(&[], [item("--tp", Some("2"))], plain_value);
        assert_eq!(
            none.expect_err("none allowed").to_string(),
            "unknown flag `--tp`: this server allows no flag changes"
        );

        let bad = check_changes(&specs, [item("--ratio", Some("2"))], plain_value);
        assert_eq!(
            bad.expect_err("out of range").to_string(),
            "`--ratio` must be a number from 0.5 to 1, got `2`"
        );
        // The caller's value check decides what a refusal says.
        let hidden = check_changes(&specs, [item("--tp", Some("x"))], |_, _| {
            Err("`--tp`: refused (not shown)".to_owned())
        });
        assert_eq!(
            hidden.expect_err("refused"),
            ChangeError::Value("`--tp`: refused (not shown)".to_owned())
        );
    }

    #[test]
    fn check_canonicalizes_and_names_each_refusal() {
        let tp = spec("--tp", FlagType::Int { min: 1, max: 8 });
        let mem = spec(
            "--mem",
            FlagType::Float {
                min: 0.5,
                max: 0.95,
            },
        );
        let mode = spec(
            "MODE",
            FlagType::Enum {
                values: vec!["a".to_owned(), "b".to_owned()],
            },
        );
        let on = spec("--compile", FlagType::Bool);
        assert_eq!(check(&tp, " 04 "), Ok("4".to_owned()));
        assert_eq!(check(&tp, "9"), Err(FlagRefusal::OutOfRange));
        assert_eq!(check(&tp, "x"), Err(FlagRefusal::NotInteger));
        assert_eq!(check(&mem, "0.90"), Ok("0.9".to_owned()));
        assert_eq!(check(&mem, "NaN"), Err(FlagRefusal::OutOfRange));
        assert_eq!(check(&mem, "x"), Err(FlagRefusal::NotNumber));
        assert_eq!(check(&on, "yes"), Err(FlagRefusal::NotBool));
        assert_eq!(check(&mode, "a\n"), Ok("a".to_owned()));
        assert_eq!(check(&mode, "a\u{7}b"), Err(FlagRefusal::ControlCharacter));
        assert_eq!(check(&mode, "c"), Err(FlagRefusal::NotOneOf));

        assert_eq!(FlagRefusal::OutOfRange.hint(&tp), "out of range 1–8");
        assert_eq!(FlagRefusal::NotOneOf.hint(&mode), "one of a, b");
        assert_eq!(
            FlagRefusal::NotInteger.message(&tp, "x"),
            "`--tp` must be an integer from 1 to 8, got `x`"
        );
        assert_eq!(
            FlagRefusal::ControlCharacter.message(&mode, "a\u{7}"),
            "`MODE`: values cannot contain control characters"
        );
    }

    #[test]
    fn apply_sets_resets_to_default_and_removes() {
        let current = flags(&[("--tp", "8"), ("--mem", "0.9")]);
        let defaults = flags(&[("--tp", "8"), ("MODE", "b")]);
        let changes = BTreeMap::from([
            ("--tp".to_owned(), Some("4".to_owned())),
            ("--mem".to_owned(), None),
            ("MODE".to_owned(), None),
        ]);
        let next = apply(&current, &defaults, &changes, |_, v| {
            Ok::<_, ()>(v.map(str::to_owned))
        });
        assert_eq!(next, Ok(flags(&[("--tp", "4"), ("MODE", "b")])));
        let refused = apply(&current, &defaults, &changes, |_, _| Err("no"));
        assert_eq!(refused, Err("no"));
    }

    #[test]
    fn diff_names_every_change() {
        let a = flags(&[("--tp", "8"), ("X", "1"), ("--old", "true")]);
        let b = flags(&[("--tp", "4"), ("X", "1"), ("Y", "2")]);
        let d = diff(&a, &b);
        assert_eq!(
            d.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["− --old", "--tp: 8 → 4", "+ Y=2"]
        );
        assert_eq!(d[0].name(), "--old");
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn diff_lists_removed_and_changed_then_added() {
        let a = flags(&[("--tp", "8"), ("--ep-size", "1"), ("X", "0")]);
        let b = flags(&[("--tp", "4"), ("X", "0"), ("Y", "1")]);
        assert_eq!(
            diff(&a, &b),
            vec![
                FlagChange::Removed {
                    name: "--ep-size".into(),
                    value: "1".into()
                },
                FlagChange::Changed {
                    name: "--tp".into(),
                    from: "8".into(),
                    to: "4".into()
                },
                FlagChange::Added {
                    name: "Y".into(),
                    value: "1".into()
                },
            ]
        );
        assert!(diff(&a, &a).is_empty());
    }
}
