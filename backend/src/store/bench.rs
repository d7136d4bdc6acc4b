//! The throughput ledger's SQL: flag sets, benchmark runs and their repeats.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};
use shared::bench::{
    BenchRun, BenchSettings, FlagSet, FlagSetResults, LevelSummary, RunMetrics, RunStatus,
};

use super::codec::{name, named, parse, text};
use super::{Store, StoreError};

/// Records a flag set as seen now (inserting it the first time).
pub(super) fn seen(tx: &Connection, set: &FlagSet) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO flagsets (id, model, flags, first_seen_ms, last_seen_ms) VALUES (?1, ?2, ?3, ?4, ?4)
         ON CONFLICT(id) DO UPDATE SET last_seen_ms = MAX(last_seen_ms, excluded.last_seen_ms)",
        params![set.id, set.model, text(&set.flags), set.last_seen_ms as i64],
    )?;
    Ok(())
}

pub(super) fn edit(
    tx: &Connection,
    id: &str,
    label: Option<&str>,
    notes: Option<&str>,
) -> rusqlite::Result<bool> {
    let n = tx.execute(
        "UPDATE flagsets SET label = ?2, notes = ?3 WHERE id = ?1",
        params![id, label, notes],
    )?;
    Ok(n == 1)
}

fn flagset(r: &Row<'_>) -> rusqlite::Result<FlagSet> {
    Ok(FlagSet {
        id: r.get(0)?,
        model: r.get(1)?,
        flags: parse(&r.get::<_, String>(2)?)?,
        label: r.get(3)?,
        notes: r.get(4)?,
        first_seen_ms: r.get::<_, i64>(5)? as u64,
        last_seen_ms: r.get::<_, i64>(6)? as u64,
    })
}

const FLAGSET_COLUMNS: &str = "id, model, flags, label, notes, first_seen_ms, last_seen_ms";

pub(super) fn flagset_by_id(c: &Connection, id: &str) -> rusqlite::Result<Option<FlagSet>> {
    c.query_row(
        &format!("SELECT {FLAGSET_COLUMNS} FROM flagsets WHERE id = ?1"),
        [id],
        flagset,
    )
    .optional()
}

const RUN_COLUMNS: &str = "id, flagset, restart_id, requested_by, settings, status, started_at_ms, finished_at_ms, error, correctness, provenance, campaign_id, campaign_step";

fn run_row(r: &Row<'_>) -> rusqlite::Result<BenchRun> {
    Ok(BenchRun {
        id: r.get(0)?,
        flagset: r.get(1)?,
        restart_id: r.get(2)?,
        requested_by: r.get(3)?,
        settings: parse(&r.get::<_, String>(4)?)?,
        status: named(&r.get::<_, String>(5)?)?,
        started_at_ms: r.get::<_, i64>(6)? as u64,
        finished_at_ms: r.get::<_, Option<i64>>(7)?.map(|v| v as u64),
        error: r.get(8)?,
        correctness: r
            .get::<_, Option<String>>(9)?
            .map(|s| parse(&s))
            .transpose()?,
        repeats: Vec::new(),
        levels: Vec::new(),
        provenance: r
            .get::<_, Option<String>>(10)?
            .map(|s| parse(&s))
            .transpose()?,
        campaign_id: r.get(11)?,
        campaign_step: r.get(12)?,
    })
}

/// Fills a run's repeats and per-concurrency summaries.
fn with_repeats(c: &Connection, mut run: BenchRun) -> rusqlite::Result<BenchRun> {
    let mut q = c.prepare("SELECT metrics FROM bench_repeats WHERE run_id = ?1 ORDER BY rowid")?;
    run.repeats = q
        .query_map([run.id], |r| parse::<RunMetrics>(&r.get::<_, String>(0)?))?
        .collect::<rusqlite::Result<_>>()?;
    run.levels = LevelSummary::group(
        &run.settings.levels(),
        &run.repeats,
        run.settings.slo.as_ref(),
    );
    Ok(run)
}

/// Runs, newest first; only `flagset`'s when given.
pub(super) fn runs(
    c: &Connection,
    flagset: Option<&str>,
    limit: u32,
) -> rusqlite::Result<Vec<BenchRun>> {
    let mut q = c.prepare(&format!(
        "SELECT {RUN_COLUMNS} FROM bench_runs WHERE (?1 IS NULL OR flagset = ?1) ORDER BY id DESC LIMIT ?2"
    ))?;
    let runs: Vec<BenchRun> = q
        .query_map(params![flagset, limit], run_row)?
        .collect::<rusqlite::Result<_>>()?;
    runs.into_iter().map(|r| with_repeats(c, r)).collect()
}

pub(super) fn run(c: &Connection, id: i64) -> rusqlite::Result<Option<BenchRun>> {
    c.query_row(
        &format!("SELECT {RUN_COLUMNS} FROM bench_runs WHERE id = ?1"),
        [id],
        run_row,
    )
    .optional()?
    .map(|r| with_repeats(c, r))
    .transpose()
}

