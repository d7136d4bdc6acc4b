//! Single-flight fetching for components that refetch on news: one request
//! at a time, and when more are asked for while one runs, exactly one more
//! after it, so the last answer is never older than the last news.

use std::future::Future;

use leptos::prelude::*;
use leptos::task::spawn_local;

/// Sends a dialog's request: `sending` while it is out, and `error`
/// cleared; then `taken` when drainwatch took it, else `error` says why not.
/// A dialog closed meanwhile has no signals left: nothing more happens then.
pub(crate) fn send_from_dialog<T: 'static>(
    sending: RwSignal<bool>,
    error: RwSignal<Option<String>>,
    request: impl Future<Output = Result<T, String>> + 'static,
    taken: impl FnOnce() + 'static,
) {
    sending.set(true);
    error.set(None);
    spawn_local(async move {
        let result = request.await;
        if sending.try_set(false).is_some() {
            return;
        }
        match result {
            Ok(_) => taken(),
            Err(e) => {
                error.try_set(Some(e));
            }
        }
    });
}

/// A component's fetch bookkeeping. `Copy`; gone with the component that
/// made it, after which asking does nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SingleFlight {
    /// (a request runs, another was asked for meanwhile).
    busy: StoredValue<(bool, bool)>,
}

impl SingleFlight {
    pub(crate) fn new() -> Self {
        Self {
            busy: StoredValue::new((false, false)),
        }
    }

    /// Runs `job` now, or once after the running one ends. `job` answers
    /// whether its component still lives: when it does not, nothing follows.
    pub(crate) fn run<F, Fut>(self, job: F)
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = bool> + 'static,
    {
        if self.busy.try_get_value().is_none_or(|(running, _)| running) {
            self.busy.try_update_value(|b| b.1 = true);
            return;
        }
        self.busy.set_value((true, false));
        spawn_local(async move {
            if !job().await {
                return;
            }
            let again = self.busy.try_get_value().is_some_and(|(_, again)| again);
            self.busy.try_set_value((false, false));
            if again {
                self.run(job);
            }
        });
    }
}
