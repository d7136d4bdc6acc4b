//! The health gate before every launch: the server's GPUs, as the latest
//! sample shows them and as the history remembers them, against the
//! server's `[health]` policy. Pure: the manager gives it the sample, the
//! history and the overrides, and feeds the verdict to the machine with each
//! observation.
//!
//! A GPU is refused (by default) for an XID error since its last successful
//! launch, a row remap pending or failed, an uncorrected ECC error since its
//! last launch, or a PCIe link narrower than its max (slower too, when the
//! GPU is busy: an idle GPU lowers its link speed to save power). "Since its
//! last launch" is measured against the GPU's mark, written by the manager
//! when a launch succeeds; a GPU never launched on counts everything
//! drainwatch has seen.

use std::collections::{BTreeSet, HashMap};

use shared::health::{HealthIssue, HealthReason, pcie_issue, row_remap_issues};
use shared::{GpuSample, Sample};

use crate::config::file::{HealthPolicy, Policy};
use crate::store::{HealthMark, StoredXid};

/// What the gate remembers between samples: each GPU's last-launch mark and
/// the XIDs stored before this drainwatch started (newer ones come with
/// every sample).
#[derive(Debug, Clone, Default)]
pub struct History {
    pub marks: HashMap<String, HealthMark>,
    pub xids: Vec<StoredXid>,
}

impl History {
    pub fn new(marks: Vec<HealthMark>, xids: Vec<StoredXid>) -> Self {
        let mut h = Self {
            marks: marks.into_iter().map(|m| (m.gpu_uuid.clone(), m)).collect(),
            xids,
        };
        h.prune();
        h
    }

    /// Forgets each XID its GPU has launched past since; keeps those of a GPU
    /// never launched on (or not known by UUID).
    fn prune(&mut self) {
        let marks = &self.marks;
        self.xids.retain(|x| {
            x.gpu_uuid
                .as_ref()
                .and_then(|u| marks.get(u))
                .is_none_or(|m| x.event.at_ms >= m.at_ms)
        });
    }

    /// The marks of a successful launch on `gpus`, taken from `sample`.
    pub fn mark(&mut self, sample: &Sample, gpus: &[u32], at_ms: u64) -> Vec<HealthMark> {
        let marks: Vec<HealthMark> = sample
            .gpus
            .iter()
            .filter(|g| gpus.contains(&g.index))
            .filter_map(|g| {
                Some(HealthMark {
                    gpu_uuid: g.uuid.clone()?,
                    at_ms,
                    ecc_uncorrected: g.health.ecc.map(|e| e.volatile_uncorrected),
                })
            })
            .collect();
        for m in &marks {
            self.marks.insert(m.gpu_uuid.clone(), m.clone());
        }
        self.prune();
        marks
    }
}

/// The gate's verdict on one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Issues that refuse the launch.
    pub refuse: Vec<HealthIssue>,
    /// Issues to note on the restart (warned, or refused and overridden).
    pub warn: Vec<HealthIssue>,
    /// A GPU's slow fields were last read before `fresh_since_ms`: no verdict yet.
    pub stale: bool,
}