/// Every flag set with its newest successful result per concurrency.
pub(super) fn ledger(c: &Connection) -> rusqlite::Result<Vec<FlagSetResults>> {
    let mut q = c.prepare(&format!(
        "SELECT {FLAGSET_COLUMNS} FROM flagsets ORDER BY first_seen_ms"
    ))?;
    let sets: Vec<FlagSet> = q.query_map([], flagset)?.collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for set in sets {
        let all = runs(c, Some(&set.id), 1_000)?;
        let mut levels = BTreeMap::new();
        let ok = || all.iter().filter(|r| r.status == RunStatus::Succeeded);
        // Newest first: the first successful run per concurrency wins.
        for r in ok() {
            for l in r.levels.iter().filter(|l| l.request_rate.is_none()) {
                levels.entry(l.concurrency).or_insert_with(|| l.clone());
            }
        }
        // A rate sweep is read whole: the newest successful open-loop run.
        let mut rate_levels: Vec<LevelSummary> = ok()
            .find(|r| r.settings.open_loop())
            .map(|r| r.levels.clone())
            .unwrap_or_default();
        rate_levels.sort_by(|a, b| {
            a.request_rate
                .unwrap_or(0.0)
                .total_cmp(&b.request_rate.unwrap_or(0.0))
        });
        let best_rate = rate_levels
            .iter()
            .filter(|l| l.meets_slo == Some(true))
            .filter_map(|l| l.request_rate)
            .reduce(f64::max);
        out.push(FlagSetResults {
            wrong_answers: all
                .iter()
                .any(|r| r.correctness.as_ref().is_some_and(|c| !c.passed)),
            runs: all.len() as u32,
            levels,
            rate_levels,
            best_rate,
            conditions: ok()
                .find_map(|r| r.provenance.as_ref())
                .map(shared::bench::RunConditions::of),
            campaign: super::campaign::link(c, &set.id)?,
            set,
        });
    }
    Ok(out)
}

pub(super) fn begin(tx: &Connection, run: &BenchRun) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO bench_runs (flagset, restart_id, requested_by, settings, status, started_at_ms, campaign_id, campaign_step)
         VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7)",
        params![run.flagset, run.restart_id, run.requested_by, text(&run.settings), run.started_at_ms as i64, run.campaign_id, run.campaign_step],
    )?;
    Ok(tx.last_insert_rowid())
}

pub(super) fn repeat(tx: &Connection, run_id: i64, m: &RunMetrics) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO bench_repeats (run_id, concurrency, repeat, metrics) VALUES (?1, ?2, ?3, ?4)",
        params![run_id, m.concurrency, m.repeat, text(m)],
    )?;
    Ok(())
}

pub(super) fn finish(tx: &Connection, run: &BenchRun) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE bench_runs SET status = ?2, finished_at_ms = ?3, error = ?4, correctness = ?5, provenance = ?6 WHERE id = ?1",
        params![
            run.id,
            name(&run.status),
            run.finished_at_ms.map(|v| v as i64),
            run.error,
            run.correctness.as_ref().map(text),
            run.provenance.as_ref().map(text)
        ],
    )?;
    Ok(())
}

/// Runs a previous drainwatch left running.
pub(super) fn interrupt(tx: &Connection, now_ms: u64) -> rusqlite::Result<usize> {
    tx.execute(
        "UPDATE bench_runs SET status = 'interrupted', finished_at_ms = ?1 WHERE status = 'running'",
        [now_ms as i64],
    )
}

impl Store {
    /// The newest successful run of `flagset` with exactly `settings` on
    /// server version `version`: what a campaign may reuse.
    pub async fn reusable_run(
        &self,
        flagset: String,
        settings: BenchSettings,
        version: String,
    ) -> Result<Option<shared::bench::BenchRun>, StoreError> {
        self.read(move |c| {
            let runs = runs(c, Some(&flagset), 1_000)?;
            Ok(runs.into_iter().find(|r| {
                r.status == shared::bench::RunStatus::Succeeded
                    && same_settings(&r.settings, &settings)
                    && r.correctness.as_ref().is_none_or(|c| c.passed)
                    && r.provenance
                        .as_ref()
                        .and_then(|p| p.server_version.as_deref())
                        == Some(version.as_str())
            }))
        })
        .await
    }
}

/// Two runs' settings ask for the same measurement: equal but for whether a
/// wrong answer stops the run (a campaign's do; a person's need not).
fn same_settings(a: &BenchSettings, b: &BenchSettings) -> bool {
    let plain = |s: &BenchSettings| BenchSettings {
        abort_on_wrong_answer: false,
        ..s.clone()
    };
    plain(a) == plain(b)
}
