//! Number formatting for humans: bytes, power, temperature, percentages and
//! durations, each with its unit. The browser UI shows only what these return, so
//! what a test reads on screen is what these functions' tests pin down.

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;

/// Bytes, binary units: whole MiB below 1 GiB ("4 MiB", "512 MiB"), one decimal
/// from 1 GiB ("87.9 GiB") and from 1 TiB ("1.5 TiB"). A non-zero amount under
/// 1 MiB is "<1 MiB", so it never reads as nothing.
pub fn fmt_bytes(bytes: u64) -> String {
    if bytes == 0 {
        return "0 MiB".to_owned();
    }
    if bytes < MIB {
        return "<1 MiB".to_owned();
    }
    // Rounded to the unit shown, so 1023.6 MiB reads "1.0 GiB", not "1024 MiB".
    let mib = bytes.saturating_add(MIB / 2) / MIB;
    if mib < 1024 {
        return format!("{mib} MiB");
    }
    let gib_tenths = (bytes as u128 * 10 + GIB as u128 / 2) / GIB as u128;
    if gib_tenths < 10240 {
        return format!("{}.{} GiB", gib_tenths / 10, gib_tenths % 10);
    }
    let tib_tenths = (bytes as u128 * 10 + TIB as u128 / 2) / TIB as u128;
    format!("{}.{} TiB", tib_tenths / 10, tib_tenths % 10)
}

/// Used against total, e.g. "87.9 GiB / 96.0 GiB".
pub fn fmt_bytes_of(used: u64, total: u64) -> String {
    format!("{} / {}", fmt_bytes(used), fmt_bytes(total))
}

/// Milliwatts as watts: one decimal below 10 W ("7.5 W"), whole watts above ("312 W").
pub fn fmt_power_mw(mw: u32) -> String {
    let tenths = (u64::from(mw) + 50) / 100;
    if tenths < 100 {
        format!("{}.{} W", tenths / 10, tenths % 10)
    } else {
        format!("{} W", (u64::from(mw) + 500) / 1000)
    }
}

/// Degrees Celsius, e.g. "54 °C".
pub fn fmt_temp_c(celsius: u32) -> String {
    format!("{celsius} °C")
}

/// A percentage, e.g. "87 %".
pub fn fmt_percent(percent: u32) -> String {
    format!("{percent} %")
}

/// A duration in milliseconds, for ages and delays: "0.5 s", "4.2 s" below 10 s,
/// "42 s" below a minute, "3 min 05 s" below an hour, "2 h 03 min" above.
pub fn fmt_age_ms(ms: u64) -> String {
    let tenths = ms.saturating_add(50) / 100;
    if tenths < 100 {
        return format!("{}.{} s", tenths / 10, tenths % 10);
    }
    let secs = ms.saturating_add(500) / 1000;
    if secs < 60 {
        return format!("{secs} s");
    }
    if secs < 3600 {
        return format!("{} min {:02} s", secs / 60, secs % 60);
    }
    let mins = (secs + 30) / 60;
    format!("{} h {:02} min", mins / 60, mins % 60)
}

/// What share of `total` `part` is, as a fraction clamped to 0..=1 (0 when
/// `total` is 0): for bar widths.
pub fn fraction(part: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (part as f64 / total as f64).clamp(0.0, 1.0)
}

/// What a number that is not known reads as.
pub const MISSING: &str = "—";

