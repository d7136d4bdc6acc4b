//! The UI's files, embedded in the binary at build time (read from disk in debug
//! builds). Unhashed names, so every response revalidates by ETag.

use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "../frontend/dist/"]
#[allow_missing = true]
struct Ui;

/// What the server shows when it was built without the UI.
const NO_UI: &str = "<!doctype html><meta charset=utf-8><title>drainwatch</title>\
<p>drainwatch is running, but this build has no UI: build it with <code>cargo xtask build</code>. \
The API is at <a href=/api/state>/api/state</a>.</p>";

pub(crate) async fn serve(uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    let Some(file) = Ui::get(path) else {
        if path == "index.html" {
            return Html(NO_UI).into_response();
        }
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let etag = format!("\"{}\"", hex(&file.metadata.sha256_hash()[..12]));
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mime = file.metadata.mimetype().to_owned();
    let mut resp = (StatusCode::OK, file.data.into_owned()).into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&mime) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
