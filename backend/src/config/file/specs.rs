//! The file's `[[flags]]`: each entry, checked, becomes the typed
//! [`FlagSpec`] the allow-list is built from; every error names the flag.

use serde::Deserialize;
use shared::flags::{FlagKind, FlagSpec, FlagType};

use crate::config::{Problem, check_env_name};

/// One `[[flags]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFlag {
    name: String,
    kind: FlagKind,
    #[serde(rename = "type")]
    ty: String,
    min: Option<toml::Value>,
    max: Option<toml::Value>,
    values: Option<Vec<String>>,
    help: Option<String>,
}

fn number(v: &Option<toml::Value>, key: &str) -> Result<Option<f64>, Problem> {
    match v {
        None => Ok(None),
        Some(toml::Value::Integer(i)) => Ok(Some(*i as f64)),
        Some(toml::Value::Float(f)) => Ok(Some(*f)),
        Some(other) => Err(Problem::rule(
            format!("flag {key}"),
            format!("must be a number, got {other}"),
        )),
    }
}

pub(super) fn flag_spec(f: RawFlag) -> Result<FlagSpec, Problem> {
    let name = f.name.trim().to_owned();
    match f.kind {
        FlagKind::Env => check_env_name(&name).map_err(|e| Problem::refused("flags", e))?,
        FlagKind::Arg => {
            if !name.starts_with("--") || name.len() < 3 || name.contains(['=', ' ', '\0']) {
                return Err(Problem::refused(
                    "flags",
                    format!("argument `{name}` must look like `--name` (no `=` or spaces)"),
                ));
            }
        }
    }
    let min = number(&f.min, &format!("`{name}`.min"))?;
    let max = number(&f.max, &format!("`{name}`.max"))?;
    let ty = match f.ty.as_str() {
        "bool" => FlagType::Bool,
        "int" => {
            let (min, max) = (
                min.unwrap_or(i64::MIN as f64),
                max.unwrap_or(i64::MAX as f64),
            );
            if min.fract() != 0.0 || max.fract() != 0.0 {
                return Err(Problem::refused(
                    "flags",
                    format!("`{name}`: an int flag needs whole-number min and max"),
                ));
            }
            FlagType::Int {
                min: min as i64,
                max: max as i64,
            }
        }
        "float" => FlagType::Float {
            min: min.unwrap_or(f64::MIN),
            max: max.unwrap_or(f64::MAX),
        },
        "enum" => match f.values {
            Some(values) if !values.is_empty() => FlagType::Enum { values },
            _ => {
                return Err(Problem::refused(
                    "flags",
                    format!("`{name}`: an enum flag needs `values = [...]`"),
                ));
            }
        },
        other => {
            return Err(Problem::refused(
                "flags",
                format!("`{name}`: unknown type `{other}` (use bool, int, float or enum)"),
            ));
        }
    };
    if let FlagType::Int { min, max } = ty
        && min > max
    {
        return Err(Problem::refused(
            "flags",
            format!("`{name}`: min is above max"),
        ));
    }
    if let FlagType::Float { min, max } = ty
        && (min > max || min.is_nan() || max.is_nan())
    {
        return Err(Problem::refused(
            "flags",
            format!("`{name}`: min is above max"),
        ));
    }
    Ok(FlagSpec {
        name,
        kind: f.kind,
        ty,
        help: f.help,
    })
}
