//! The browser's clock and time zone: the current time, and Unix milliseconds as
//! the viewer's local wall-clock time.

use web_sys::js_sys::Date;
use web_sys::wasm_bindgen::JsValue;

/// Now, in Unix milliseconds, by the browser's clock.
pub(crate) fn now_ms() -> f64 {
    Date::now()
}

fn date(ms: u64) -> Date {
    Date::new(&JsValue::from_f64(ms as f64))
}

/// Local time of day, "HH:MM:SS".
pub(crate) fn hms(ms: u64) -> String {
    let d = date(ms);
    format!(
        "{:02}:{:02}:{:02}",
        d.get_hours(),
        d.get_minutes(),
        d.get_seconds()
    )
}

/// Local date and time with the zone's offset, "2025-12-02 15:10:03 UTC+01:00".
pub(crate) fn full(ms: u64) -> String {
    let d = date(ms);
    // getTimezoneOffset is minutes *behind* UTC: UTC+1 gives -60.
    let offset = -(d.get_timezone_offset() as i64);
    let sign = if offset < 0 { '-' } else { '+' };
    let offset = offset.abs();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC{sign}{:02}:{:02}",
        d.get_full_year(),
        d.get_month() + 1,
        d.get_date(),
        d.get_hours(),
        d.get_minutes(),
        d.get_seconds(),
        offset / 60,
        offset % 60
    )
}
