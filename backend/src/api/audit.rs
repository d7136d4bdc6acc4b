//! The audit log as the HTTP surface writes it: what an operator did outside
//! an operation (the manager audits operations itself), the refusals no handler
//! audited (for `refusals`), and the [`Audited`] mark a handler that wrote its
//! own entry puts on its response.

use axum::response::Response;

use super::state::AppState;
use crate::auth::Caller;
use crate::store::AuditEntry;

/// On a response whose handler already wrote the audit entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Audited;

/// Marks `res` as audited.
pub(super) fn audited(mut res: Response) -> Response {
    res.extensions_mut().insert(Audited);
    res
}

/// Audits what an operator did outside an operation (benchmarks, flag-set
/// labels): `result` is the outcome, or why it was refused.
pub(super) fn record(
    state: &AppState,
    caller: &Caller,
    action: &str,
    request: String,
    result: Result<String, &str>,
) {
    let Some(store) = &state.store else { return };
    let (outcome, detail) = match result {
        Ok(outcome) => (outcome, String::new()),
        Err(why) => ("refused".to_owned(), why.to_owned()),
    };
    store.audit(AuditEntry {
        at_ms: crate::clock::now_ms(),
        peer: caller.who(),
        action: action.to_owned(),
        request,
        outcome,
        detail,
        count: 1,
        ..Default::default()
    });
}

/// Counts a refusal that reached no auditing handler into `who`'s row for the
/// minute; `detail` is its status and a class of reason, never the input.
pub(super) fn record_refusal(state: &AppState, who: String, action: String, detail: String) {
    let Some(store) = &state.store else { return };
    store.refused(AuditEntry {
        at_ms: crate::clock::now_ms(),
        peer: who,
        action,
        detail,
        ..Default::default()
    });
}
