//! Flag editing for the restart dialog and the history: the diff between two
//! flag sets, what a value looks like once the backend has checked it, the range
//! hint of a number flag, and which edits a request carries.
//!
//! Everything here is pure so it is pinned down by host tests; the backend's
//! `config::flags` is the authority, these only predict what it will do so the
//! dialog can show the change before it is sent.

use std::collections::BTreeMap;

use shared::flags::{self as rules, FlagSpec, FlagType, Flags};

pub(crate) use shared::flags::FlagChange;

/// What changes from `from` to `to`, in name order.
pub(crate) fn diff(from: &Flags, to: &Flags) -> Vec<FlagChange> {
    let mut out = rules::diff(from, to);
    crate::sort::sort_by(&mut out, |a, b| a.name().cmp(b.name()));
    out
}

/// The diff on one line, for the history table: "--tp: 8 → 4 · + X=1", or
/// "no change".
pub(crate) fn compact(from: &Flags, to: &Flags) -> String {
    let changes = diff(from, to);
    if changes.is_empty() {
        return "no change".to_owned();
    }
    changes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The value as the backend stores it (trimmed; numbers re-printed, so "04"
/// reads "4" and "0.90" reads "0.9"), or why it would refuse it, in a few words
/// (the backend's whole sentence is what the dialog shows after a send).
pub(crate) fn check(spec: &FlagSpec, raw: &str) -> Result<String, String> {
    rules::check(spec, raw).map_err(|r| r.hint(spec))
}

/// The `step` of a number input: 1 for integers, fine enough for the range's
/// decimals for floats.
pub(crate) fn step(spec: &FlagSpec) -> &'static str {
    match spec.ty {
        FlagType::Int { .. } => "1",
        _ => "any",
    }
}

/// The flags after `edits` (a value sets a flag, `None` resets it to its
/// default, which removes it when it has none), as the backend resolves them.
/// Values are taken as the backend would store them when they are valid.
pub(crate) fn resolve(
    specs: &[FlagSpec],
    current: &Flags,
    defaults: &Flags,
    edits: &BTreeMap<String, Option<String>>,
) -> Flags {
    let value = |name: &str, v: Option<&str>| {
        Ok::<_, std::convert::Infallible>(v.map(|v| {
            specs
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| check(s, v).ok())
                .unwrap_or_else(|| v.trim().to_owned())
        }))
    };
    match rules::apply(current, defaults, edits, value) {
        Ok(next) => next,
        Err(never) => match never {},
    }
}

/// What a request carries, from the editor's rows: `rows` maps each allowed
/// flag to the editor's value (`None`: "(default)" or an empty number field).
/// A row whose outcome equals the current value is left out, so unchanged flags
/// are never sent; an invalid value is sent as typed, for the backend to refuse.
pub(crate) fn request_flags(
    specs: &[FlagSpec],
    current: &Flags,
    defaults: &Flags,
    rows: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for (name, value) in rows {
        let value = value
            .as_ref()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        let one = crate::sort::map_of([(name.clone(), value.clone())]);
        let after = resolve(specs, current, defaults, &one);
        if after.get(name) != current.get(name) {
            out.insert(name.clone(), value);
        }
    }
    out
}

/// The editor's starting value for a flag: its current value, or `None`
/// ("(default)") when it is not set.
pub(crate) fn initial(current: &Flags, name: &str) -> Option<String> {
    current.get(name).cloned()
}

/// Flags from `(name, value)` pairs, for tests.
/// The restart dialog's starting values for a flag set: each allowed flag at
/// the set's value, or at "(default)" when the set does not name it, so the
/// launch reproduces the set rather than keeping today's extras.
pub(crate) fn prefill(specs: &[FlagSpec], set: &Flags) -> BTreeMap<String, Option<String>> {
    crate::sort::map_of(
        specs
            .iter()
            .map(|s| (s.name.clone(), set.get(&s.name).cloned())),
    )
}

