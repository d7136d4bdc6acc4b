//! Campaigns' SQL: a campaign and its steps written whole when it is created,
//! then its header and each step as they change; read back whole (flags raw:
//! the runner relaunches with them; views redact).

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use shared::bench::BenchSettings;
use shared::campaign::{Campaign, CampaignInfo, FailurePolicy, PlanOrder, Step};
use tokio::sync::oneshot;

use super::codec::{name, named, parse, text};
use super::{Store, StoreError, Write};

/// What a campaign keeps that never changes once it is created.
#[derive(Debug, Serialize, Deserialize)]
struct Plan {
    order: PlanOrder,
    on_failure: FailurePolicy,
    reuse: bool,
    target: Option<f64>,
    baseline: u32,
    varied: Vec<String>,
    bench: BenchSettings,
    #[serde(default)]
    step_estimate_ms: Option<u64>,
    /// A campaign that searches: its search as the runner reads it.
    #[serde(default)]
    search: Option<serde_json::Value>,
}

/// A write of a campaign's (see [`Write::Campaign`]).
pub(super) enum CampaignWrite {
    Begin {
        campaign: Box<Campaign>,
        search: Option<serde_json::Value>,
        reply: oneshot::Sender<Result<i64, StoreError>>,
    },
    Info(Box<CampaignInfo>),
    Step(i64, Box<Step>),
}

pub(super) fn apply(
    tx: &Connection,
    w: CampaignWrite,
    replies: &mut Vec<Box<dyn FnOnce(bool) + Send>>,
) -> rusqlite::Result<()> {
    match w {
        CampaignWrite::Begin {
            campaign,
            search,
            reply,
        } => {
            let i = &campaign.info;
            let plan = Plan {
                order: i.order,
                on_failure: i.on_failure,
                reuse: i.reuse,
                target: i.target,
                baseline: i.baseline,
                varied: i.varied.clone(),
                bench: campaign.bench.clone(),
                step_estimate_ms: i.step_estimate_ms,
                search,
            };
            tx.execute(
                "INSERT INTO campaigns (name, state, reason, requested_by, created_at_ms, current, plan)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    i.name,
                    name(&i.state),
                    i.reason,
                    i.requested_by,
                    i.created_at_ms as i64,
                    i.current,
                    text(&plan)
                ],
            )?;
            let id = tx.last_insert_rowid();
            for s in &campaign.steps {
                tx.execute(
                    "INSERT INTO campaign_steps (campaign_id, idx, plan_index, label, flags, flagset, settings, state, attempts)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0)",
                    params![
                        id,
                        s.index,
                        s.plan_index,
                        s.label,
                        text(&s.flags),
                        s.flagset,
                        s.settings.as_ref().map(text),
                        name(&s.state)
                    ],
                )?;
            }
            replies.push(Box::new(move |ok| {
                let _ = reply.send(if ok {
                    Ok(id)
                } else {
                    Err(StoreError::WriterGone)
                });
            }));
        }
        CampaignWrite::Info(i) => {
            tx.execute(
                "UPDATE campaigns SET state = ?2, reason = ?3, finished_at_ms = ?4, current = ?5 WHERE id = ?1",
                params![
                    i.id,
                    name(&i.state),
                    i.reason,
                    i.finished_at_ms.map(|v| v as i64),
                    i.current
                ],
            )?;
        }
        CampaignWrite::Step(id, s) => write_step(tx, id, &s)?,
    }
    Ok(())
}

/// A step's write: the first one of a step a search adds inserts it.
fn write_step(tx: &Connection, id: i64, s: &Step) -> rusqlite::Result<()> {
    // A search's steps are added as it goes: the first write of one
    // inserts it.
    tx.execute(
        "INSERT INTO campaign_steps (campaign_id, idx, plan_index, label, flags, flagset, settings,
                state, attempts, restart_id, run_id, failure, result, started_at_ms, finished_at_ms)
         VALUES (?1, ?2, ?11, ?12, ?13, ?14, ?15, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (campaign_id, idx) DO UPDATE SET state = ?3, attempts = ?4,
                restart_id = ?5, run_id = ?6, failure = ?7, result = ?8,
                started_at_ms = ?9, finished_at_ms = ?10",
        params![
            id,
            s.index,
            name(&s.state),
            s.attempts,
            s.restart_id,
            s.run_id,
            s.failure.as_ref().map(text),
            s.result.as_ref().map(text),
            s.started_at_ms.map(|v| v as i64),
            s.finished_at_ms.map(|v| v as i64),
            s.plan_index,
            s.label,
            text(&s.flags),
            s.flagset,
            s.settings.as_ref().map(text)
        ],
    )?;
    Ok(())
}

