//! The database's shape, as numbered migrations. `PRAGMA user_version` records
//! how many have run; each runs once, in its own transaction. Never edit a
//! migration that has shipped: add the next one.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: restarts, their transitions and drain timelines, launch logs, the audit
    // log, and the server instances drainwatch launched or adopted.
    "
    CREATE TABLE restarts (
        id             INTEGER PRIMARY KEY,
        kind           TEXT    NOT NULL,
        requested_by   TEXT    NOT NULL,
        started_at_ms  INTEGER NOT NULL,
        finished_at_ms INTEGER,
        from_flags     TEXT    NOT NULL,
        to_flags       TEXT    NOT NULL,
        outcome        TEXT    NOT NULL,
        failure        TEXT,
        durations      TEXT    NOT NULL DEFAULT '{}'
    );
    CREATE TABLE transitions (
        restart_id INTEGER NOT NULL REFERENCES restarts(id),
        at_ms      INTEGER NOT NULL,
        phase      TEXT    NOT NULL,
        note       TEXT    NOT NULL,
        marker     TEXT
    );
    CREATE INDEX transitions_by_restart ON transitions(restart_id, at_ms);
    CREATE TABLE timeline (
        restart_id INTEGER NOT NULL REFERENCES restarts(id),
        at_ms      INTEGER NOT NULL,
        phase      TEXT    NOT NULL,
        mem        TEXT    NOT NULL,
        running    INTEGER
    );
    CREATE INDEX timeline_by_restart ON timeline(restart_id, at_ms);
    CREATE TABLE logs (
        restart_id INTEGER PRIMARY KEY REFERENCES restarts(id),
        lines      TEXT NOT NULL
    );
    CREATE TABLE audit (
        id      INTEGER PRIMARY KEY,
        at_ms   INTEGER NOT NULL,
        peer    TEXT    NOT NULL,
        action  TEXT    NOT NULL,
        request TEXT    NOT NULL,
        outcome TEXT    NOT NULL,
        detail  TEXT    NOT NULL
    );
    CREATE TABLE instances (
        generation       INTEGER PRIMARY KEY,
        root_pid         INTEGER NOT NULL,
        root_start_ticks INTEGER NOT NULL,
        pgid             INTEGER NOT NULL,
        flags            TEXT    NOT NULL,
        started_at_ms    INTEGER NOT NULL,
        log_path         TEXT,
        ended_at_ms      INTEGER
    );
    ",
    // 2: the throughput ledger: flag sets, benchmark runs and their repeats.
    "
    CREATE TABLE flagsets (
        id            TEXT    PRIMARY KEY,
        model         TEXT    NOT NULL,
        flags         TEXT    NOT NULL,
        label         TEXT,
        notes         TEXT,
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms  INTEGER NOT NULL
    );
    CREATE TABLE bench_runs (
        id             INTEGER PRIMARY KEY,
        flagset        TEXT    NOT NULL REFERENCES flagsets(id),
        restart_id     INTEGER,
        requested_by   TEXT    NOT NULL,
        settings       TEXT    NOT NULL,
        status         TEXT    NOT NULL,
        started_at_ms  INTEGER NOT NULL,
        finished_at_ms INTEGER,
        error          TEXT,
        correctness    TEXT
    );
    CREATE INDEX bench_runs_by_flagset ON bench_runs(flagset, id);
    CREATE TABLE bench_repeats (
        run_id      INTEGER NOT NULL REFERENCES bench_runs(id),
        concurrency INTEGER NOT NULL,
        repeat      INTEGER NOT NULL,
        metrics     TEXT    NOT NULL
    );
    CREATE INDEX bench_repeats_by_run ON bench_repeats(run_id);
    ALTER TABLE restarts ADD COLUMN flagset TEXT;
    ",
    // 3: containment: where an instance came from and the cgroup that holds it;
    // how each restart's servers were contained. An instance recorded before
    // this has no origin and is treated as adopted: its group is never signalled.
    "
    ALTER TABLE instances ADD COLUMN origin TEXT;
    ALTER TABLE instances ADD COLUMN cgroup TEXT;
    ALTER TABLE restarts ADD COLUMN containment TEXT;
    ",
    // 4: the audit log in two parts with their own retention: what callers
    // did (`action`), and refusals before any handler (`refusals`), one row
    // per caller per minute with a count, so no flood pushes out an action.
    "
    ALTER TABLE audit ADD COLUMN kind TEXT NOT NULL DEFAULT 'action';
    ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE audit ADD COLUMN minute INTEGER;
    ALTER TABLE audit ADD COLUMN last_at_ms INTEGER;
    CREATE INDEX audit_by_kind ON audit(kind, id);
    CREATE UNIQUE INDEX audit_refusals ON audit(peer, minute) WHERE kind = 'refusals';
    ",
    // 5: what a benchmark was measured with and under (JSON).
    "
    ALTER TABLE bench_runs ADD COLUMN provenance TEXT;
    ",
    // 6: campaigns and their steps (flags raw: a resumed campaign relaunches
    // with them); which campaign step a benchmark run measured.
    "
    CREATE TABLE campaigns (
        id             INTEGER PRIMARY KEY,
        name           TEXT    NOT NULL,
        state          TEXT    NOT NULL,
        reason         TEXT,
        requested_by   TEXT    NOT NULL,
        created_at_ms  INTEGER NOT NULL,
        finished_at_ms INTEGER,
        current        INTEGER,
        plan           TEXT    NOT NULL
    );
    CREATE TABLE campaign_steps (
        campaign_id    INTEGER NOT NULL REFERENCES campaigns(id),
        idx            INTEGER NOT NULL,
        plan_index     INTEGER NOT NULL,
        label          TEXT,
        flags          TEXT    NOT NULL,
        flagset        TEXT    NOT NULL,
        settings       TEXT,
        state          TEXT    NOT NULL,
        attempts       INTEGER NOT NULL DEFAULT 0,
        restart_id     INTEGER,
        run_id         INTEGER,
        failure        TEXT,
        result         TEXT,
        started_at_ms  INTEGER,
        finished_at_ms INTEGER,
        PRIMARY KEY (campaign_id, idx)
    );
    CREATE INDEX campaign_steps_by_flagset ON campaign_steps(flagset);
    ALTER TABLE bench_runs ADD COLUMN campaign_id INTEGER;
    ALTER TABLE bench_runs ADD COLUMN campaign_step INTEGER;
    CREATE INDEX bench_runs_by_campaign ON bench_runs(campaign_id, campaign_step);
    ",
    // 7: GPU health: XID errors seen, and each GPU's mark at its last
    // successful launch.
    "
    CREATE TABLE xid_events (
        id        INTEGER PRIMARY KEY,
        gpu_index INTEGER NOT NULL,
        gpu_uuid  TEXT,
        code      INTEGER NOT NULL,
        at_ms     INTEGER NOT NULL
    );
    CREATE INDEX xid_events_by_time ON xid_events(at_ms);
    CREATE TABLE health_marks (
        gpu_uuid        TEXT PRIMARY KEY,
        at_ms           INTEGER NOT NULL,
        ecc_uncorrected INTEGER
    );
    ",
    // 8: the processes of each instance's server, so that a drainwatch that
    // was killed knows what of its server still lives.
    "
    CREATE TABLE instance_members (
        generation  INTEGER NOT NULL,
        pid         INTEGER NOT NULL,
        start_ticks INTEGER NOT NULL,
        PRIMARY KEY (generation, pid, start_ticks)
    );
    ",
];

/// Brings the database up to the newest schema.
pub(super) fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let done: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(done.max(0) as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// Settings for every connection: WAL (readers never block the writer), a busy
/// timeout instead of immediate "database is locked", foreign keys on.
pub(super) fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(())
}
