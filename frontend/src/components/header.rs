//! The top bar: product name, host, drainwatch's version, NVML's status, the
//! "simulated host" pill when the numbers are not from a real GPU, and the
//! connection badge.

use leptos::prelude::*;
use shared::NvmlStatus;

use crate::components::conn_badge::ConnBadge;
use crate::state::AppState;

/// "12.8" from NVML's CUDA driver version encoding (12080).
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// What the NVML status shows: text, tooltip, `data-state`.
fn nvml_text(nvml: Option<&NvmlStatus>) -> (String, String, &'static str) {
    match nvml {
        None => (
            "NVML …".to_owned(),
            "waiting for the server".to_owned(),
            "unknown",
        ),
        Some(NvmlStatus::Ok {
            library,
            driver_version,
            nvml_version,
            cuda_driver_version,
            ..
        }) => {
            let mut parts = Vec::new();
            if let Some(d) = driver_version {
                parts.push(format!("driver {d}"));
            }
            if let Some(c) = cuda_driver_version {
                parts.push(format!("CUDA {}", cuda_version(*c)));
            }
            if let Some(n) = nvml_version {
                parts.push(format!("NVML {n}"));
            }
            if parts.is_empty() {
                parts.push("NVML ok".to_owned());
            }
            (parts.join(" · "), format!("NVML library: {library}"), "ok")
        }
        Some(NvmlStatus::Unavailable { library, reason }) => (
            format!("NVML unavailable: {reason}"),
            format!("NVML library: {library}\n{reason}"),
            "unavailable",
        ),
    }
}

/// The page's top bar.
#[component]
pub(crate) fn Header() -> impl IntoView {
    let state = AppState::get();
    let hostname = move || {
        state.host.with(|h| {
            h.as_ref()
                .map_or_else(|| "…".to_owned(), |h| h.hostname.clone())
        })
    };
    let version = move || {
        state.host.with(|h| {
            h.as_ref()
                .map_or_else(String::new, |h| format!("v{}", h.version))
        })
    };
    let nvml = Memo::new(move |_| state.host.with(|h| nvml_text(h.as_ref().map(|h| &h.nvml))));
    let simulated = Memo::new(move |_| {
        state
            .host
            .with(|h| h.as_ref().is_some_and(|h| h.nvml.is_simulated()))
    });

    view! {
        <header class="topbar" data-testid="header">
            <span class="brand">"drainwatch"</span>
            <span class="host" data-testid="hostname" title="host">
                {hostname}
            </span>
            <span class="version" data-testid="version" title="drainwatch version">
                {version}
            </span>
            <span
                class="nvml"
                class:nvml-error=move || nvml.with(|n| n.2 == "unavailable")
                data-testid="nvml-status"
                data-state=move || nvml.with(|n| n.2)
                title=move || nvml.with(|n| n.1.clone())
            >
                {move || nvml.with(|n| n.0.clone())}
            </span>
            <span class="topbar-right">
                <span class="simulated-slot">
                    <Show when=move || simulated.get()>
                        <span
                            class="simulated"
                            data-testid="simulated-banner"
                            title="NVML is drainwatch's simulated host: GPUs, memory and processes are made up"
                        >
                            "simulated host · numbers are simulated, not from a real GPU"
                        </span>
                    </Show>
                </span>
                <ConnBadge />
            </span>
        </header>
    }
}
