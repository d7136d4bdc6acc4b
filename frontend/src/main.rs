//! drainwatch's browser UI: mounts [`app::App`] on the page's body. Everything else
//! lives in the modules below; see `app.rs` for the layout.

// `#[component]` derives a props builder with `pub` methods, which a binary
// crate cannot reach; everything written by hand here is `pub(crate)`.
mod api;
#[allow(unreachable_pub)]
mod app;
mod base;
mod campaign;
#[allow(unreachable_pub)]
mod components;
mod deeplink;
mod fetch;
mod flags;
#[allow(unreachable_pub)]
mod fleet;
mod gpu_markup;
mod health_markup;
mod json;
mod ledger;
mod localtime;
mod markup;
mod ops;
mod series;
mod sort;
mod state;
mod wire;
mod ws;

fn main() {
    // No panic hook: the bundle is built with `-Cpanic=immediate-abort`, where a
    // panic traps before any hook could run.
    // A hub serves this same page at `/fleet`.
    let path = leptos::prelude::window()
        .location()
        .pathname()
        .unwrap_or_default();
    if path == "/fleet" {
        leptos::mount::mount_to_body(fleet::FleetApp);
    } else {
        leptos::mount::mount_to_body(app::App);
    }
}
