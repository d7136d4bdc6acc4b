//! A benchmark's settings as a request or a plan changes them: the config's
//! defaults with the changes on top, checked. One rule for the API's
//! benchmark, the CLI's and a campaign plan's.

use shared::bench::BenchSettings;

/// Why changed settings are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("send the settings to change as a JSON object")]
    NotAnObject,
    /// serde's own message would quote the value, and these are audited.
    #[error(
        "invalid settings: a field is unknown or of the wrong type (the fields: api, \
         concurrency, num_prompts, input_len, output_len, warmup, repeats, correctness, \
         request_rate, burstiness, max_concurrency, slo, seed, dataset, prefix_groups, \
         prefix_len)"
    )]
    Shape,
    /// The settings' own bounds ([`BenchSettings::validate`]).
    #[error("{0}")]
    Invalid(String),
}

/// `defaults` with `changes` (a JSON object) on top, checked.
pub fn with_changes(
    defaults: &BenchSettings,
    changes: &serde_json::Value,
) -> Result<BenchSettings, SettingsError> {
    let serde_json::Value::Object(changes) = changes else {
        return Err(SettingsError::NotAnObject);
    };
    let mut base = serde_json::to_value(defaults).map_err(|_| SettingsError::Shape)?;
    if let serde_json::Value::Object(b) = &mut base {
        b.extend(changes.clone());
    }
    let s: BenchSettings = serde_json::from_value(base).map_err(|_| SettingsError::Shape)?;
    s.validate().map_err(SettingsError::Invalid)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_go_on_top_and_bad_ones_are_refused_without_their_value() {
        let d = BenchSettings::default();
        let s = with_changes(&d, &serde_json::json!({"repeats": 5})).expect("valid");
        assert_eq!((s.repeats, s.input_len), (5, d.input_len));
        assert_eq!(
            with_changes(&d, &serde_json::json!([1])),
            Err(SettingsError::NotAnObject)
        );
        let e = with_changes(&d, &serde_json::json!({"repeats": "s3cr3t"})).expect_err("type");
        assert_eq!(e, SettingsError::Shape);
        assert!(!e.to_string().contains("s3cr3t"));
        let e = with_changes(&d, &serde_json::json!({"repeats": 0})).expect_err("bounds");
        assert!(matches!(e, SettingsError::Invalid(_)), "{e}");
    }
}
