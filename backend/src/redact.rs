//! Secrets in what drainwatch shows (command lines, flags, environments, log
//! lines): which names are secret, and the rewriting of their values into
//! `redacted:` + the first 8 hex digits of HMAC-SHA256(key, value). That form
//! shows no part of the secret but tells two secrets apart (and the same secret
//! always reads the same), so a changed API key still shows as a change.
//!
//! A name is secret when, split into words on `-` and `_` (case-insensitive),
//! a word is `token`, `secret`, `password` or `passwd`, or its last word is
//! `key` (`--api-key`, `OPENAI_API_KEY`, `HF_TOKEN`, `--hf-token`,
//! `--client-secret`, `DB_PASSWORD`), or it is on the config's `redact` list
//! (compared case-insensitively, leading dashes ignored, `-` = `_`). Whole words
//! only, on purpose: `--max-total-tokens`, `--max-prefill-tokens`, `--tokenizer`,
//! `--tokenizer-path` and `--ssl-keyfile` are tuning knobs and paths that people
//! must see. `true`/`false` values of flags stay visible (a switch is no secret).
//!
//! Besides names, every literal occurrence in text of a secret value the
//! redactor was told ([`Redactor::learn`]: the config's secret args and env, the
//! current flags) is replaced, whatever surrounds it; values shorter than
//! [`MIN_KNOWN`] characters are not looked for.
//!
//! The key is kept in [`KEY_FILE`] (mode 0600) beside the database, so ids stay
//! the same across restarts of drainwatch; without a store it is made fresh in
//! memory. The process-wide redactor is [`install`]ed once at startup; code and
//! tests that need a particular one build their own [`Redactor`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{OnceLock, PoisonError, RwLock};

use hmac::{Hmac, Mac};
use shared::restart::{Failure, FlagSpec, FlagType, Flags};

/// The key's file, in the store's folder.
pub const KEY_FILE: &str = "redact.key";
/// Known secret values shorter than this are not searched for in text.
pub const MIN_KNOWN: usize = 4;
const KEY_LEN: usize = 32;
const PREFIX: &str = "redacted:";
/// Hex digits of the keyed hash shown.
const ID_DIGITS: usize = 8;
/// Words that make a name secret wherever they stand in it.
const SECRET_WORDS: [&str; 4] = ["token", "secret", "password", "passwd"];

/// Why the key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a redaction key ({len} bytes, not {KEY_LEN}); delete it to make a new one"
    )]
    Damaged { path: PathBuf, len: usize },
    #[error("no randomness from the OS for the redaction key: {0}")]
    Random(String),
}

/// Decides what is secret and rewrites it.
pub struct Redactor {
    key: [u8; KEY_LEN],
    /// The config's extra names, normalized (see [`normalize`]).
    extra: Vec<String>,
    /// Secret values to replace wherever they occur, longest first.
    known: RwLock<Vec<String>>,
}

