//! The queries of the history: restarts, their records and durations, and the
//! audit log, redacted as they are read.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row};
use shared::flags::Flags;
use shared::restart::{
    Durations, Failure, Marker, OpKind, Outcome, Phase, RestartDetail, RestartSummary,
    TimelinePoint, Transition,
};

use super::codec::{named, parse};
use super::{AuditEntry, AuditKind};

/// A stored failure as shown: its log tail redacted (also one stored before
/// drainwatch redacted), and its holders' command lines.
fn shown(mut f: Failure) -> Failure {
    crate::redact::global().failure(&mut f);
    f
}

const SUMMARY_COLUMNS: &str = "id, kind, requested_by, started_at_ms, finished_at_ms, from_flags, to_flags, outcome, failure, durations";

fn summary(r: &Row<'_>) -> rusqlite::Result<RestartSummary> {
    Ok(RestartSummary {
        id: r.get(0)?,
        kind: named::<OpKind>(&r.get::<_, String>(1)?)?,
        requested_by: r.get(2)?,
        started_at_ms: r.get::<_, i64>(3)? as u64,
        finished_at_ms: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
        // Redacted again: a record written before redaction holds raw values.
        from_flags: crate::redact::global().flags(&parse::<Flags>(&r.get::<_, String>(5)?)?),
        to_flags: crate::redact::global().flags(&parse::<Flags>(&r.get::<_, String>(6)?)?),
        outcome: named::<Outcome>(&r.get::<_, String>(7)?)?,
        failure: match r.get::<_, Option<String>>(8)? {
            Some(f) => Some(shown(parse(&f)?)),
            None => None,
        },
        durations: parse(&r.get::<_, String>(9)?)?,
    })
}

pub(super) fn restarts(conn: &Connection, limit: u32) -> rusqlite::Result<Vec<RestartSummary>> {
    let mut q = conn.prepare(&format!(
        "SELECT {SUMMARY_COLUMNS} FROM restarts ORDER BY id DESC LIMIT ?1"
    ))?;
    q.query_map([limit], summary)?.collect()
}

/// Every restart's kind, outcome and phase durations, for `/metrics`.
/// Every operation's kind, outcome, durations and failure class (the
/// failure's `kind`: `verify_failed`, `foreign_holders`, …).
pub(super) fn outcomes(conn: &Connection) -> rusqlite::Result<Vec<super::OutcomeRow>> {
    let mut q = conn.prepare(
        "SELECT kind, outcome, durations, json_extract(failure, '$.kind') FROM restarts",
    )?;
    q.query_map([], |r| {
        Ok((
            named::<OpKind>(&r.get::<_, String>(0)?)?,
            named::<Outcome>(&r.get::<_, String>(1)?)?,
            parse(&r.get::<_, String>(2)?)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?
    .collect()
}

pub(super) fn detail(conn: &Connection, id: i64) -> rusqlite::Result<Option<RestartDetail>> {
    let Some(summary) = conn
        .query_row(
            &format!("SELECT {SUMMARY_COLUMNS} FROM restarts WHERE id = ?1"),
            [id],
            summary,
        )
        .optional()?
    else {
        return Ok(None);
    };
    let mut transitions = Vec::new();
    let mut markers = Vec::new();
    let mut q = conn.prepare(
        "SELECT at_ms, phase, note, marker FROM transitions WHERE restart_id = ?1 ORDER BY at_ms, rowid",
    )?;
    let mut rows = q.query([id])?;
    while let Some(r) = rows.next()? {
        let at_ms = r.get::<_, i64>(0)? as u64;
        transitions.push(Transition {
            at_ms,
            phase: named::<Phase>(&r.get::<_, String>(1)?)?,
            note: r.get(2)?,
        });
        if let Some(m) = r.get::<_, Option<String>>(3)? {
            markers.push(Marker {
                kind: named(&m)?,
                at_ms,
            });
        }
    }
    let mut q = conn.prepare(
        "SELECT at_ms, phase, mem, running FROM timeline WHERE restart_id = ?1 ORDER BY at_ms, rowid",
    )?;
    let timeline = q
        .query_map([id], |r| {
            Ok(TimelinePoint {
                at_ms: r.get::<_, i64>(0)? as u64,
                phase: named(&r.get::<_, String>(1)?)?,
                mem_used_bytes: parse(&r.get::<_, String>(2)?)?,
                running_requests: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let log_tail = conn
        .query_row("SELECT lines FROM logs WHERE restart_id = ?1", [id], |r| {
            r.get::<_, String>(0)
        })
        .optional()?
        .map(|s| parse(&s))
        .transpose()?
        .map(|lines: Vec<String>| crate::redact::global().lines(&lines))
        .unwrap_or_default();
    let containment = conn.query_row(
        "SELECT containment FROM restarts WHERE id = ?1",
        [id],
        |r| r.get(0),
    )?;
    Ok(Some(RestartDetail {
        summary,
        transitions,
        markers,
        timeline,
        log_tail,
        containment,
    }))
}

/// The newest `limit` entries (of one kind, if given), newest first. Their
/// text is redacted again: an entry written before redaction holds raw values.
pub(super) fn audit(
    conn: &Connection,
    limit: u32,
    kind: Option<AuditKind>,
) -> rusqlite::Result<Vec<AuditEntry>> {
    let mut q = conn.prepare(
        "SELECT at_ms, peer, action, request, outcome, detail, kind, count, last_at_ms
         FROM audit WHERE ?2 IS NULL OR kind = ?2 ORDER BY id DESC LIMIT ?1",
    )?;
    let r = crate::redact::global();
    q.query_map(
        rusqlite::params![limit, kind.map(AuditKind::as_str)],
        |row| {
            Ok(AuditEntry {
                at_ms: row.get::<_, i64>(0)? as u64,
                peer: row.get(1)?,
                action: row.get(2)?,
                request: r.text(&row.get::<_, String>(3)?),
                outcome: row.get(4)?,
                detail: r.text(&row.get::<_, String>(5)?),
                kind: AuditKind::parse(&row.get::<_, String>(6)?),
                count: row.get::<_, i64>(7)?.max(1) as u64,
                last_at_ms: row.get::<_, Option<i64>>(8)?.map(|v| v as u64),
            })
        },
    )?
    .collect()
}

/// Median time spent in each phase over the last 20 successful restarts.
pub(super) fn typical(conn: &Connection) -> rusqlite::Result<BTreeMap<Phase, u64>> {
    let mut q = conn.prepare(
        "SELECT durations FROM restarts WHERE outcome = 'succeeded' AND kind = 'restart'
         ORDER BY id DESC LIMIT 20",
    )?;
    let mut by_part: BTreeMap<Phase, Vec<u64>> = BTreeMap::new();
    for d in q.query_map([], |r| parse::<Durations>(&r.get::<_, String>(0)?))? {
        for (phase, ms) in d?.parts() {
            by_part.entry(phase).or_default().extend(ms);
        }
    }
    Ok(by_part
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(phase, mut v)| {
            v.sort_unstable();
            (phase, v[v.len() / 2])
        })
        .collect())
}
