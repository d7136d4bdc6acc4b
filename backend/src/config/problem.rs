//! What is wrong in a config's text, named by the key it is about: one type
//! for the server's file, its flags and the hub's file.

/// A refused config, before it is tied to its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Not TOML, or a value not of its key's type (TOML's own words).
    #[error("{0}")]
    Syntax(String),
    /// The file as a whole: "no [[agent]]".
    #[error("{0}")]
    Whole(String),
    /// A key's value breaks its rule: "server.port must be a port number".
    #[error("{key} {rule}")]
    Rule { key: String, rule: String },
    /// A key's value is refused, and why: "server.env: `1X` is not a valid
    /// environment variable name".
    #[error("{key}: {why}")]
    Refused { key: String, why: String },
}

impl Problem {
    pub fn rule(key: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Rule {
            key: key.into(),
            rule: rule.into(),
        }
    }

    pub fn refused(key: impl Into<String>, why: impl std::fmt::Display) -> Self {
        Self::Refused {
            key: key.into(),
            why: why.to_string(),
        }
    }
}

/// A name that cannot be an environment variable's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a valid environment variable name")]
pub struct BadEnvName(pub String);

/// Environment variable names: letters, digits, `_`, not starting with a digit.
pub fn check_env_name(name: &str) -> Result<(), BadEnvName> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(BadEnvName(name.to_owned()))
    }
}
