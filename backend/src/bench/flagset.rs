//! A flag set's identity: the canonical form of what the server ran with (model,
//! every allow-listed flag's effective value, sorted) and its SHA-256, cut to 12
//! hex digits. Two launches with the same canonical form are the same set,
//! whatever order their flags were given in.

use sha2::{Digest, Sha256};
use shared::restart::Flags;

/// The canonical JSON text: `{"flags":{…sorted…},"model":"…"}`.
pub fn canonical(model: &str, flags: &Flags) -> String {
    let flags: std::collections::BTreeMap<&str, &str> =
        flags.iter().map(|(k, v)| (k.trim(), v.trim())).collect();
    serde_json::json!({ "flags": flags, "model": model.trim() }).to_string()
}

/// The set's id.
pub fn id(model: &str, flags: &Flags) -> String {
    let digest = Sha256::digest(canonical(model, flags).as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_does_not_matter_values_do() {
        let a: Flags = [("--tp", "8"), ("X", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut b = Flags::new();
        b.insert("X".into(), "1".into());
        b.insert("--tp".into(), "8".into());
        assert_eq!(id("m", &a), id("m", &b));
        assert_eq!(id("m", &a).len(), 12);
        b.insert("--tp".into(), "4".into());
        assert_ne!(id("m", &a), id("m", &b));
        assert_ne!(id("m", &a), id("other", &a));
        assert_eq!(
            canonical("m", &a),
            r#"{"flags":{"--tp":"8","X":"1"},"model":"m"}"#
        );
    }
}
