//! The allow-list: which flags a restart may change and to what. A request names
//! flags and values; anything off the list or of the wrong type is refused with a
//! message naming it. Accepted values become argv entries and environment
//! entries — never text for a shell — so metacharacters are inert.

use std::collections::BTreeMap;

use shared::flags::{self, FlagKind, FlagSpec, FlagType, Flags};

use super::Problem;
use crate::redact::{Redactor, SecretNames};

/// A refused flag change, worded for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FlagError(pub String);

/// The allow-listed flags and their defaults (their values in the config's base
/// command line and environment).
#[derive(Debug, Clone)]
pub struct AllowList {
    specs: Vec<FlagSpec>,
    defaults: Flags,
}

/// What to run: the argument vector, variables to set, variables to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub env_remove: Vec<String>,
}

impl AllowList {
    /// Reads each flag's default from the base argv and environment, and checks it
    /// against the flag's own type; a refused base value of a flag `secret` names
    /// is not quoted.
    pub fn new(
        specs: Vec<FlagSpec>,
        base_args: &[String],
        base_env: &BTreeMap<String, String>,
        secret: &SecretNames,
    ) -> Result<Self, Problem> {
        let mut defaults = Flags::new();
        for (i, spec) in specs.iter().enumerate() {
            if specs[..i].iter().any(|s| s.name == spec.name) {
                return Err(Problem::refused(
                    "flags",
                    format!("`{}` is listed twice", spec.name),
                ));
            }
            let found = match spec.kind {
                FlagKind::Env => base_env.get(&spec.name).cloned(),
                FlagKind::Arg => arg_value(base_args, spec),
            };
            if let Some(v) = found {
                let v = check(spec, &v, secret.is_secret(&spec.name)).map_err(|e| {
                    Problem::refused(
                        "flags",
                        format!("the base value of {e} (fix server.args/env)"),
                    )
                })?;
                defaults.insert(spec.name.clone(), v);
            }
        }
        Ok(Self { specs, defaults })
    }

    /// The raw value of `spec` whose redacted form is `shown`: one its
    /// allow-list offers, its default or its current value.
    fn unredact(
        &self,
        r: &Redactor,
        spec: &FlagSpec,
        current: &Flags,
        shown: &str,
    ) -> Option<String> {
        let offered = match &spec.ty {
            FlagType::Enum { values } => values.clone(),
            _ => Vec::new(),
        };
        offered
            .into_iter()
            .chain(self.defaults.get(&spec.name).cloned())
            .chain(current.get(&spec.name).cloned())
            .find(|raw| r.value(raw) == shown)
    }

    pub fn specs(&self) -> &[FlagSpec] {
        &self.specs
    }

    pub fn defaults(&self) -> &Flags {
        &self.defaults
    }

    /// The flags after `changes` (a value sets a flag, `None` resets it to its
    /// default) are applied to `current`. All or nothing: one bad entry refuses all.
    /// `r` says which flags are secret (their refused values are not quoted) and
    /// what a redacted value from a view stands for.
    pub fn resolve(
        &self,
        r: &Redactor,
        current: &Flags,
        changes: &BTreeMap<String, Option<String>>,
    ) -> Result<Flags, FlagError> {
        let items = changes.iter().map(|(k, v)| (k.clone(), v.clone()));
        let checked = flags::check_changes(&self.specs, items, |spec, v| {
            let secret = r.is_secret(&spec.name);
            // A secret value comes back from a view in its redacted form (the
            // dialog, a flag set): the raw value it stands for.
            let raw = match secret && crate::redact::is_redacted(v) {
                true => self
                    .unredact(r, spec, current, v)
                    .unwrap_or_else(|| v.to_owned()),
                false => v.to_owned(),
            };
            check(spec, &raw, secret)
        })
        .map_err(|e| FlagError(e.to_string()))?;
        let unchanged = |_: &str, v: Option<&str>| Ok::<_, FlagError>(v.map(str::to_owned));
        flags::apply(current, &self.defaults, &checked, unchanged)
    }

