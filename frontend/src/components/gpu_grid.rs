//! The grid of GPU cards, one per GPU of the latest sample, or a line saying why
//! there is none.

use leptos::prelude::*;
use shared::NvmlStatus;

use crate::components::gpu_card::GpuCard;
use crate::state::AppState;

/// Every GPU, four to a row on a wide screen.
#[component]
pub(crate) fn GpuGrid() -> impl IntoView {
    let state = AppState::get();
    let indices = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .map(|s| s.gpus.iter().map(|g| g.index).collect::<Vec<u32>>())
                .unwrap_or_default()
        })
    });
    let empty_text = move || {
        state.host.with(|h| match h.as_ref().map(|h| &h.nvml) {
            None => "waiting for data…".to_owned(),
            Some(NvmlStatus::Unavailable { reason, .. }) => {
                format!("no GPU readings: NVML unavailable: {reason}")
            }
            Some(NvmlStatus::Ok { .. }) => {
                if state.latest.with(Option::is_none) {
                    "waiting for the first sample…".to_owned()
                } else {
                    "NVML reports no GPU on this host".to_owned()
                }
            }
        })
    };

    view! {
        <div class="gpu-grid" data-testid="gpu-grid">
            <For each=move || indices.get() key=|index| *index let:index>
                <GpuCard index=index />
            </For>
            <Show when=move || indices.with(Vec::is_empty)>
                <div class="gpu-empty" data-testid="gpu-empty">
                    {empty_text}
                </div>
            </Show>
        </div>
    }
}