impl std::fmt::Debug for Redactor {
    /// Never the key, never the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Redactor")
            .field("extra", &self.extra)
            .field("known_values", &known.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor with `key` and the config's extra secret `names`.
    pub fn new(key: [u8; KEY_LEN], names: &[String]) -> Self {
        Self {
            key,
            extra: names
                .iter()
                .map(|n| normalize(n))
                .filter(|n| !n.is_empty())
                .collect(),
            known: RwLock::new(Vec::new()),
        }
    }

    /// A redactor with a fresh random key (ids differ from run to run).
    pub fn ephemeral(names: &[String]) -> Result<Self, RedactError> {
        Ok(Self::new(random_key()?, names))
    }

    /// Whether values named `name` (`--api-key`, `HF_TOKEN`, `api_key`) are secret.
    pub fn is_secret(&self, name: &str) -> bool {
        let norm = normalize(name);
        !norm.is_empty() && (self.extra.contains(&norm) || secret_words(&norm))
    }

    /// The redacted form of a secret value; an empty or already redacted one as it is.
    pub fn value(&self, v: &str) -> String {
        if v.is_empty() || is_redacted(v) {
            return v.to_owned();
        }
        let Ok(mut mac) = Hmac::<sha2::Sha256>::new_from_slice(&self.key) else {
            // HMAC takes keys of any length: not reached.
            return "redacted".to_owned();
        };
        mac.update(v.as_bytes());
        let tag = mac.finalize().into_bytes();
        let hex: String = tag
            .iter()
            .take(ID_DIGITS / 2)
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{PREFIX}{hex}")
    }

    /// Remembers a secret value, to replace wherever it occurs in text.
    pub fn learn(&self, value: &str) {
        // A boolean or a number is no secret to look for in text: learnt,
        // every `true` and every `8192` would vanish from views (and ids).
        if value.chars().count() < MIN_KNOWN
            || is_redacted(value)
            || matches!(value, "true" | "false")
            || value.parse::<f64>().is_ok()
        {
            return;
        }
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if !known.iter().any(|k| k == value) {
            known.push(value.to_owned());
            known.sort_by_key(|k| std::cmp::Reverse(k.len()));
        }
    }

    /// Remembers the values of `argv`'s secret entries.
    pub fn learn_argv(&self, argv: &[String]) {
        for (i, at) in self.secret_slots(argv) {
            self.learn(&argv[i][at..]);
        }
    }

    /// Remembers the values of secret names among `pairs` (an environment, flags).
    pub fn learn_pairs(&self, pairs: &BTreeMap<String, String>) {
        for (k, v) in pairs {
            if self.is_secret(k) {
                self.learn(v);
            }
        }
    }

    /// Remembers every secret value of the server's config: its args, its env,
    /// its flags' defaults and the values its allow-list offers for secret flags.
    pub fn learn_config(&self, cfg: &crate::config::file::ServerConfig) {
        self.learn_argv(&cfg.args);
        self.learn_pairs(&cfg.env);
        self.learn_pairs(cfg.allow.defaults());
        for spec in cfg.allow.specs() {
            if let FlagType::Enum { values } = &spec.ty
                && self.is_secret(&spec.name)
            {
                values.iter().for_each(|v| self.learn(v));
            }
        }
    }

    /// `argv` with the values of its secret entries redacted: `--api-key VALUE`
    /// (the next element, unless it starts with `--`), `--api-key=VALUE`,
    /// `HF_TOKEN=VALUE`; and known values anywhere.
    pub fn argv(&self, argv: &[String]) -> Vec<String> {
        let slots = self.secret_slots(argv);
        argv.iter()
            .enumerate()
            .map(|(i, a)| match slots.iter().find(|(j, _)| *j == i) {
                Some(&(_, at)) => format!("{}{}", &a[..at], self.value(&a[at..])),
                // One element may be a whole command (`sh -c "… --api-key k"`,
                // a setproctitle line): read like text.
                None => self.text(a),
            })
            .collect()
    }

    /// Flags with secret-named values redacted (and known values in the others).
    pub fn flags(&self, flags: &Flags) -> Flags {
        flags
            .iter()
            .map(|(k, v)| {
                let v = if self.is_secret(k) && !matches!(v.as_str(), "true" | "false") {
                    self.value(v)
                } else {
                    self.known_in(v).into_owned()
                };
                (k.clone(), v)
            })
            .collect()
    }

    /// The allow-list as shown: the values offered for a secret flag redacted.
    pub fn specs(&self, specs: &[FlagSpec]) -> Vec<FlagSpec> {
        specs
            .iter()
            .map(|s| {
                let mut s = s.clone();
                if let FlagType::Enum { values } = &mut s.ty
                    && self.is_secret(&s.name)
                {
                    values.iter_mut().for_each(|v| *v = self.value(v));
                }
                s
            })
            .collect()
    }

    /// A line of free text (a log line) with secrets redacted: known values
    /// anywhere, and the values of secret names as `name=v`, `name='v'`,
    /// `name="v"`, `"name": "v"`, `name: v` and `--name v`.
    pub fn text(&self, s: &str) -> String {
        self.names_in_text(&self.known_in(s))
    }

    /// [`Self::text`] of every line.
    pub fn lines(&self, lines: &[String]) -> Vec<String> {
        lines.iter().map(|l| self.text(l)).collect()
    }

    /// Text people wrote (labels, notes, errors) with known secret values
    /// replaced; names are left alone there ("token budget: 4096" is no secret).
    pub fn known(&self, s: &str) -> String {
        self.known_in(s).into_owned()
    }

    /// A failure as shown: its log tail and its holders' command lines redacted.
    pub fn failure(&self, f: &mut Failure) {
        match f {
            Failure::LaunchFailed { log_tail, .. } | Failure::Crashed { log_tail, .. } => {
                *log_tail = self.lines(log_tail);
            }
            Failure::VerifyFailed { holders, .. } | Failure::ForeignHolders { holders } => {
                for h in holders {
                    h.cmdline = self.argv(&h.cmdline);
                }
            }
            Failure::Interrupted => {}
        }
    }

    /// Where `argv` carries secret values: (element, byte offset of its value).
    fn secret_slots(&self, argv: &[String]) -> Vec<(usize, usize)> {
        let mut slots = Vec::new();
        let mut next_is_value = false;
        for (i, a) in argv.iter().enumerate() {
            if std::mem::take(&mut next_is_value) && !a.starts_with("--") {
                slots.push((i, 0));
                continue;
            }
            match a.split_once('=') {
                Some((name, _)) if is_name(name) => {
                    if self.is_secret(name) {
                        slots.push((i, name.len() + 1));
                    }
                }
                _ => next_is_value = a.starts_with('-') && self.is_secret(a),
            }
        }
        slots
    }

    /// `s` with every known secret value replaced (longest first, one pass).
    fn known_in<'a>(&self, s: &'a str) -> Cow<'a, str> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        if !known.iter().any(|k| s.contains(k.as_str())) {
            return Cow::Borrowed(s);
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            match known.iter().find(|k| rest.starts_with(k.as_str())) {
                Some(k) => {
                    out.push_str(&self.value(k));
                    rest = &rest[k.len()..];
                }
                None => {
                    out.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        Cow::Owned(out)
    }

    /// `s` with the values that follow secret names redacted.
    fn names_in_text(&self, s: &str) -> String {
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let (mut i, mut copied) = (0, 0);
        while i < b.len() {
            if !is_name_byte(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && is_name_byte(b[i]) {
                i += 1;
            }
            if !self.is_secret(&s[start..i]) {
                continue;
            }
            if let Some((vs, ve)) = value_after(b, start, i) {
                // Every boundary here is an ASCII byte: slicing is safe.
                out.push_str(&s[copied..vs]);
                out.push_str(&self.value(&s[vs..ve]));
                (copied, i) = (ve, ve);
            }
        }
        out.push_str(&s[copied..]);
        out
    }
}

/// Whether `name` is secret by its words alone (the config's list aside).
pub fn secret_by_words(name: &str) -> bool {
    secret_words(&normalize(name))
}

/// The word rule, on a normalized name.
fn secret_words(norm: &str) -> bool {
    let mut words = norm.split('_').filter(|w| !w.is_empty()).peekable();
    while let Some(w) = words.next() {
        if SECRET_WORDS.contains(&w) || (words.peek().is_none() && w == "key") {
            return true;
        }
    }
    false
}

/// Lowercase, leading dashes gone, `-` as `_`.
pub fn normalize(name: &str) -> String {
    name.trim()
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('-', "_")
}

/// `redacted:` + 8 lowercase hex digits.
pub fn is_redacted(v: &str) -> bool {
    v.strip_prefix(PREFIX).is_some_and(|h| {
        h.len() == ID_DIGITS
            && h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// An option or variable name: name bytes only, with a letter in it.
fn is_name(s: &str) -> bool {
    s.bytes().all(is_name_byte) && s.bytes().any(|b| b.is_ascii_alphabetic())
}

fn is_quote(b: u8) -> bool {
    b == b'"' || b == b'\''
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
        i += 1;
    }
    i
}

/// The value that follows the secret name at `b[start..end]`, if any: after
/// `=` or `:` (the name perhaps quoted), or after spaces for a `--name`.
fn value_after(b: &[u8], start: usize, end: usize) -> Option<(usize, usize)> {
    let mut j = end;
    if start > 0 && is_quote(b[start - 1]) && b.get(j) == Some(&b[start - 1]) {
        j += 1;
    }
    let k = skip_ws(b, j);
    match b.get(k) {
        Some(b'=' | b':') => value_at(b, skip_ws(b, k + 1)),
        Some(_) if k > j && b[start..].starts_with(b"--") && !b[k..].starts_with(b"--") => {
            value_at(b, k)
        }
        _ => None,
    }
}

/// The value starting at `b[v]`: quoted (up to its closing quote) or bare (up
/// to a space or punctuation that ends it). Nothing for an empty one or `None`.
fn value_at(b: &[u8], v: usize) -> Option<(usize, usize)> {
    let q = *b.get(v)?;
    let (vs, ve) = if is_quote(q) {
        let close = b[v + 1..].iter().position(|&c| c == q);
        (v + 1, close.map_or(b.len(), |p| v + 1 + p))
    } else {
        let ends = |c: &u8| {
            c.is_ascii_whitespace()
                || matches!(c, b',' | b';' | b')' | b']' | b'}' | b'&' | b'"' | b'\'')
        };
        (v, b[v..].iter().position(ends).map_or(b.len(), |p| v + p))
    };
    let value = &b[vs..ve];
    (!value.is_empty() && value != b"None" && value != b"null").then_some((vs, ve))
}

fn random_key() -> Result<[u8; KEY_LEN], RedactError> {
    let mut key = [0u8; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| RedactError::Random(e.to_string()))?;
    Ok(key)
}

/// The key in `dir/redact.key`, made (32 random bytes, mode 0600) if there is none.
pub fn load_key(dir: &Path) -> Result<[u8; KEY_LEN], RedactError> {
    let path = dir.join(KEY_FILE);
    if let Some(key) = read_key(&path)? {
        return Ok(key);
    }
    let key = random_key()?;
    let tmp = dir.join(format!("{KEY_FILE}.{}.tmp", std::process::id()));
    let write_err = |source| RedactError::Write {
        path: path.clone(),
        source,
    };
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()));
    // A link never replaces a key another drainwatch made meanwhile.
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_key(&path)?.ok_or_else(|| write_err(e))
        }
        Err(e) => Err(write_err(e)),
    }
}

