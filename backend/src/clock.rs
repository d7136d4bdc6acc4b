//! The wall clock, in the unit the wire and the store carry: milliseconds since
//! the Unix epoch; and durations as people write them (`90s`, `10m`). The
//! ground floor: it depends on nothing in the crate, and everything that stamps
//! a time or reads a duration does it here.

use std::time::Duration;

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A duration as written that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a duration (try 90s, 10m, 1h)")]
    NotANumber(String),
    #[error("unknown unit `{unit}` in `{written}` (use ms, s, m or h)")]
    UnknownUnit { unit: String, written: String },
}

/// Parses `90s`, `10m`, `1h`, `1500ms` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| DurationError::NotANumber(s.to_owned()))?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.saturating_mul(1_000),
        "m" | "min" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        other => {
            return Err(DurationError::UnknownUnit {
                unit: other.to_owned(),
                written: s.to_owned(),
            });
        }
    };
    Ok(Duration::from_millis(ms))
}