impl Verdict {
    /// The GPUs a refusal names, in order.
    pub fn refused_gpus(&self) -> Vec<u32> {
        self.refuse
            .iter()
            .map(|i| i.gpu_index)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// Unix ms as `HH:MM:SS UTC`.
fn clock(ms: u64) -> String {
    let s = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, (s / 60) % 60, s % 60)
}

/// GPU `g`'s issues, before policy.
fn issues(g: &GpuSample, history: &History) -> Vec<HealthIssue> {
    let h = &g.health;
    let mark = g.uuid.as_ref().and_then(|u| history.marks.get(u));
    let since = mark.map_or(0, |m| m.at_ms);
    let mut out = Vec::new();
    let mut push = |reason, detail: String| {
        out.push(HealthIssue {
            gpu_index: g.index,
            reason,
            detail,
        })
    };

    let mut xids: Vec<(u64, u64)> = history
        .xids
        .iter()
        .filter(|x| match (&x.gpu_uuid, &g.uuid) {
            (Some(a), Some(b)) => a == b,
            _ => x.gpu_index == g.index,
        })
        .map(|x| (x.event.at_ms, x.event.code))
        .chain(h.xid.iter().map(|x| (x.at_ms, x.code)))
        .filter(|(at, _)| *at >= since)
        .collect();
    xids.sort_unstable();
    xids.dedup();
    if let Some((at, code)) = xids.last() {
        let more = match xids.len() {
            1 => String::new(),
            n => format!("; {n} since the last launch"),
        };
        push(
            HealthReason::Xid,
            format!("XID {code} at {}{more}", clock(*at)),
        );
    }

    for detail in row_remap_issues(h) {
        push(HealthReason::RowRemap, detail.to_owned());
    }

    if let Some(e) = h.ecc {
        let before = mark.and_then(|m| m.ecc_uncorrected).unwrap_or(0);
        // Fewer than at the mark: the driver was reloaded and the volatile
        // count started again.
        let new = if e.volatile_uncorrected >= before {
            e.volatile_uncorrected - before
        } else {
            e.volatile_uncorrected
        };
        if new > 0 {
            push(
                HealthReason::Ecc,
                format!("{new} uncorrected error(s) since the last launch"),
            );
        }
    }

    if let Some(p) = pcie_issue(h) {
        push(HealthReason::Pcie, p);
    }
    out
}

/// The verdict on `gpus` in `sample`. `overridden`: GPUs an operator chose
/// to launch on anyway, whose refusals become warnings. `fresh_since_ms`:
/// slow fields read before it are too old to decide on.
pub fn check(
    sample: &Sample,
    gpus: &[u32],
    history: &History,
    policy: &HealthPolicy,
    overridden: &[u32],
    fresh_since_ms: Option<u64>,
) -> Verdict {
    let mut v = Verdict::default();
    for g in sample.gpus.iter().filter(|g| gpus.contains(&g.index)) {
        if let Some(since) = fresh_since_ms
            && g.health.slow_at_ms.is_none_or(|at| at < since)
        {
            v.stale = true;
        }
        for mut issue in issues(g, history) {
            match policy.of(issue.reason) {
                Policy::Ignore => {}
                Policy::Warn => v.warn.push(issue),
                Policy::Refuse if overridden.contains(&issue.gpu_index) => {
                    issue.detail.push_str("; overridden by an operator");
                    v.warn.push(issue);
                }
                Policy::Refuse => v.refuse.push(issue),
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use shared::health::{EccErrors, GpuHealth, PcieLink, RemappedRows, XidEvent};

    use super::*;

    fn gpu(index: u32, health: GpuHealth) -> GpuSample {
        GpuSample {
            index,
            uuid: Some(format!("GPU-{index}")),
            health: GpuHealth {
                slow_at_ms: Some(1_000),
                ..health
            },
            ..Default::default()
        }
    }

    fn sample(gpus: Vec<GpuSample>) -> Sample {
        Sample {
            seq: 1,
            at_ms: 1_000,
            took_us: 0,
            gpus,
            processes: Vec::new(),
            server: None,
            processes_error: None,
        }
    }

    #[test]
    fn each_reason_refuses_warns_or_is_ignored_as_configured() {
        let s = sample(vec![
            gpu(0, GpuHealth::default()),
            gpu(
                1,
                GpuHealth {
                    xid: vec![XidEvent {
                        code: 79,
                        at_ms: 900,
                    }],
                    ..Default::default()
                },
            ),
            gpu(
                2,
                GpuHealth {
                    remapped_rows: Some(RemappedRows {
                        pending: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            gpu(
                3,
                GpuHealth {
                    pcie: Some(PcieLink {
                        gen_current: 5,
                        gen_max: 5,
                        width_current: 8,
                        width_max: 16,
                    }),
                    ..Default::default()
                },
            ),
        ]);
        let all = [0, 1, 2, 3];
        let h = History::default();
        let v = check(&s, &all, &h, &HealthPolicy::default(), &[], None);
        assert_eq!(v.refused_gpus(), vec![1, 2, 3]);
        assert!(v.warn.is_empty());
        assert!(
            v.refuse[0].detail.starts_with("XID 79 at 00:00:00 UTC"),
            "{:?}",
            v.refuse[0]
        );

        let policy = HealthPolicy {
            xid: Policy::Warn,
            row_remap: Policy::Ignore,
            ..HealthPolicy::default()
        };
        let v = check(&s, &all, &h, &policy, &[], None);
        assert_eq!(v.refused_gpus(), vec![3]);
        assert_eq!(v.warn.len(), 1);
        assert_eq!(v.warn[0].reason, HealthReason::Xid);

        // Only the server's GPUs count; an override turns a refusal into a warning.
        let v = check(&s, &[0, 3], &h, &HealthPolicy::default(), &[3], None);
        assert!(v.refuse.is_empty());
        assert!(v.warn[0].detail.ends_with("overridden by an operator"));
    }

    #[test]
    fn xid_and_ecc_count_from_the_last_launch() {
        let mut g = gpu(
            0,
            GpuHealth {
                xid: vec![XidEvent {
                    code: 13,
                    at_ms: 400,
                }],
                ecc: Some(EccErrors {
                    volatile_uncorrected: 2,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let stored = StoredXid {
            gpu_index: 0,
            gpu_uuid: Some("GPU-0".into()),
            event: XidEvent {
                code: 48,
                at_ms: 300,
            },
        };
        // GPU 9 has never been launched on: its XID stays history while GPU
        // 0 launches past its own.
        let never = StoredXid {
            gpu_index: 9,
            gpu_uuid: Some("GPU-9".into()),
            event: XidEvent {
                code: 79,
                at_ms: 100,
            },
        };
        let mut h = History::new(Vec::new(), vec![stored, never]);
        let s = sample(vec![g.clone()]);
        let v = check(&s, &[0], &h, &HealthPolicy::default(), &[], None);
        let reasons: Vec<HealthReason> = v.refuse.iter().map(|i| i.reason).collect();
        assert_eq!(reasons, vec![HealthReason::Xid, HealthReason::Ecc]);
        assert!(v.refuse[0].detail.contains("XID 13") && v.refuse[0].detail.contains("2 since"));

        // A successful launch marks the GPU: what came before is forgiven.
        let marks = h.mark(&s, &[0], 500);
        assert_eq!(marks[0].ecc_uncorrected, Some(2));
        let kept: Vec<u32> = h.xids.iter().map(|x| x.gpu_index).collect();
        assert_eq!(kept, vec![9]);
        let v = check(&s, &[0], &h, &HealthPolicy::default(), &[], None);
        assert_eq!(v, Verdict::default());

        // One more uncorrected error, and a driver reload (the count restarts).
        g.health.ecc = Some(EccErrors {
            volatile_uncorrected: 3,
            ..Default::default()
        });
        let v = check(
            &sample(vec![g.clone()]),
            &[0],
            &h,
            &HealthPolicy::default(),
            &[],
            None,
        );
        assert_eq!(
            v.refuse[0].detail,
            "1 uncorrected error(s) since the last launch"
        );
        g.health.ecc = Some(EccErrors {
            volatile_uncorrected: 1,
            ..Default::default()
        });
        let v = check(
            &sample(vec![g]),
            &[0],
            &h,
            &HealthPolicy::default(),
            &[],
            None,
        );
        assert_eq!(
            v.refuse[0].detail,
            "1 uncorrected error(s) since the last launch"
        );
    }

    #[test]
    fn old_slow_fields_give_no_verdict_yet() {
        let s = sample(vec![gpu(0, GpuHealth::default())]);
        let h = History::default();
        assert!(check(&s, &[0], &h, &HealthPolicy::default(), &[], Some(2_000)).stale);
        assert!(!check(&s, &[0], &h, &HealthPolicy::default(), &[], Some(1_000)).stale);
    }
}