    /// The command line and environment that run the server with `flags`.
    pub fn invocation(
        &self,
        base_args: &[String],
        base_env: &BTreeMap<String, String>,
        flags: &Flags,
    ) -> Invocation {
        let mut args = base_args.to_vec();
        let mut env = base_env.clone();
        let mut env_remove = Vec::new();
        for spec in &self.specs {
            let value = flags.get(&spec.name);
            match spec.kind {
                FlagKind::Env => match value {
                    Some(v) => {
                        env.insert(spec.name.clone(), v.clone());
                    }
                    None => {
                        env.remove(&spec.name);
                        env_remove.push(spec.name.clone());
                    }
                },
                FlagKind::Arg => {
                    let entry: Vec<String> = match (value, &spec.ty) {
                        (Some(v), FlagType::Bool) if v == "true" => vec![spec.name.clone()],
                        (Some(_), FlagType::Bool) | (None, _) => Vec::new(),
                        (Some(v), _) => vec![spec.name.clone(), v.clone()],
                    };
                    args = replace_arg(&args, spec, entry);
                }
            }
        }
        Invocation {
            args,
            env,
            env_remove,
        }
    }
}

/// Validates one value against its flag's type; returns it in canonical form.
/// A refusal never quotes the values of a secret flag (`--api-key`): it is
/// answered, audited and logged.
fn check(spec: &FlagSpec, raw: &str, secret: bool) -> Result<String, FlagError> {
    flags::plain_value(spec, raw).map_err(|e| match secret {
        true => FlagError(format!(
            "`{}` must be a value its allow-list permits (not shown: a secret)",
            spec.name
        )),
        false => FlagError(e),
    })
}

/// The flag's value in an argument vector (`--x v`, `--x=v`, or a bare boolean `--x`).
fn arg_value(args: &[String], spec: &FlagSpec) -> Option<String> {
    let prefix = format!("{}=", spec.name);
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if let Some(v) = a.strip_prefix(&prefix) {
            found = Some(v.to_owned());
        } else if *a == spec.name {
            if matches!(spec.ty, FlagType::Bool) {
                found = Some("true".to_owned());
            } else if let Some(v) = args.get(i + 1) {
                found = Some(v.clone());
                i += 1;
            }
        }
        i += 1;
    }
    match (found, &spec.ty) {
        (None, FlagType::Bool) => Some("false".to_owned()),
        (f, _) => f,
    }
}

