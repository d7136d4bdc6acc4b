//! The line under the server's head while an operation runs: which operation,
//! the phase it is in, how long it has been there (ticking with the page's
//! clock) and how long that phase typically takes, with a bar against that
//! typical time. The line's space is kept when no operation runs.

use leptos::prelude::*;
use shared::restart::{Phase, ServerStatus};
use shared::units::fmt_age_ms;

use crate::components::phase_badge::PhaseBadge;
use crate::state::AppState;

/// What the line shows: operation and record id, phase, when the phase began,
/// and its typical duration.
#[derive(Debug, Clone, PartialEq)]
struct Stage {
    kind: &'static str,
    id: i64,
    /// Who asked for it (token name and address, or the address).
    who: String,
    phase: Phase,
    since_ms: u64,
    typical_ms: Option<u64>,
}

fn stage(s: &ServerStatus) -> Option<Stage> {
    let op = s.operation.as_ref()?;
    Some(Stage {
        kind: op.kind.as_str(),
        id: op.id,
        who: op.requested_by.clone(),
        phase: s.phase,
        since_ms: s.phase_since_ms,
        // Launching is timed together with the warm-up (spawn → ready).
        typical_ms: s
            .typical_ms
            .get(&match s.phase {
                Phase::Launching => Phase::WarmingUp,
                p => p,
            })
            .copied(),
    })
}

/// The progress of the running operation, or an empty line.
#[component]
pub(crate) fn StageProgress() -> impl IntoView {
    let state = AppState::get();
    let current = Memo::new(move |_| state.server.with(|s| s.as_ref().and_then(stage)));
    let elapsed = move |since: u64| (state.now_ms.get() - since as f64).max(0.0) as u64;

    view! {
        <div class="stage-slot">
            {move || {
                current
                    .get()
                    .map_or_else(
                        || view! { <div class="stage-idle">"no operation running"</div> }.into_any(),
                        |st| {
                        let phase = st.phase;
                        let since = st.since_ms;
                        let typical = st.typical_ms;
                        view! {
                            <div
                                class="stage-progress"
                                data-testid="stage-progress"
                                data-phase=phase.as_str()
                            >
                                <span class="stage-op">{format!("{} #{}", st.kind, st.id)}</span>
                                <span class="stage-who" data-testid="stage-who" title=st.who.clone()>
                                    {format!("by {}", st.who)}
                                </span>
                                <PhaseBadge phase=phase />
                                <span class="stage-elapsed num" data-testid="stage-elapsed">
                                    {move || format!("{} in this phase", fmt_age_ms(elapsed(since)))}
                                </span>
                                <span class="stage-typical" data-testid="stage-typical">
                                    {typical
                                        .map_or_else(
                                            || "no typical time yet".to_owned(),
                                            |t| format!("typically {}", fmt_age_ms(t)),
                                        )}
                                </span>
                                <span class="stage-bar">
                                    <span
                                        class="stage-fill"
                                        class:stage-over=move || {
                                            typical.is_some_and(|t| elapsed(since) > t)
                                        }
                                        style:width=move || match typical {
                                            Some(t) if t > 0 => {
                                                format!(
                                                    "{:.1}%",
                                                    (elapsed(since) as f64 / t as f64).min(1.0) * 100.0,
                                                )
                                            }
                                            _ => "0%".to_owned(),
                                        }
                                    ></span>
                                </span>
                            </div>
                        }
                        .into_any()
                    },
                )
            }}
        </div>
    }
}