/// The key in `path`, if the file exists; its mode is narrowed to 0600.
fn read_key(path: &Path) -> Result<Option<[u8; KEY_LEN]>, RedactError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RedactError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let key: [u8; KEY_LEN] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| RedactError::Damaged {
            path: path.to_owned(),
            len: bytes.len(),
        })?;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the redaction key was readable by others; narrowing it to 0600");
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
    Ok(Some(key))
}

static GLOBAL: OnceLock<Redactor> = OnceLock::new();

/// Makes `r` the process-wide redactor; false if one was already in use.
pub fn install(r: Redactor) -> bool {
    GLOBAL.set(r).is_ok()
}

/// The process-wide redactor: the installed one, else one with a fresh key.
pub fn global() -> &'static Redactor {
    GLOBAL.get_or_init(|| {
        Redactor::ephemeral(&[]).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "redacting with a key made from the clock");
            Redactor::new(clock_key(), &[])
        })
    })
}

/// A last-resort key when the OS gives no randomness.
fn clock_key() -> [u8; KEY_LEN] {
    use sha2::Digest;
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}:{}", h.finish());
    let mut key = [0u8; KEY_LEN];
    key.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::new(
            [7; KEY_LEN],
            &["MY_CREDENTIAL".to_owned(), "--license".to_owned()],
        )
    }

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn secret_names_by_words() {
        let r = r();
        for name in [
            "--api-key",
            "OPENAI_API_KEY",
            "--hf-token",
            "HF_TOKEN",
            "--client-secret",
            "DB_PASSWORD",
            "db_passwd",
            "api_key",
            "--API-KEY",
            "my_credential",
            "--my-credential",
            "--license",
            "LICENSE",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(r.is_secret(name), "{name} is secret");
        }
    }

    #[test]
    fn tuning_knobs_and_paths_stay_visible() {
        let r = r();
        for name in [
            "--max-total-tokens",
            "--max-prefill-tokens",
            "--tokenizer",
            "--tokenizer-path",
            "--ssl-keyfile",
            "--tp",
            "--model-path",
            "--keyword",
            "SGLANG_OPT_USE_TILELANG_INDEXER",
            "--",
            "",
        ] {
            assert!(!r.is_secret(name), "{name} is not secret");
        }
    }

    #[test]
    fn the_redacted_form_hides_the_value_and_tells_secrets_apart() {
        let r = r();
        let a = r.value("sk-live-abcdef");
        assert!(a.starts_with("redacted:") && a.len() == 17, "{a}");
        assert!(!a.contains("abcdef"));
        assert_eq!(
            a,
            r.value("sk-live-abcdef"),
            "the same secret, the same form"
        );
        assert_ne!(a, r.value("sk-live-abcdeg"), "two secrets differ");
        assert_eq!(r.value(&a), a, "already redacted stays");
        let other = Redactor::new([8; KEY_LEN], &[]);
        assert_ne!(a, other.value("sk-live-abcdef"), "another key, another id");
    }

    #[test]
    fn a_whole_command_in_one_element_and_learnt_booleans() {
        let r = r();
        let out = r.argv(&v(&[
            "sh",
            "-c",
            "python3 -m sglang --api-key sk-inline-9 --tp 8",
        ]));
        assert!(!out[2].contains("sk-inline-9"), "{out:?}");
        assert!(out[2].contains("--tp 8"), "{out:?}");
        // A secret flag's boolean or number is never looked for in text.
        for v in ["true", "false", "8192", "0.5"] {
            r.learn(v);
        }
        assert_eq!(
            r.known("--enable-x true --max 8192 0.5"),
            "--enable-x true --max 8192 0.5"
        );
    }

    #[test]
    fn argv_forms() {
        let r = r();
        let s = r.value("S1");
        let argv = v(&[
            "env",
            "HF_TOKEN=hf_x",
            "python3",
            "--api-key",
            "S1",
            "--hf-token=S1",
            "--client-secret",
            "--tp",
            "8",
            "--max-total-tokens",
            "4096",
            "--tokenizer-path",
            "/m/tok",
            "--license",
            "L1",
        ]);
        let out = r.argv(&argv);
        assert_eq!(out[1], format!("HF_TOKEN={}", r.value("hf_x")));
        assert_eq!(out[3..5], ["--api-key".to_owned(), s.clone()]);
        assert_eq!(out[5], format!("--hf-token={s}"));
        // A secret flag followed by another flag has no value to redact.
        assert_eq!(out[6..9], v(&["--client-secret", "--tp", "8"]));
        assert_eq!(out[9..13], argv[9..13]);
        assert_eq!(out[14], r.value("L1"));
        assert_eq!(r.argv(&v(&["--api-key"])), v(&["--api-key"]));
    }

    #[test]
    fn text_forms() {
        let r = r();
        let s = r.value("SECRET1");
        for (line, want) in [
            (
                "server_args=ServerArgs(model_path='m', api_key='SECRET1', tp_size=8)",
                format!("server_args=ServerArgs(model_path='m', api_key='{s}', tp_size=8)"),
            ),
            (
                r#"{"api_key": "SECRET1", "max_total_tokens": 4096}"#,
                format!(r#"{{"api_key": "{s}", "max_total_tokens": 4096}}"#),
            ),
            (
                "launch --api-key SECRET1 --tp 8",
                format!("launch --api-key {s} --tp 8"),
            ),
            (
                "HF_TOKEN=SECRET1 python3 x",
                format!("HF_TOKEN={s} python3 x"),
            ),
            (
                "api_key=\"SECRET1\" hf_token=None",
                format!("api_key=\"{s}\" hf_token=None"),
            ),
            ("url?api_key=SECRET1&x=1", format!("url?api_key={s}&x=1")),
            (
                "--max-total-tokens 4096 --tokenizer /t tokenizer='x'",
                "--max-total-tokens 4096 --tokenizer /t tokenizer='x'".to_owned(),
            ),
        ] {
            assert_eq!(r.text(line), want, "{line}");
        }
        // Idempotent: a redacted line reads the same again.
        let once = r.text("api_key='SECRET1' --hf-token SECRET1");
        assert_eq!(r.text(&once), once);
    }

    #[test]
    fn known_values_are_replaced_anywhere() {
        let r = r();
        r.learn_argv(&v(&["--api-key", "S3cr3tValue", "--tp", "8"]));
        r.learn_pairs(&BTreeMap::from([
            ("HF_TOKEN".to_owned(), "hf_abcdef".to_owned()),
            ("NCCL_DEBUG".to_owned(), "WARN".to_owned()),
        ]));
        r.learn("abc");
        let line = "Authorization: Bearer S3cr3tValue; hub=hf_abcdef/x; WARN abc";
        let out = r.text(line);
        assert!(
            !out.contains("S3cr3tValue") && !out.contains("hf_abcdef"),
            "{out}"
        );
        assert!(out.contains(&r.value("S3cr3tValue")), "{out}");
        assert!(out.contains("WARN abc"), "not secret, or too short: {out}");
        assert_eq!(
            r.argv(&v(&["serve", "S3cr3tValue"])),
            v(&["serve", &r.value("S3cr3tValue")])
        );
        assert!(
            r.known("label S3cr3tValue")
                .contains(&r.value("S3cr3tValue"))
        );
    }

    #[test]
    fn flags_and_specs() {
        let r = r();
        let flags = Flags::from([
            ("--api-key".to_owned(), "K1".to_owned()),
            ("--enable-token-auth".to_owned(), "true".to_owned()),
            ("--tp".to_owned(), "8".to_owned()),
        ]);
        let out = r.flags(&flags);
        assert_eq!(out["--api-key"], r.value("K1"));
        assert_eq!(out["--enable-token-auth"], "true");
        assert_eq!(out["--tp"], "8");
        let spec = FlagSpec {
            name: "--api-key".to_owned(),
            kind: shared::restart::FlagKind::Arg,
            ty: FlagType::Enum {
                values: v(&["K1", "K2"]),
            },
            help: None,
        };
        let shown = r.specs(&[spec]);
        assert_eq!(
            shown[0].ty,
            FlagType::Enum {
                values: vec![r.value("K1"), r.value("K2")]
            }
        );
    }

    #[test]
    fn the_key_file_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = load_key(dir.path()).expect("made");
        let path = dir.path().join(KEY_FILE);
        let mode = std::fs::metadata(&path).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_key(dir.path()).expect("read"), a, "stable across runs");
        std::fs::write(&path, b"short").expect("damage");
        let err = load_key(dir.path()).expect_err("damaged");
        assert!(err.to_string().contains("not 32"), "{err}");
    }
}
