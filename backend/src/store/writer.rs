//! The writer thread: the only place rows are written. Writes arrive on a
//! channel and are committed in one transaction at most [`BATCH`] after the
//! first; an operation's creation, a launched server's record and a flush
//! commit at once.

use std::sync::mpsc;
use std::time::Instant;

use rusqlite::{Connection, params};

use super::codec::{name, text};
use super::{
    AuditEntry, AuditKind, BATCH, Instance, MAX_AUDIT_REQUEST, MAX_AUDIT_TEXT, StoreError, Write,
    bench, campaign, cut, health,
};

/// Actions kept in the audit log (the newest; a day of a busy team is a few
/// hundred).
#[cfg(not(test))]
pub(super) const MAX_AUDIT: i64 = 100_000;
#[cfg(test)]
pub(super) const MAX_AUDIT: i64 = 1_500;
/// Rows of refusals kept (one per caller per minute): a stranger rotating
/// through addresses fills these, never the actions, and at most about
/// 2,000 × 1 KiB of disk.
#[cfg(not(test))]
pub(super) const MAX_REFUSAL_ROWS: i64 = 2_000;
#[cfg(test)]
pub(super) const MAX_REFUSAL_ROWS: i64 = 50;

/// The writer thread: applies writes in transactions of at most [`BATCH`].
pub(super) fn run(mut conn: Connection, rx: mpsc::Receiver<Write>) {
    while let Ok(first) = rx.recv() {
        let deadline = Instant::now() + BATCH;
        let mut replies: Vec<Box<dyn FnOnce(bool) + Send>> = Vec::new();
        let result = (|| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            let mut next = Some(first);
            let mut audited = false;
            while let Some(w) = next.take() {
                audited |= matches!(w, Write::Audit(_) | Write::Refused(_));
                // A launched server's record is committed at once: a drainwatch
                // killed right after the launch must find its server again.
                let urgent = matches!(
                    w,
                    Write::Begin { .. }
                        | Write::Instance(_)
                        | Write::Members(..)
                        | Write::Flush(_)
                        | Write::BenchBegin { .. }
                        | Write::FlagEdit { .. }
                        | Write::Campaign(campaign::CampaignWrite::Begin { .. })
                );
                apply(&tx, w, &mut replies)?;
                if urgent {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                next = rx.recv_timeout(left).ok();
            }
            if audited {
                trim_audit(&tx)?;
            }
            tx.commit()
        })();
        if let Err(e) = &result {
            tracing::error!(error = %e, "writing the history failed");
        }
        for r in replies {
            r(result.is_ok());
        }
    }
}

/// Keeps the newest [`MAX_AUDIT`] actions and [`MAX_REFUSAL_ROWS`] refusal
/// rows; each part's volume never pushes out the other.
fn trim_audit(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    for (kind, keep) in [
        (AuditKind::Action, MAX_AUDIT),
        (AuditKind::Refusals, MAX_REFUSAL_ROWS),
    ] {
        tx.execute(
            "DELETE FROM audit WHERE kind = ?1 AND id <= (
                 SELECT id FROM audit WHERE kind = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
            params![kind.as_str(), keep],
        )?;
    }
    Ok(())
}

fn apply(
    tx: &rusqlite::Transaction<'_>,
    w: Write,
    replies: &mut Vec<Box<dyn FnOnce(bool) + Send>>,
) -> rusqlite::Result<()> {
    match w {
        Write::Begin {
            kind,
            requested_by,
            from,
            to,
            at_ms,
            reply,
        } => {
            tx.execute(
                "INSERT INTO restarts (kind, requested_by, started_at_ms, from_flags, to_flags, outcome)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'running')",
                params![name(&kind), requested_by, at_ms as i64, text(&from), text(&to)],
            )?;
            let id = tx.last_insert_rowid();
            replies.push(new_id(reply, id));
        }
        Write::Transition(id, t, marker) => {
            tx.execute(
                "INSERT INTO transitions (restart_id, at_ms, phase, note, marker) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, t.at_ms as i64, name(&t.phase), t.note, marker.map(|m| name(&m))],
            )?;
        }
        Write::Point(id, p) => {
            tx.execute(
                "INSERT INTO timeline (restart_id, at_ms, phase, mem, running) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, p.at_ms as i64, name(&p.phase), text(&p.mem_used_bytes), p.running_requests],
            )?;
        }
        Write::Finish {
            id,
            at_ms,
            outcome,
            failure,
            durations,
        } => {
            tx.execute(
                "UPDATE restarts SET finished_at_ms = ?2, outcome = ?3, failure = ?4, durations = ?5 WHERE id = ?1",
                params![id, at_ms as i64, name(&outcome), failure.as_ref().map(text), text(&durations)],
            )?;
        }
        Write::Log(id, lines) => {
            tx.execute(
                "INSERT INTO logs (restart_id, lines) VALUES (?1, ?2)
                 ON CONFLICT(restart_id) DO UPDATE SET lines = excluded.lines",
                params![id, text(&lines)],
            )?;
        }
        Write::Audit(a) => audit(tx, &a)?,
        Write::Refused(a) => refused(tx, &a)?,
        Write::Instance(i) => instance(tx, i)?,
        Write::Containment(id, text) => {
            tx.execute(
                "UPDATE restarts SET containment = ?2 WHERE id = ?1",
                params![id, text],
            )?;
        }
        Write::Members(generation, ids) => members(tx, generation, ids)?,
        Write::InstanceEnded(generation, at_ms) => {
            tx.execute(
                "UPDATE instances SET ended_at_ms = ?2 WHERE generation = ?1 AND ended_at_ms IS NULL",
                params![generation as i64, at_ms as i64],
            )?;
        }
        Write::FlagSeen(set) => bench::seen(tx, &set)?,
        Write::RestartFlagset(id, set) => {
            tx.execute(
                "UPDATE restarts SET flagset = ?2 WHERE id = ?1",
                params![id, set],
            )?;
        }
        Write::FlagEdit {
            id,
            label,
            notes,
            reply,
        } => {
            let found = bench::edit(tx, &id, label.as_deref(), notes.as_deref())?;
            replies.push(Box::new(move |ok| reply.send(ok && found).unwrap_or(())));
        }
        Write::BenchBegin { run, reply } => {
            let id = bench::begin(tx, &run)?;
            replies.push(new_id(reply, id));
        }
        Write::BenchRepeat(id, m) => bench::repeat(tx, id, &m)?,
        Write::BenchFinish(run) => bench::finish(tx, &run)?,
        Write::Campaign(w) => campaign::apply(tx, w, replies)?,
        Write::Health(h) => health::apply(tx, h)?,
        Write::Flush(done) => replies.push(Box::new(move |_| {
            let _ = done.send(());
        })),
    }
    Ok(())
}

