//! The restart history as messages arrive: records replaced by id and kept
//! newest first, and a row for the running operation until its record comes.

use shared::restart::{Outcome, RestartSummary, ServerStatus};

/// The history keeps at most this many restarts (the backend sends 20).
pub(crate) const MAX_RESTARTS: usize = 100;

/// Puts `summary` into the history, newest (highest id) first: replaces the
/// record with its id, or inserts it in order. Keeps at most [`MAX_RESTARTS`].
pub(crate) fn upsert_restart(list: &mut Vec<RestartSummary>, summary: RestartSummary) {
    shared::restart::upsert_summary(list, summary, MAX_RESTARTS);
}

/// The history row of the operation `status` says is running: the backend
/// sends a `Restart` record only once an operation ends, so the row of a
/// running one is made from the status until then.
pub(crate) fn running_summary(status: &ServerStatus) -> Option<RestartSummary> {
    let op = status.operation.as_ref()?;
    Some(RestartSummary {
        id: op.id,
        kind: op.kind,
        requested_by: op.requested_by.clone(),
        started_at_ms: op.started_at_ms,
        finished_at_ms: None,
        from_flags: op.from_flags.clone(),
        to_flags: op.to_flags.clone(),
        outcome: Outcome::Running,
        failure: None,
        durations: Default::default(),
    })
}

/// Adds the running operation of `status` to the history unless its record
/// is there already (a record from the backend always wins). True when it
/// added one.
pub(crate) fn note_running(list: &mut Vec<RestartSummary>, status: &ServerStatus) -> bool {
    match running_summary(status) {
        Some(summary) if list.iter().all(|r| r.id != summary.id) => {
            upsert_restart(list, summary);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::ServerMsg;
    use shared::restart::OpKind;

    fn summary(id: i64, outcome: Outcome) -> RestartSummary {
        RestartSummary {
            id,
            kind: OpKind::Restart,
            requested_by: String::new(),
            started_at_ms: id as u64,
            finished_at_ms: None,
            from_flags: Default::default(),
            to_flags: Default::default(),
            outcome,
            failure: None,
            durations: Default::default(),
        }
    }

    #[test]
    fn a_running_operation_gets_a_row_until_its_record_arrives() {
        let mut status: ServerStatus =
            serde_json::from_str(include_str!("../../../shared/tests/fixtures/server.json"))
                .map(|m: ServerMsg| match m {
                    ServerMsg::Server(s) => s,
                    _ => unreachable!("the fixture is a server message"),
                })
                .expect("fixture");
        let mut list = vec![summary(6, Outcome::Succeeded)];
        note_running(&mut list, &status);
        assert_eq!(list.len(), 1, "no operation, no row");
        status.operation = Some(shared::restart::Operation {
            id: 7,
            kind: OpKind::Restart,
            started_at_ms: 5,
            requested_by: "me".to_owned(),
            from_flags: Default::default(),
            to_flags: Default::default(),
        });
        note_running(&mut list, &status);
        assert_eq!((list[0].id, list[0].outcome), (7, Outcome::Running));
        // The backend's record replaces it, and a late status does not undo that.
        upsert_restart(&mut list, summary(7, Outcome::Failed));
        note_running(&mut list, &status);
        assert_eq!((list.len(), list[0].outcome), (2, Outcome::Failed));
    }

    #[test]
    fn restarts_are_replaced_by_id_and_kept_newest_first() {
        let mut list = vec![summary(5, Outcome::Running), summary(3, Outcome::Failed)];
        upsert_restart(&mut list, summary(5, Outcome::Succeeded));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].outcome, Outcome::Succeeded);
        upsert_restart(&mut list, summary(6, Outcome::Running));
        upsert_restart(&mut list, summary(4, Outcome::Running));
        upsert_restart(&mut list, summary(1, Outcome::Running));
        let ids: Vec<i64> = list.iter().map(|r| r.id).collect();
        assert_eq!(ids, [6, 5, 4, 3, 1]);
        for id in 10..200 {
            upsert_restart(&mut list, summary(id, Outcome::Running));
        }
        assert_eq!(list.len(), MAX_RESTARTS);
        assert_eq!(list[0].id, 199);
    }
}