const INFO_COLUMNS: &str =
    "id, name, state, reason, requested_by, created_at_ms, finished_at_ms, current, plan";

/// A campaign's header and its plan's settings (the counts are filled from the steps).
fn info_row(r: &Row<'_>) -> rusqlite::Result<(CampaignInfo, BenchSettings)> {
    let plan: Plan = parse(&r.get::<_, String>(8)?)?;
    Ok((
        CampaignInfo {
            id: r.get(0)?,
            name: r.get(1)?,
            state: named(&r.get::<_, String>(2)?)?,
            reason: r.get(3)?,
            requested_by: r.get(4)?,
            created_at_ms: r.get::<_, i64>(5)? as u64,
            finished_at_ms: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
            current: r.get(7)?,
            order: plan.order,
            on_failure: plan.on_failure,
            reuse: plan.reuse,
            target: plan.target,
            baseline: plan.baseline,
            varied: plan.varied,
            step_estimate_ms: plan.step_estimate_ms,
            steps: 0,
            done: 0,
            reused: 0,
            failed: 0,
            skipped: 0,
        },
        plan.bench,
    ))
}

fn step_row(r: &Row<'_>) -> rusqlite::Result<Step> {
    Ok(Step {
        index: r.get(0)?,
        plan_index: r.get(1)?,
        label: r.get(2)?,
        flags: parse(&r.get::<_, String>(3)?)?,
        flagset: r.get(4)?,
        settings: r
            .get::<_, Option<String>>(5)?
            .map(|s| parse(&s))
            .transpose()?,
        state: named(&r.get::<_, String>(6)?)?,
        attempts: r.get(7)?,
        restart_id: r.get(8)?,
        run_id: r.get(9)?,
        failure: r
            .get::<_, Option<String>>(10)?
            .map(|s| parse(&s))
            .transpose()?,
        result: r
            .get::<_, Option<String>>(11)?
            .map(|s| parse(&s))
            .transpose()?,
        started_at_ms: r.get::<_, Option<i64>>(12)?.map(|v| v as u64),
        finished_at_ms: r.get::<_, Option<i64>>(13)?.map(|v| v as u64),
    })
}

pub(super) fn campaign(c: &Connection, id: i64) -> rusqlite::Result<Option<Campaign>> {
    let Some((info, bench)) = c
        .query_row(
            &format!("SELECT {INFO_COLUMNS} FROM campaigns WHERE id = ?1"),
            [id],
            info_row,
        )
        .optional()?
    else {
        return Ok(None);
    };
    let mut q = c.prepare(
        "SELECT idx, plan_index, label, flags, flagset, settings, state, attempts, restart_id,
                run_id, failure, result, started_at_ms, finished_at_ms
         FROM campaign_steps WHERE campaign_id = ?1 ORDER BY idx",
    )?;
    let steps = q
        .query_map([id], step_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut c = Campaign { info, bench, steps };
    c.recount();
    Ok(Some(c))
}

/// Campaigns' headers, newest first.
pub(super) fn campaigns(c: &Connection, limit: u32) -> rusqlite::Result<Vec<CampaignInfo>> {
    let mut q = c.prepare(&format!(
        "SELECT {INFO_COLUMNS} FROM campaigns ORDER BY id DESC LIMIT ?1"
    ))?;
    let heads: Vec<(CampaignInfo, BenchSettings)> = q
        .query_map([limit], info_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut counts = c.prepare(
        "SELECT state, COUNT(*) FROM campaign_steps WHERE campaign_id = ?1 GROUP BY state",
    )?;
    heads
        .into_iter()
        .map(|(mut info, _)| {
            for row in counts.query_map([info.id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, u32>(1)?))
            })? {
                let (state, n) = row?;
                info.steps += n;
                match state.as_str() {
                    "done" => info.done = n,
                    "reused" => info.reused = n,
                    "failed" => info.failed = n,
                    "skipped" => info.skipped = n,
                    _ => {}
                }
            }
            Ok(info)
        })
        .collect()
}

