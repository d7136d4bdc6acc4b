//! The managed server's API key (`--api-key` of SGLang and vLLM): taken from a
//! file (`server.api_key_file`, read at start) or an environment variable
//! (`server.api_key_env`), never from the config itself. The value is kept in
//! [`ApiKey`], which neither `Debug` nor anything else prints.

use std::path::{Path, PathBuf};

use reqwest::header::HeaderValue;

use crate::config::{Problem, check_env_name};

/// A secret API key. Its `Debug` says only that there is one; it has no
/// `Display`. [`ApiKey::bearer`] is the one way it leaves, as a header value
/// marked sensitive (so neither reqwest nor hyper prints it either).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(redacted)")
    }
}

impl ApiKey {
    /// Checks a key read from `what` (the key and where it was read from).
    fn new(raw: &str, what: &str) -> Result<Self, Problem> {
        let key = raw.strip_suffix('\n').unwrap_or(raw);
        let key = key.strip_suffix('\r').unwrap_or(key);
        if key.trim().is_empty() {
            return Err(Problem::rule(what, "is empty"));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Problem::rule(
                what,
                "holds characters an HTTP header cannot carry (spaces, control or non-ASCII characters)",
            ));
        }
        Ok(Self(key.to_owned()))
    }

    /// The raw value, for the redactor to learn; never to show.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `Bearer <key>`, marked sensitive.
    pub fn bearer(&self) -> HeaderValue {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.0))
            // Checked in `new`: visible ASCII only.
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
        v.set_sensitive(true);
        v
    }
}

/// The `[server]` keys that say where the key is, as written.
#[derive(Debug, Default)]
pub(super) struct KeySource {
    pub(super) file: Option<PathBuf>,
    pub(super) env: Option<String>,
    /// Whether an inline `api_key` was written (refused).
    pub(super) inline: bool,
}

impl KeySource {
    /// Reads the key: `file` relative to `dir` (the config file's folder).
    /// Errors name the key and, for a file, its path; never the value.
    pub(super) fn read(&self, dir: &Path) -> Result<Option<ApiKey>, Problem> {
        if self.inline {
            return Err(Problem::refused(
                "server.api_key",
                "the key is not taken from the config itself; put it in a file \
                 (server.api_key_file = \"/path\", readable by drainwatch only) or an environment \
                 variable (server.api_key_env = \"NAME\")",
            ));
        }
        match (&self.file, &self.env) {
            (Some(_), Some(_)) => Err(Problem::rule(
                "server.api_key_file and server.api_key_env",
                "are both set; give one of them",
            )),
            (Some(file), None) => {
                let path = if file.is_relative() {
                    dir.join(file)
                } else {
                    file.clone()
                };
                let what = format!("server.api_key_file ({})", path.display());
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| Problem::refused(what.clone(), format!("cannot read it: {e}")))?;
                ApiKey::new(&text, &what).map(Some)
            }
            (None, Some(name)) => {
                check_env_name(name).map_err(|e| Problem::refused("server.api_key_env", e))?;
                let what = format!("server.api_key_env ({name})");
                match std::env::var(name) {
                    Ok(v) => ApiKey::new(&v, &what).map(Some),
                    Err(std::env::VarError::NotPresent) => {
                        Err(Problem::refused(what, "the variable is not set"))
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        Err(Problem::refused(what, "the value is not UTF-8"))
                    }
                }
            }
            (None, None) => Ok(None),
        }
    }
}
