//! Decimal text to `f64`, exactly as `str::parse::<f64>` reads it.
//!
//! On the host this is `str::parse`. In the browser the grammar is checked here
//! and the digits are handed to the browser's own `parseFloat`, which rounds
//! correctly too: core's decimal-to-float tables (about 11 KB that do not
//! compress) and their code stay out of the UI's bundle.

/// `text` as a number, or `None` where `str::parse::<f64>` refuses it. The same
/// grammar: an optional sign, then `inf`, `infinity` or `nan` (any case), or
/// digits with at most one `.` and at least one digit, and an optional exponent
/// (`e` or `E`, an optional sign, digits). No spaces.
pub fn parse_f64(text: &str) -> Option<f64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        text.parse().ok()
    }
    #[cfg(target_arch = "wasm32")]
    {
        let (negative, body) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let special = match body.to_ascii_lowercase().as_str() {
            "inf" | "infinity" => Some(f64::INFINITY),
            "nan" => Some(f64::NAN),
            _ => None,
        };
        let value = match special {
            Some(v) => v,
            None if is_decimal(body) => js_sys::parse_float(body),
            None => return None,
        };
        Some(if negative { -value } else { value })
    }
}

/// Digits with at most one `.` and at least one digit, then an optional
/// exponent: the part of Rust's float grammar after the sign.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn is_decimal(body: &str) -> bool {
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(whole) && digits(fraction) && whole.len() + fraction.len() > 0;
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grammar check agrees with `str::parse::<f64>` on what it accepts.
    #[test]
    fn the_grammar_accepts_what_str_parse_accepts() {
        let cases = [
            "1", "1.", ".5", "0.90", "04", "1e5", "1E-3", "2.5e+7", "", ".", "e5", "1e", "1e+",
            "1.2.3", "1..2", "1 ", " 1", "0x10", "1_000", "١", "1e5.5", "--1", "+-1", "1f",
        ];
        for case in cases {
            for sign in ["", "+", "-"] {
                let text = format!("{sign}{case}");
                let body = text.strip_prefix(['+', '-']).unwrap_or(&text);
                let ours = is_decimal(body);
                assert_eq!(ours, text.parse::<f64>().is_ok(), "{text:?}");
            }
        }
        for special in ["inf", "INF", "Infinity", "nan", "NaN", "-inf", "+nan"] {
            assert!(special.parse::<f64>().is_ok(), "{special}");
            assert!(
                !is_decimal(special.trim_start_matches(['+', '-'])),
                "{special}"
            );
        }
    }
}
