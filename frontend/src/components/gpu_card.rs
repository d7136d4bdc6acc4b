//! One GPU's card: name and health badge, memory (bar stacked by holder,
//! figures, idle baseline, foreign holders), utilisation, power, temperature,
//! clocks and link, MIG devices and the memory sparkline;
//! or, for a GPU NVML could not open, the reason.

use leptos::either::Either;
use leptos::prelude::*;
use shared::MemHolders;

use crate::components::mem_bar::MemBar;
use crate::components::sparkline::Sparkline;
use crate::gpu_markup;
use crate::health_markup;
use crate::state::AppState;

/// The card of GPU `index`, following the latest sample.
#[component]
pub(crate) fn GpuCard(
    /// NVML's index of the GPU this card shows.
    index: u32,
) -> impl IntoView {
    let state = AppState::get();
    let gpu = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .and_then(|s| s.gpus.iter().find(|g| g.index == index).cloned())
        })
    });
    // Who holds this GPU's memory, from the same sample's process list.
    let holders = Memo::new(move |_| {
        state.latest.with(|l| {
            l.as_ref()
                .and_then(|s| {
                    s.gpus
                        .iter()
                        .find(|g| g.index == index)
                        .map(|g| MemHolders::of(g, &s.processes))
                })
                .unwrap_or_default()
        })
    });
    let device_error = Memo::new(move |_| {
        gpu.with(|g| {
            g.as_ref().and_then(|g| {
                g.errors
                    .iter()
                    .find(|e| e.field == "device")
                    .map(|e| e.reason.clone())
            })
        })
    });

    let used = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_used_bytes)));
    let total = Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_total_bytes)));
    let baseline =
        Signal::derive(move || gpu.with(|g| g.as_ref().and_then(|g| g.mem_baseline_bytes)));

    // Health as text, redrawn only when the text changes (not every sample).
    let badge = Memo::new(move |_| gpu.with(|g| health_markup::badge(g.as_ref())));
    let health_line = Memo::new(move |_| gpu.with(|g| health_markup::line(g.as_ref())));
    let mig = Memo::new(move |_| gpu.with(|g| health_markup::mig(g.as_ref())));

    let readings = move || {
        view! {
            <div class="gpu-mem">
                <MemBar used=used total=total baseline=baseline holders=holders />
                <div class="mem-text" inner_html=move || gpu.with(|g| gpu_markup::mem_text(g.as_ref()))></div>
                // Always there, so the card keeps its height when a foreign
                // process comes or goes.
                <div class="holder-line" inner_html=move || holders.with(gpu_markup::holder_line)></div>
            </div>
            <div class="gpu-stats" inner_html=move || gpu.with(|g| gpu_markup::stats(g.as_ref()))></div>
            // Always there (one line), so cards keep their height as clocks move.
            <div class="gpu-health" data-testid="gpu-health" inner_html=move || health_line.get()></div>
            <div class="gpu-mig" data-testid="gpu-mig" inner_html=move || mig.get()></div>
            <Sparkline index=index total=total baseline=baseline />
        }
    };

    view! {
        <article
            class="gpu-card"
            class:gpu-unreadable=move || device_error.with(Option::is_some)
            data-testid="gpu-card"
            data-gpu-index=index.to_string()
        >
            <div class="gpu-head">
                <span class="gpu-head-main" inner_html=move || gpu.with(|g| gpu_markup::head(index, g.as_ref()))></span>
                <span class="health-slot" inner_html=move || badge.get()></span>
            </div>
            {move || match device_error.get() {
                Some(reason) => {
                    Either::Left(
                        view! {
                            <div class="gpu-error" data-testid="gpu-error" title=reason.clone()>
                                <span class="gpu-error-label">"NVML cannot read this GPU"</span>
                                <span class="gpu-error-reason">{reason.clone()}</span>
                            </div>
                        },
                    )
                }
                None => Either::Right(readings()),
            }}
        </article>
    }
}