/// `args` with every occurrence of the flag removed and `entry` put where the
/// first occurrence was — or else at the end of the options: before a `--` that
/// ends them, if there is one.
fn replace_arg(args: &[String], spec: &FlagSpec, entry: Vec<String>) -> Vec<String> {
    let prefix = format!("{}=", spec.name);
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut at = None;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.starts_with(&prefix) || *a == spec.name {
            at.get_or_insert(out.len());
            if *a == spec.name && !matches!(spec.ty, FlagType::Bool) {
                i += 1; // its value
            }
        } else {
            out.push(a.clone());
        }
        i += 1;
    }
    let end_of_options = out.iter().position(|a| a == "--").unwrap_or(out.len());
    let at = at.unwrap_or(end_of_options);
    out.splice(at..at, entry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, kind: FlagKind, ty: FlagType) -> FlagSpec {
        FlagSpec {
            name: name.into(),
            kind,
            ty,
            help: None,
        }
    }

    fn list() -> (AllowList, Vec<String>, BTreeMap<String, String>) {
        let args: Vec<String> = ["-m", "sglang.launch_server", "--tp", "8", "--port", "30000"]
            .map(String::from)
            .to_vec();
        let env = BTreeMap::from([("NCCL_DEBUG".to_owned(), "WARN".to_owned())]);
        let specs = vec![
            spec("--tp", FlagKind::Arg, FlagType::Int { min: 1, max: 8 }),
            spec("--enable-torch-compile", FlagKind::Arg, FlagType::Bool),
            spec(
                "--mem-fraction-static",
                FlagKind::Arg,
                FlagType::Float {
                    min: 0.5,
                    max: 0.95,
                },
            ),
            spec(
                "SGLANG_OPT_USE_TILELANG_INDEXER",
                FlagKind::Env,
                FlagType::Enum {
                    values: vec!["0".into(), "1".into()],
                },
            ),
        ];
        (
            AllowList::new(specs, &args, &env, &SecretNames::default()).expect("valid"),
            args,
            env,
        )
    }

    /// A redactor that knows no names beyond the word rule.
    fn plain() -> Redactor {
        Redactor::ephemeral(&[]).expect("a key")
    }

    fn set(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn defaults_come_from_the_base_command() {
        let (a, _, _) = list();
        assert_eq!(a.defaults().get("--tp").map(String::as_str), Some("8"));
        assert_eq!(
            a.defaults()
                .get("--enable-torch-compile")
                .map(String::as_str),
            Some("false")
        );
        assert!(!a.defaults().contains_key("SGLANG_OPT_USE_TILELANG_INDEXER"));
    }

    #[test]
    fn changes_are_validated_and_canonical() {
        let (a, _, _) = list();
        let cur = a.defaults().clone();
        let next = a
            .resolve(
                &plain(),
                &cur,
                &set(&[
                    ("--tp", Some(" 04 ")),
                    ("SGLANG_OPT_USE_TILELANG_INDEXER", Some("1")),
                    ("--mem-fraction-static", Some("0.850")),
                ]),
            )
            .expect("valid");
        assert_eq!(next["--tp"], "4");
        assert_eq!(next["SGLANG_OPT_USE_TILELANG_INDEXER"], "1");
        assert_eq!(next["--mem-fraction-static"], "0.85");
        // Reset to default.
        let back = a
            .resolve(
                &plain(),
                &next,
                &set(&[("--tp", None), ("SGLANG_OPT_USE_TILELANG_INDEXER", None)]),
            )
            .expect("valid");
        assert_eq!(back["--tp"], "8");
        assert!(!back.contains_key("SGLANG_OPT_USE_TILELANG_INDEXER"));
    }

    #[test]
    fn refusals_name_the_flag() {
        let (a, _, _) = list();
        let cur = a.defaults().clone();
        for (changes, needle) in [
            (set(&[("--rm-rf", Some("/"))]), "unknown flag `--rm-rf`"),
            (
                set(&[("--tp", Some("eight"))]),
                "`--tp` must be an integer from 1 to 8",
            ),
            (
                set(&[("--tp", Some("9"))]),
                "`--tp` must be an integer from 1 to 8",
            ),
            (
                set(&[("--enable-torch-compile", Some("yes"))]),
                "true or false",
            ),
            (
                set(&[("SGLANG_OPT_USE_TILELANG_INDEXER", Some("2"))]),
                "one of 0, 1",
            ),
            (
                set(&[("--mem-fraction-static", Some("NaN"))]),
                "from 0.5 to 0.95",
            ),
            (set(&[("--tp", Some("4\n--evil"))]), "control characters"),
        ] {
            let err = a.resolve(&plain(), &cur, &changes).expect_err(needle);
            assert!(err.0.contains(needle), "{needle}: {err}");
        }
        // All or nothing.
        assert!(
            a.resolve(
                &plain(),
                &cur,
                &set(&[("--tp", Some("4")), ("--bogus", Some("1"))])
            )
            .is_err()
        );
    }

    #[test]
    fn invocation_replaces_in_place_and_appends_new_flags() {
        let (a, args, env) = list();
        let flags = a
            .resolve(
                &plain(),
                a.defaults(),
                &set(&[
                    ("--tp", Some("4")),
                    ("--enable-torch-compile", Some("true")),
                    ("SGLANG_OPT_USE_TILELANG_INDEXER", Some("1")),
                ]),
            )
            .expect("valid");
        let inv = a.invocation(&args, &env, &flags);
        assert_eq!(
            inv.args,
            [
                "-m",
                "sglang.launch_server",
                "--tp",
                "4",
                "--port",
                "30000",
                "--enable-torch-compile"
            ]
        );
        assert_eq!(inv.env["SGLANG_OPT_USE_TILELANG_INDEXER"], "1");
        assert_eq!(inv.env["NCCL_DEBUG"], "WARN");
        // Unset env flags are removed from what drainwatch's own environment passes on.
        let inv = a.invocation(&args, &env, a.defaults());
        assert_eq!(
            inv.env_remove,
            vec!["SGLANG_OPT_USE_TILELANG_INDEXER".to_owned()]
        );
        assert_eq!(inv.args, args);
    }

    #[test]
    fn a_refused_secret_value_is_not_quoted() {
        let specs = vec![spec(
            "--api-key",
            FlagKind::Arg,
            FlagType::Enum {
                values: vec!["sk-allowed-1".into()],
            },
        )];
        let a =
            AllowList::new(specs, &[], &BTreeMap::new(), &SecretNames::default()).expect("valid");
        let err = a
            .resolve(
                &plain(),
                &Flags::new(),
                &set(&[("--api-key", Some("sk-typo-2"))]),
            )
            .expect_err("not allowed");
        assert!(err.0.contains("`--api-key`"), "{err}");
        assert!(!err.0.contains("sk-"), "{err}");
    }

    /// The config's own bad base value of a secret it names is not quoted at start.
    #[test]
    fn a_refused_base_value_of_a_listed_secret_is_not_quoted() {
        let specs = vec![spec(
            "--license",
            FlagKind::Arg,
            FlagType::Enum {
                values: vec!["L-one".into()],
            },
        )];
        let args = ["--license".to_owned(), "L-base-9".to_owned()];
        let listed = SecretNames::new(&["LICENSE".to_owned()]);
        let err = AllowList::new(specs.clone(), &args, &BTreeMap::new(), &listed)
            .expect_err("not allowed")
            .to_string();
        assert!(
            err.contains("`--license`") && !err.contains("L-base"),
            "{err}"
        );
        // Without the list the name is no secret, and the value is quoted.
        let err = AllowList::new(specs, &args, &BTreeMap::new(), &SecretNames::default())
            .expect_err("not allowed")
            .to_string();
        assert!(err.contains("L-base-9"), "{err}");
    }

    #[test]
    fn a_redacted_secret_from_a_view_stands_for_its_raw_value() {
        let specs = vec![
            spec(
                "--api-key",
                FlagKind::Arg,
                FlagType::Enum {
                    values: vec!["sk-allowed-1".into(), "sk-allowed-2".into()],
                },
            ),
            spec(
                "--license",
                FlagKind::Arg,
                FlagType::Enum {
                    values: vec!["L-one".into()],
                },
            ),
        ];
        let names = ["LICENSE".to_owned()];
        let a =
            AllowList::new(specs, &[], &BTreeMap::new(), &SecretNames::new(&names)).expect("valid");
        let r = Redactor::ephemeral(&names).expect("a key");
        let shown = r.value("sk-allowed-2");
        let next = a
            .resolve(&r, &Flags::new(), &set(&[("--api-key", Some(&shown))]))
            .expect("the dialog's choice");
        assert_eq!(next["--api-key"], "sk-allowed-2");
        // A name on the config's list is not quoted back either.
        let err = a
            .resolve(&r, &Flags::new(), &set(&[("--license", Some("L-typo"))]))
            .expect_err("not allowed");
        assert!(!err.0.contains("L-"), "{err}");
    }

    #[test]
    fn shell_metacharacters_stay_one_argv_entry() {
        let specs = vec![spec(
            "--served-model-name",
            FlagKind::Arg,
            FlagType::Enum {
                values: vec!["a; rm -rf / #".into()],
            },
        )];
        let a =
            AllowList::new(specs, &[], &BTreeMap::new(), &SecretNames::default()).expect("valid");
        let flags = a
            .resolve(
                &plain(),
                &Flags::new(),
                &set(&[("--served-model-name", Some("a; rm -rf / #"))]),
            )
            .expect("valid");
        let inv = a.invocation(&[], &BTreeMap::new(), &flags);
        assert_eq!(inv.args, ["--served-model-name", "a; rm -rf / #"]);
    }

    #[test]
    fn new_flags_go_before_the_end_of_options() {
        let specs = vec![spec(
            "--enable-torch-compile",
            FlagKind::Arg,
            FlagType::Bool,
        )];
        let args: Vec<String> = ["launch", "--tp", "1", "--", "python3", "x"]
            .map(String::from)
            .to_vec();
        let a =
            AllowList::new(specs, &args, &BTreeMap::new(), &SecretNames::default()).expect("valid");
        let flags = Flags::from([("--enable-torch-compile".into(), "true".into())]);
        let inv = a.invocation(&args, &BTreeMap::new(), &flags);
        assert_eq!(
            inv.args,
            [
                "launch",
                "--tp",
                "1",
                "--enable-torch-compile",
                "--",
                "python3",
                "x"
            ]
        );
    }

    #[test]
    fn equals_form_and_bad_base_values() {
        let specs = vec![spec(
            "--tp",
            FlagKind::Arg,
            FlagType::Int { min: 1, max: 4 },
        )];
        let args = vec!["--tp=2".to_owned()];
        let a = AllowList::new(
            specs.clone(),
            &args,
            &BTreeMap::new(),
            &SecretNames::default(),
        )
        .expect("valid");
        assert_eq!(a.defaults()["--tp"], "2");
        let inv = a.invocation(
            &args,
            &BTreeMap::new(),
            &Flags::from([("--tp".into(), "3".into())]),
        );
        assert_eq!(inv.args, ["--tp", "3"]);
        let err = AllowList::new(
            specs,
            &["--tp".into(), "8".into()],
            &BTreeMap::new(),
            &SecretNames::default(),
        )
        .expect_err("8 > 4")
        .to_string();
        assert!(err.contains("base value"), "{err}");
    }
}
