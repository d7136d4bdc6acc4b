//! Deep links: `?detail=ID` opens a restart's detail and `?dialog=KIND`
//! (restart, stop, start, adopt) opens the operation dialog once the server's
//! status is known; the throughput view keeps its choices there too. The page
//! keeps the query in step as they change ([`replace_query`], the only writer
//! of the page's URL), so a reload shows the same thing.

use leptos::prelude::window;

/// The value of `key` in a query string (`?a=1&b=2`, with or without the `?`).
pub(crate) fn param(search: &str, key: &str) -> Option<String> {
    search
        .trim_start_matches('?')
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_owned())
}

/// `search` with `key` set to `value`, or removed when `None`; other
/// parameters keep their order. Returns "" or "?…". Values here are plain
/// words and numbers, so nothing is percent-encoded.
pub(crate) fn with_param(search: &str, key: &str, value: Option<&str>) -> String {
    let mut pairs: Vec<String> = search
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| p.split('=').next() != Some(key))
        .map(str::to_owned)
        .collect();
    if let Some(v) = value {
        pairs.push(format!("{key}={v}"));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
}

/// `search` with each of `pairs` set (or removed when `None`), in order.
pub(crate) fn with_params(search: &str, pairs: &[(&str, Option<String>)]) -> String {
    pairs.iter().fold(search.to_owned(), |s, (key, value)| {
        with_param(&s, key, value.as_deref())
    })
}

/// Writes `pairs` into the page's query, keeping its other parameters,
/// without a new history entry.
pub(crate) fn replace_query(pairs: &[(&str, Option<String>)]) {
    let location = window().location();
    let search = with_params(&location.search().unwrap_or_default(), pairs);
    let url = format!("{}{search}", location.pathname().unwrap_or_default());
    if let Ok(history) = window().history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_parameters() {
        assert_eq!(
            param("?detail=12&dialog=restart", "detail").as_deref(),
            Some("12")
        );
        assert_eq!(
            param("detail=12&dialog=restart", "dialog").as_deref(),
            Some("restart")
        );
        assert_eq!(param("?detailx=1", "detail"), None);
        assert_eq!(param("", "detail"), None);
        assert_eq!(param("?flag", "flag").as_deref(), Some(""));
    }

    #[test]
    fn writes_parameters() {
        assert_eq!(with_param("", "detail", Some("3")), "?detail=3");
        assert_eq!(
            with_param("?a=1&detail=2", "detail", Some("3")),
            "?a=1&detail=3"
        );
        assert_eq!(with_param("?detail=2", "detail", None), "");
        assert_eq!(with_param("?detail=2&a=1", "detail", None), "?a=1");
        assert_eq!(
            with_params(
                "?a=1&detail=2",
                &[("detail", None), ("dialog", Some("stop".to_owned()))]
            ),
            "?a=1&dialog=stop"
        );
    }
}
