//! The recovery that runs when the store opens: restarts and benchmark runs a
//! previous drainwatch left running are marked interrupted, and the last server
//! instance not recorded as ended is handed back.

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};
use shared::ProcId;
use shared::restart::{Failure, Origin};

use super::codec::{parse, text};
use super::{Instance, Recovered};

/// Marks restarts a previous run left running as interrupted, and finds the last
/// instance not recorded as ended.
pub(super) fn run(conn: &mut Connection, now_ms: u64) -> rusqlite::Result<Recovered> {
    let tx = conn.transaction()?;
    let interrupted: Vec<i64> = {
        let mut q = tx.prepare("SELECT id FROM restarts WHERE outcome = 'running'")?;
        q.query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    for id in &interrupted {
        tx.execute(
            "UPDATE restarts SET outcome = 'interrupted', finished_at_ms = ?2, failure = ?3 WHERE id = ?1",
            params![id, now_ms as i64, text(&Failure::Interrupted)],
        )?;
        tx.execute(
            "INSERT INTO transitions (restart_id, at_ms, phase, note, marker) VALUES (?1, ?2, 'failed', ?3, 'failed')",
            params![id, now_ms as i64, Failure::Interrupted.summary()],
        )?;
    }
    super::bench::interrupt(&tx, now_ms)?;
    super::campaign::settle(&tx)?;
    let generation: i64 = tx.query_row(
        "SELECT COALESCE(MAX(generation), 0) FROM instances",
        [],
        |r| r.get(0),
    )?;
    let instance = tx
        .query_row(
            "SELECT generation, root_pid, root_start_ticks, pgid, flags, started_at_ms, log_path,
                    origin, cgroup
             FROM instances WHERE ended_at_ms IS NULL ORDER BY generation DESC LIMIT 1",
            [],
            |r| {
                Ok(Instance {
                    generation: r.get::<_, i64>(0)? as u64,
                    root: ProcId {
                        pid: r.get(1)?,
                        start_ticks: r.get::<_, i64>(2)? as u64,
                    },
                    pgid: r.get(3)?,
                    flags: parse(&r.get::<_, String>(4)?)?,
                    started_at_ms: r.get::<_, i64>(5)? as u64,
                    log_path: r.get::<_, Option<String>>(6)?.map(PathBuf::from),
                    // No origin recorded: never assume the group is ours.
                    origin: r
                        .get::<_, Option<String>>(7)?
                        .map(|s| parse(&s))
                        .transpose()?
                        .unwrap_or(Origin::Adopted),
                    cgroup: r.get(8)?,
                })
            },
        )
        .optional()?;
    let members = match &instance {
        Some(i) => {
            let mut q = tx.prepare(
                "SELECT pid, start_ticks FROM instance_members WHERE generation = ?1 LIMIT ?2",
            )?;
            q.query_map(
                rusqlite::params![i.generation as i64, super::MAX_MEMBERS as i64],
                |r| {
                    Ok(ProcId {
                        pid: r.get(0)?,
                        start_ticks: r.get::<_, i64>(1)? as u64,
                    })
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?
        }
        None => Vec::new(),
    };
    // Those of instances that ended are no one's any more.
    tx.execute(
        "DELETE FROM instance_members WHERE generation IN
           (SELECT generation FROM instances WHERE ended_at_ms IS NOT NULL)",
        [],
    )?;
    tx.commit()?;
    Ok(Recovered {
        interrupted,
        instance,
        generation: generation.max(0) as u64,
        members,
    })
}