/// The campaign that was running (or pausing) when drainwatch stopped.
pub(super) fn unfinished(c: &Connection) -> rusqlite::Result<Option<i64>> {
    c.query_row(
        "SELECT id FROM campaigns WHERE state IN ('running', 'pausing', 'paused') ORDER BY id DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// A successful run recorded for a campaign's step (the newest), if any.
pub(super) fn step_run(c: &Connection, campaign: i64, step: u32) -> rusqlite::Result<Option<i64>> {
    c.query_row(
        "SELECT id FROM bench_runs WHERE campaign_id = ?1 AND campaign_step = ?2 AND status = 'succeeded'
         ORDER BY id DESC LIMIT 1",
        params![campaign, step],
        |r| r.get(0),
    )
    .optional()
}

impl Store {
    /// Records a new campaign with its steps, and its search as the runner
    /// reads it (if it searches); returns its id once committed.
    pub async fn campaign_begin(
        &self,
        campaign: Campaign,
        search: Option<serde_json::Value>,
    ) -> Result<i64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Write::Campaign(CampaignWrite::Begin {
            campaign: Box::new(campaign),
            search,
            reply,
        }));
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    pub fn campaign_info(&self, info: CampaignInfo) {
        self.send(Write::Campaign(CampaignWrite::Info(Box::new(info))));
    }

    pub fn campaign_step(&self, campaign: i64, step: Step) {
        self.send(Write::Campaign(CampaignWrite::Step(
            campaign,
            Box::new(step),
        )));
    }

    /// A campaign's search as it was recorded, if it searches.
    pub async fn campaign_search(&self, id: i64) -> Result<Option<serde_json::Value>, StoreError> {
        self.read(move |c| {
            let plan: Option<String> = c
                .query_row(
                    "SELECT plan FROM campaigns WHERE id = ?1",
                    params![id],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(match plan {
                Some(text) => parse::<Plan>(&text)?.search,
                None => None,
            })
        })
        .await
    }

    /// A campaign whole, flags raw.
    pub async fn campaign(&self, id: i64) -> Result<Option<Campaign>, StoreError> {
        self.read(move |c| campaign(c, id)).await
    }

    /// Campaigns' headers, newest first.
    pub async fn campaigns(&self, limit: u32) -> Result<Vec<CampaignInfo>, StoreError> {
        self.read(move |c| campaigns(c, limit)).await
    }

    /// The campaign a previous drainwatch left unfinished (running, pausing or paused).
    pub async fn unfinished_campaign(&self) -> Result<Option<Campaign>, StoreError> {
        self.read(|c| match unfinished(c)? {
            Some(id) => campaign(c, id),
            None => Ok(None),
        })
        .await
    }

    /// The successful run recorded for `campaign`'s step `step`, if any.
    pub async fn campaign_step_run(
        &self,
        campaign: i64,
        step: u32,
    ) -> Result<Option<i64>, StoreError> {
        self.read(move |c| step_run(c, campaign, step)).await
    }

    /// Median duration of recent successful benchmark runs (ms), for estimates.
    pub async fn typical_bench_ms(&self) -> Result<Option<u64>, StoreError> {
        self.read(|c| {
            let mut q = c.prepare(
                "SELECT finished_at_ms - started_at_ms FROM bench_runs
                 WHERE status = 'succeeded' AND finished_at_ms IS NOT NULL ORDER BY id DESC LIMIT 20",
            )?;
            let v: Vec<f64> = q
                .query_map([], |r| r.get::<_, i64>(0))?
                .filter_map(Result::ok)
                .map(|d| d as f64)
                .collect();
            Ok((!v.is_empty()).then(|| shared::bench::Spread::of(&v).median as u64))
        })
        .await
    }
}

/// On open: a step left mid-flight by a campaign that had already ended
/// (cancelled or stopped while its last restart ran) is skipped.
pub(super) fn settle(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE campaign_steps SET state = 'skipped'
         WHERE state IN ('restarting', 'benchmarking')
           AND campaign_id IN (SELECT id FROM campaigns WHERE state IN ('done', 'cancelled', 'stopped'))",
        [],
    )?;
    Ok(())
}

/// The newest campaign step that ran flag set `flagset` to an end, for the ledger.
pub(super) fn link(
    c: &Connection,
    flagset: &str,
) -> rusqlite::Result<Option<shared::bench::CampaignLink>> {
    c.query_row(
        "SELECT s.campaign_id, c.name, s.idx, s.state, s.failure
         FROM campaign_steps s JOIN campaigns c ON c.id = s.campaign_id
         WHERE s.flagset = ?1 AND s.state IN ('done', 'reused', 'failed')
         ORDER BY s.finished_at_ms DESC, s.campaign_id DESC LIMIT 1",
        [flagset],
        |r| {
            let state: String = r.get(3)?;
            let failure: Option<shared::campaign::StepFailure> = r
                .get::<_, Option<String>>(4)?
                .map(|s| parse(&s))
                .transpose()?;
            Ok(shared::bench::CampaignLink {
                campaign_id: r.get(0)?,
                campaign: r.get(1)?,
                step: r.get(2)?,
                outcome: match failure {
                    Some(f) if state == "failed" => format!("failed: {}", f.kind.label()),
                    _ => state,
                },
            })
        },
    )
    .optional()
}
