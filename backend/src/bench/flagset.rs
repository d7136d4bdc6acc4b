//! A flag set's identity: the canonical form of what the server ran with (model,
//! every allow-listed flag's effective value, sorted) and its SHA-256, cut to 12
//! hex digits. Two launches with the same canonical form are the same set,
//! whatever order their flags were given in. A secret flag's value enters both
//! in its redacted (keyed) form only, so no raw secret is hashed or stored; a
//! set without secrets keeps the id it always had.

use sha2::{Digest, Sha256};
use shared::flags::Flags;

use crate::redact::Redactor;

/// The canonical JSON text: `{"flags":{…sorted…},"model":"…"}`, secrets redacted.
pub fn canonical(r: &Redactor, model: &str, flags: &Flags) -> String {
    // Only secret-named values are replaced: what else a redactor has learnt
    // must not change the id of a set.
    let shown: Flags = flags
        .iter()
        .map(|(k, v)| {
            let v = if r.is_secret(k) && !matches!(v.as_str(), "true" | "false") {
                r.value(v)
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect();
    let flags: std::collections::BTreeMap<&str, &str> =
        shown.iter().map(|(k, v)| (k.trim(), v.trim())).collect();
    serde_json::json!({ "flags": flags, "model": model.trim() }).to_string()
}

/// The set's id.
pub fn id(r: &Redactor, model: &str, flags: &Flags) -> String {
    let digest = Sha256::digest(canonical(r, model, flags).as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::new([1; 32], &[])
    }

    fn flags(pairs: &[(&str, &str)]) -> Flags {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn order_does_not_matter_values_do() {
        let r = r();
        let a = flags(&[("--tp", "8"), ("X", "1")]);
        let mut b = Flags::new();
        b.insert("X".into(), "1".into());
        b.insert("--tp".into(), "8".into());
        assert_eq!(id(&r, "m", &a), id(&r, "m", &b));
        assert_eq!(id(&r, "m", &a).len(), 12);
        b.insert("--tp".into(), "4".into());
        assert_ne!(id(&r, "m", &a), id(&r, "m", &b));
        assert_ne!(id(&r, "m", &a), id(&r, "other", &a));
        assert_eq!(
            canonical(&r, "m", &a),
            r#"{"flags":{"--tp":"8","X":"1"},"model":"m"}"#
        );
    }

    #[test]
    fn sets_without_secrets_keep_their_ids_whatever_the_key() {
        // SHA-256 of the canonical text as ids were computed before redaction.
        let a = flags(&[("--tp", "8"), ("X", "1")]);
        let b = flags(&[("--tp", "8"), ("SGLANG_OPT_USE_TILELANG_INDEXER", "1")]);
        for r in [r(), Redactor::new([2; 32], &[])] {
            assert_eq!(id(&r, "m", &a), "4aab5ca232cb");
            assert_eq!(id(&r, "deepseek-ai/DeepSeek-V3.2-Exp", &b), "56ed8be6036b");
        }
    }

    #[test]
    fn a_secret_is_hashed_only_in_its_redacted_form() {
        let r = r();
        let raw = flags(&[("--api-key", "sk-raw-secret"), ("--tp", "8")]);
        let text = canonical(&r, "m", &raw);
        assert!(!text.contains("sk-raw-secret"), "{text}");
        assert!(text.contains(&r.value("sk-raw-secret")), "{text}");
        // The id is that of the redacted set: the raw value never reaches it.
        let shown = flags(&[("--api-key", &r.value("sk-raw-secret")), ("--tp", "8")]);
        let plain = Sha256::digest(text.as_bytes());
        let plain: String = plain.iter().take(6).map(|b| format!("{b:02x}")).collect();
        assert_eq!(id(&r, "m", &raw), plain);
        assert_eq!(id(&r, "m", &raw), id(&r, "m", &shown));
        // Two secrets are two sets; another key, other ids.
        let other = flags(&[("--api-key", "sk-other"), ("--tp", "8")]);
        assert_ne!(id(&r, "m", &raw), id(&r, "m", &other));
        assert_ne!(
            id(&r, "m", &raw),
            id(&Redactor::new([2; 32], &[]), "m", &raw)
        );
    }
}