/// Where an id the writer just made is answered, once the batch committed.
fn new_id(
    reply: tokio::sync::oneshot::Sender<Result<i64, StoreError>>,
    id: i64,
) -> Box<dyn FnOnce(bool) + Send> {
    Box::new(move |ok| {
        let _ = reply.send(if ok {
            Ok(id)
        } else {
            Err(StoreError::WriterGone)
        });
    })
}

/// One action in the audit log.
fn audit(tx: &rusqlite::Transaction<'_>, a: &AuditEntry) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO audit (at_ms, peer, action, request, outcome, detail, kind, count)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)",
        params![
            a.at_ms as i64,
            cut(&a.peer, MAX_AUDIT_TEXT),
            cut(&a.action, MAX_AUDIT_TEXT),
            cut(&a.request, MAX_AUDIT_REQUEST),
            cut(&a.outcome, MAX_AUDIT_TEXT),
            cut(&a.detail, MAX_AUDIT_TEXT),
            AuditKind::Action.as_str(),
        ],
    )?;
    Ok(())
}

/// A refusal: one row per caller per minute, the first attempt its sample.
fn refused(tx: &rusqlite::Transaction<'_>, a: &AuditEntry) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO audit (at_ms, peer, action, request, outcome, detail, kind, count, minute, last_at_ms)
         VALUES (?1, ?2, ?3, '', 'refused', ?4, ?5, 1, ?6, ?1)
         ON CONFLICT(peer, minute) WHERE kind = 'refusals'
         DO UPDATE SET count = count + 1, last_at_ms = excluded.last_at_ms",
        params![
            a.at_ms as i64,
            cut(&a.peer, MAX_AUDIT_TEXT),
            cut(&a.action, MAX_AUDIT_TEXT),
            cut(&a.detail, MAX_AUDIT_TEXT),
            AuditKind::Refusals.as_str(),
            (a.at_ms / 60_000) as i64,
        ],
    )?;
    Ok(())
}

/// The running server instance, as it must be found again after a restart of
/// drainwatch.
fn instance(tx: &rusqlite::Transaction<'_>, i: Instance) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT OR REPLACE INTO instances
         (generation, root_pid, root_start_ticks, pgid, flags, started_at_ms, log_path,
          origin, cgroup)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            i.generation as i64,
            i.root.pid,
            i.root.start_ticks as i64,
            i.pgid,
            text(&i.flags),
            i.started_at_ms as i64,
            i.log_path.map(|p| p.display().to_string()),
            text(&i.origin),
            i.cgroup
        ],
    )?;
    Ok(())
}

/// More processes of an instance, up to [`super::MAX_MEMBERS`] in all.
fn members(
    tx: &rusqlite::Transaction<'_>,
    generation: u64,
    ids: Vec<shared::ProcId>,
) -> rusqlite::Result<()> {
    let have: i64 = tx.query_row(
        "SELECT COUNT(*) FROM instance_members WHERE generation = ?1",
        params![generation as i64],
        |r| r.get(0),
    )?;
    let room = super::MAX_MEMBERS.saturating_sub(have.max(0) as usize);
    let mut q = tx.prepare_cached(
        "INSERT OR IGNORE INTO instance_members (generation, pid, start_ticks)
         VALUES (?1, ?2, ?3)",
    )?;
    for id in ids.into_iter().take(room) {
        q.execute(params![generation as i64, id.pid, id.start_ticks as i64])?;
    }
    Ok(())
}
