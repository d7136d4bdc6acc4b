//! The wall clock, in the unit the wire and the store carry: milliseconds since
//! the Unix epoch. The ground floor: it depends on nothing in the crate, and
//! everything that stamps a time reads it here.

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