#[cfg(test)]
pub(crate) fn of_pairs(pairs: &[(&str, &str)]) -> Flags {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::flags::FlagKind;

    use super::of_pairs as flags;

    fn spec(name: &str, ty: FlagType) -> FlagSpec {
        FlagSpec {
            name: name.to_owned(),
            kind: FlagKind::Arg,
            ty,
            help: None,
        }
    }

    fn specs() -> Vec<FlagSpec> {
        vec![
            spec("--tp", FlagType::Int { min: 1, max: 8 }),
            spec(
                "--mem",
                FlagType::Float {
                    min: 0.5,
                    max: 0.95,
                },
            ),
            spec("--compile", FlagType::Bool),
            spec(
                "MODE",
                FlagType::Enum {
                    values: vec!["a".to_owned(), "b".to_owned()],
                },
            ),
        ]
    }

    #[test]
    fn diff_lists_changed_added_and_removed_in_name_order() {
        let from = flags(&[
            ("--tp", "8"),
            ("--enable-torch-compile", "true"),
            ("A", "1"),
        ]);
        let to = flags(&[("--tp", "4"), ("SGLANG_X", "1"), ("A", "1")]);
        let d: Vec<String> = diff(&from, &to).iter().map(ToString::to_string).collect();
        assert_eq!(
            d,
            ["− --enable-torch-compile", "--tp: 8 → 4", "+ SGLANG_X=1"]
        );
        assert!(diff(&from, &from).is_empty());
        assert_eq!(compact(&from, &from), "no change");
        assert_eq!(
            compact(
                &flags(&[("--tp", "8")]),
                &flags(&[("--tp", "4"), ("X", "1")])
            ),
            "--tp: 8 → 4 · + X=1"
        );
    }

    #[test]
    fn check_canonicalizes_like_the_backend() {
        let s = specs();
        assert_eq!(check(&s[0], " 04 "), Ok("4".to_owned()));
        assert!(matches!(check(&s[0], "9"), Err(e) if e.contains("1–8")));
        assert!(check(&s[0], "x").is_err());
        assert_eq!(check(&s[1], "0.90"), Ok("0.9".to_owned()));
        assert!(check(&s[1], "NaN").is_err());
        assert!(check(&s[1], "0.96").is_err());
        assert_eq!(check(&s[2], "true"), Ok("true".to_owned()));
        assert!(check(&s[2], "yes").is_err());
        assert_eq!(check(&s[3], "b"), Ok("b".to_owned()));
        assert!(check(&s[3], "c").is_err());
        assert!(check(&s[3], "a\n").is_ok()); // trimmed first, as the backend does
        assert!(check(&s[3], "a\u{7}b").is_err());
    }

    #[test]
    fn range_hints() {
        let s = specs();
        assert_eq!(s[0].range_text().as_deref(), Some("1–8"));
        assert_eq!(s[1].range_text().as_deref(), Some("0.5–0.95"));
        assert_eq!(s[2].range_text(), None);
        assert_eq!(step(&s[0]), "1");
        assert_eq!(step(&s[1]), "any");
    }

    #[test]
    fn unchanged_rows_are_not_sent_and_default_is_null() {
        let s = specs();
        let current = flags(&[("--tp", "8"), ("--mem", "0.9"), ("MODE", "a")]);
        let defaults = flags(&[("--tp", "8"), ("MODE", "b")]);
        let rows: BTreeMap<String, Option<String>> = BTreeMap::from([
            // Unchanged, also when written differently.
            ("--tp".to_owned(), Some("08".to_owned())),
            // Cleared: reset to its default, which it has none of: removed.
            ("--mem".to_owned(), Some(String::new())),
            // Not set and left at "(default)".
            ("--compile".to_owned(), None),
            // "(default)" where the default differs.
            ("MODE".to_owned(), None),
        ]);
        let req = request_flags(&s, &current, &defaults, &rows);
        assert_eq!(
            req,
            BTreeMap::from([("--mem".to_owned(), None), ("MODE".to_owned(), None)])
        );
        let after = resolve(&s, &current, &defaults, &req);
        assert_eq!(after, flags(&[("--tp", "8"), ("MODE", "b")]));
        let d: Vec<String> = diff(&current, &after)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(d, ["− --mem", "MODE: a → b"]);
    }

    #[test]
    fn default_equal_to_current_is_no_change_and_invalid_is_sent_as_typed() {
        let s = specs();
        let current = flags(&[("--tp", "8")]);
        let defaults = flags(&[("--tp", "8")]);
        let none = BTreeMap::from([("--tp".to_owned(), None)]);
        assert!(request_flags(&s, &current, &defaults, &none).is_empty());
        let bad = BTreeMap::from([("--tp".to_owned(), Some(" 99 ".to_owned()))]);
        assert_eq!(
            request_flags(&s, &current, &defaults, &bad),
            BTreeMap::from([("--tp".to_owned(), Some("99".to_owned()))])
        );
        let set = BTreeMap::from([("--tp".to_owned(), Some("4".to_owned()))]);
        assert_eq!(
            resolve(&s, &current, &defaults, &set),
            flags(&[("--tp", "4")])
        );
        assert_eq!(initial(&current, "--tp").as_deref(), Some("8"));
        assert_eq!(initial(&current, "MODE"), None);
    }

    #[test]
    fn prefill_takes_the_sets_values_for_allowed_flags_only() {
        use shared::flags::{FlagKind, FlagType};
        let spec = |n: &str| FlagSpec {
            name: n.to_owned(),
            kind: FlagKind::Arg,
            ty: FlagType::Bool,
            help: None,
        };
        let specs = [spec("--tp"), spec("X"), spec("Y")];
        let current = flags(&[("--tp", "6"), ("X", "0"), ("Y", "a"), ("--other", "1")]);
        let target = flags(&[("--tp", "4"), ("X", "0"), ("--other", "2")]);
        let p = prefill(&specs, &target);
        assert_eq!(p.len(), 3);
        assert_eq!(p["--tp"].as_deref(), Some("4"));
        assert_eq!(p["X"].as_deref(), Some("0"));
        assert_eq!(p["Y"], None);
        // Only the changes are sent: the new --tp, and Y back to its default.
        let req = request_flags(&specs, &current, &Flags::new(), &p);
        assert_eq!(req.len(), 2);
        assert_eq!(req["--tp"].as_deref(), Some("4"));
        assert_eq!(req["Y"], None);
    }
}