/// Tokens per second as a number: whole from 100, one decimal below.
pub fn tok_num(v: f64) -> String {
    if !v.is_finite() {
        MISSING.to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// "612 tok/s", "4.2 tok/s", "— tok/s".
pub fn fmt_tok_s(v: Option<f64>) -> String {
    format!("{} tok/s", v.map_or_else(|| MISSING.to_owned(), tok_num))
}

/// Milliseconds as a number: whole from 100, one decimal from 10, two below.
pub fn ms_num(v: f64) -> String {
    if !v.is_finite() {
        MISSING.to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A rate of requests, without its unit: whole from 10 on or when whole,
/// else one decimal ("2.5", "8", "40").
pub fn rate_num(r: f64) -> String {
    if !r.is_finite() {
        MISSING.to_owned()
    } else if r >= 9.95 || r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// "48.5 ms", "— ms".
pub fn fmt_ms(v: Option<f64>) -> String {
    format!("{} ms", v.map_or_else(|| MISSING.to_owned(), ms_num))
}

/// "41.2 / 88 ms": a p50 and a p99.
pub fn fmt_ms_pair(p50: f64, p99: f64) -> String {
    format!("{} / {} ms", ms_num(p50), ms_num(p99))
}

/// Milliseconds as seconds with one decimal ("4.2 s"), "—" when unknown.
pub fn fmt_secs(ms: Option<u64>) -> String {
    match ms {
        Some(ms) => {
            let tenths = ms.saturating_add(50) / 100;
            format!("{}.{} s", tenths / 10, tenths % 10)
        }
        None => MISSING.to_owned(),
    }
}

/// At most `max` characters, with "…" when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rates_are_short() {
        assert_eq!(rate_num(2.5), "2.5");
        assert_eq!(rate_num(8.0), "8");
        assert_eq!(rate_num(9.96), "10");
        assert_eq!(rate_num(39.97), "40");
        assert_eq!(rate_num(f64::NAN), MISSING);
    }

    #[test]
    fn bytes_below_a_gib_are_whole_mib() {
        assert_eq!(fmt_bytes(0), "0 MiB");
        assert_eq!(fmt_bytes(1), "<1 MiB");
        assert_eq!(fmt_bytes(MIB - 1), "<1 MiB");
        assert_eq!(fmt_bytes(MIB), "1 MiB");
        assert_eq!(fmt_bytes(4 * MIB), "4 MiB");
        assert_eq!(fmt_bytes(512 * MIB), "512 MiB");
        assert_eq!(fmt_bytes(1023 * MIB), "1023 MiB");
    }

    #[test]
    fn bytes_from_a_gib_have_one_decimal() {
        assert_eq!(fmt_bytes(GIB), "1.0 GiB");
        // 1023.6 MiB rounds to 1024 MiB: shown as a GiB, not "1024 MiB".
        assert_eq!(fmt_bytes(1023 * MIB + 600 * 1024), "1.0 GiB");
        assert_eq!(fmt_bytes(96 * GIB), "96.0 GiB");
        assert_eq!(fmt_bytes(87 * GIB + 900 * MIB), "87.9 GiB");
        assert_eq!(fmt_bytes(GIB + GIB / 2), "1.5 GiB");
        assert_eq!(fmt_bytes(141 * GIB), "141.0 GiB");
    }

    #[test]
    fn bytes_from_a_tib() {
        assert_eq!(fmt_bytes(TIB), "1.0 TiB");
        assert_eq!(fmt_bytes(TIB + TIB / 2), "1.5 TiB");
        assert_eq!(fmt_bytes(TIB - 1), "1.0 TiB");
        assert_eq!(fmt_bytes(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn used_of_total() {
        assert_eq!(fmt_bytes_of(4 * MIB, 96 * GIB), "4 MiB / 96.0 GiB");
    }

    #[test]
    fn power_in_watts() {
        assert_eq!(fmt_power_mw(0), "0.0 W");
        assert_eq!(fmt_power_mw(7_500), "7.5 W");
        assert_eq!(fmt_power_mw(9_949), "9.9 W");
        assert_eq!(fmt_power_mw(9_950), "10 W");
        assert_eq!(fmt_power_mw(312_400), "312 W");
        assert_eq!(fmt_power_mw(600_000), "600 W");
        assert_eq!(fmt_power_mw(u32::MAX), "4294967 W");
    }

    #[test]
    fn temperature_and_percent() {
        assert_eq!(fmt_temp_c(54), "54 °C");
        assert_eq!(fmt_percent(0), "0 %");
        assert_eq!(fmt_percent(100), "100 %");
    }

    #[test]
    fn ages() {
        assert_eq!(fmt_age_ms(0), "0.0 s");
        assert_eq!(fmt_age_ms(500), "0.5 s");
        assert_eq!(fmt_age_ms(4_230), "4.2 s");
        assert_eq!(fmt_age_ms(9_949), "9.9 s");
        assert_eq!(fmt_age_ms(9_950), "10 s");
        assert_eq!(fmt_age_ms(42_000), "42 s");
        assert_eq!(fmt_age_ms(59_499), "59 s");
        assert_eq!(fmt_age_ms(59_500), "1 min 00 s");
        assert_eq!(fmt_age_ms(185_000), "3 min 05 s");
        assert_eq!(fmt_age_ms(3_600_000), "1 h 00 min");
        assert_eq!(fmt_age_ms(7_380_000), "2 h 03 min");
        assert!(fmt_age_ms(u64::MAX).ends_with(" min"));
    }

    #[test]
    fn fractions_are_clamped() {
        assert_eq!(fraction(1, 0), 0.0);
        assert_eq!(fraction(0, 10), 0.0);
        assert_eq!(fraction(5, 10), 0.5);
        assert_eq!(fraction(20, 10), 1.0);
    }

    #[test]
    fn throughput_latency_and_seconds() {
        assert_eq!(fmt_tok_s(Some(612.4)), "612 tok/s");
        assert_eq!(fmt_tok_s(Some(4.25)), "4.2 tok/s");
        assert_eq!(fmt_tok_s(None), "— tok/s");
        assert_eq!(fmt_ms(Some(48.46)), "48.5 ms");
        assert_eq!(fmt_ms(None), "— ms");
        assert_eq!(fmt_ms_pair(41.25, 88.0), "41.2 / 88.0 ms");
        assert_eq!(fmt_ms_pair(8.5, 120.4), "8.50 / 120 ms");
        assert_eq!(fmt_secs(None), "—");
        assert_eq!(fmt_secs(Some(0)), "0.0 s");
        assert_eq!(fmt_secs(Some(65)), "0.1 s");
        assert_eq!(fmt_secs(Some(8089)), "8.1 s");
        assert_eq!(fmt_secs(Some(91_000)), "91.0 s");
    }

    #[test]
    fn truncation() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "ab…");
        assert_eq!(truncate("ééé", 2), "é…");
    }
}
