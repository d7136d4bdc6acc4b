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
//! redactor was told ([`Redactor::learn`]: the config's API key, its secret
//! args and env, the current flags) is replaced, whatever surrounds it; values shorter than
//! [`MIN_KNOWN`] characters are not looked for.
//!
//! The key is kept in [`KEY_FILE`] (mode 0600) beside the database, so ids stay
//! the same across restarts of drainwatch; without a store it is made fresh in
//! memory. The process-wide redactor is [`install`]ed once at startup; code and
//! tests that need a particular one build their own [`Redactor`].

mod key;
mod scan;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{OnceLock, PoisonError, RwLock};

use hmac::{Hmac, Mac};
use shared::flags::{FlagSpec, FlagType, Flags};
use shared::restart::Failure;

pub use key::{KEY_FILE, RedactError, load_key};

use key::{clock_key, random_key};
use scan::{is_name, is_name_byte, value_after};

/// Known secret values shorter than this are not searched for in text.
pub const MIN_KNOWN: usize = 4;
const KEY_LEN: usize = 32;
const PREFIX: &str = "redacted:";
/// Hex digits of the keyed hash shown.
const ID_DIGITS: usize = 8;
/// Words that make a name secret wherever they stand in it.
const SECRET_WORDS: [&str; 4] = ["token", "secret", "password", "passwd"];

/// Decides what is secret and rewrites it.
pub struct Redactor {
    key: [u8; KEY_LEN],
    /// The config's extra names.
    names: SecretNames,
    /// Secret values to replace wherever they occur, longest first.
    known: RwLock<Vec<String>>,
}

impl std::fmt::Debug for Redactor {
    /// Never the key, never the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Redactor")
            .field("extra", &self.names.0)
            .field("known_values", &known.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor with `key` and the config's extra secret `names`.
    pub fn new(key: [u8; KEY_LEN], names: &[String]) -> Self {
        Self {
            key,
            names: SecretNames::new(names),
            known: RwLock::new(Vec::new()),
        }
    }

    /// A redactor with a fresh random key (ids differ from run to run).
    pub fn ephemeral(names: &[String]) -> Result<Self, RedactError> {
        Ok(Self::new(random_key()?, names))
    }

    /// Whether values named `name` (`--api-key`, `HF_TOKEN`, `api_key`) are secret.
    pub fn is_secret(&self, name: &str) -> bool {
        self.names.is_secret(name)
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
        self.learn_key(value);
    }

    /// Remembers a value known to be secret whatever it looks like (an API
    /// key made of digits is still a key); only short ones are not looked for.
    pub fn learn_key(&self, value: &str) {
        if value.chars().count() < MIN_KNOWN || is_redacted(value) {
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
            Failure::Interrupted
            | Failure::Unhealthy { .. }
            | Failure::MemoryLeaked { .. }
            | Failure::Unkillable { .. } => {}
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

/// Which names are secret: the word rule and the config's `redact` list. Held
/// by the redactor; the config's check of its own base values asks one made
/// from the same list.
#[derive(Debug, Clone, Default)]
pub struct SecretNames(Vec<String>);

impl SecretNames {
    /// The word rule and `names` (the config's list; case and dashes aside).
    pub fn new(names: &[String]) -> Self {
        Self(
            names
                .iter()
                .map(|n| normalize(n))
                .filter(|n| !n.is_empty())
                .collect(),
        )
    }

    /// Whether values named `name` (`--api-key`, `HF_TOKEN`, `api_key`) are secret.
    pub fn is_secret(&self, name: &str) -> bool {
        let norm = normalize(name);
        !norm.is_empty() && (self.0.contains(&norm) || secret_words(&norm))
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

static GLOBAL: OnceLock<Redactor> = OnceLock::new();

/// Makes `r` the process-wide redactor; false if one was already in use.
pub fn install(r: Redactor) -> bool {
    GLOBAL.set(r).is_ok()
}

/// Flag changes as an audit or a record shows them: a secret's value
/// redacted, any other value with the secrets it is known to hold redacted.
pub fn shown_changes(
    changes: &std::collections::BTreeMap<String, Option<String>>,
) -> std::collections::BTreeMap<String, Option<String>> {
    let r = global();
    changes
        .iter()
        .map(|(k, v)| {
            let v = v.as_deref().map(|v| {
                if r.is_secret(k) {
                    r.value(v)
                } else {
                    r.known(v)
                }
            });
            (k.clone(), v)
        })
        .collect()
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
