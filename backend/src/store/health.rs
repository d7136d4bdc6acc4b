//! GPU health's SQL: the XID errors drainwatch has seen, and per GPU the mark
//! of its last successful launch (when, and its uncorrected ECC count then),
//! which is what "since the last launch" means to the health gate.

use rusqlite::{Connection, params};
use shared::health::XidEvent;

use super::{Store, StoreError, Write};

/// XID rows kept (the newest): a GPU flooding XIDs fills these and no more.
#[cfg(not(test))]
const MAX_XID_ROWS: i64 = 10_000;
#[cfg(test)]
const MAX_XID_ROWS: i64 = 20;

/// A GPU's state at its last successful launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthMark {
    pub gpu_uuid: String,
    pub at_ms: u64,
    /// Volatile uncorrected ECC errors then, where known.
    pub ecc_uncorrected: Option<u64>,
}

/// An XID as stored: which GPU (UUID where known, else index), code and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredXid {
    pub gpu_index: u32,
    pub gpu_uuid: Option<String>,
    pub event: XidEvent,
}

/// A write of the health history's (see [`Write::Health`]).
pub(super) enum HealthWrite {
    Xid(StoredXid),
    Marks(Vec<HealthMark>),
}

pub(super) fn apply(tx: &Connection, w: HealthWrite) -> rusqlite::Result<()> {
    match w {
        HealthWrite::Xid(x) => {
            tx.execute(
                "INSERT INTO xid_events (gpu_index, gpu_uuid, code, at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![
                    x.gpu_index,
                    x.gpu_uuid,
                    x.event.code as i64,
                    x.event.at_ms as i64
                ],
            )?;
            tx.execute(
                "DELETE FROM xid_events WHERE id <= (
                     SELECT id FROM xid_events ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                [MAX_XID_ROWS],
            )?;
        }
        HealthWrite::Marks(marks) => {
            for m in marks {
                tx.execute(
                    "INSERT INTO health_marks (gpu_uuid, at_ms, ecc_uncorrected) VALUES (?1, ?2, ?3)
                     ON CONFLICT(gpu_uuid) DO UPDATE SET at_ms = excluded.at_ms,
                         ecc_uncorrected = excluded.ecc_uncorrected",
                    params![m.gpu_uuid, m.at_ms as i64, m.ecc_uncorrected.map(|v| v as i64)],
                )?;
            }
        }
    }
    Ok(())
}

fn marks(conn: &Connection) -> rusqlite::Result<Vec<HealthMark>> {
    let mut q = conn.prepare("SELECT gpu_uuid, at_ms, ecc_uncorrected FROM health_marks")?;
    q.query_map([], |r| {
        Ok(HealthMark {
            gpu_uuid: r.get(0)?,
            at_ms: r.get::<_, i64>(1)? as u64,
            ecc_uncorrected: r.get::<_, Option<i64>>(2)?.map(|v| v as u64),
        })
    })?
    .collect()
}

fn xids_since(conn: &Connection, since_ms: u64) -> rusqlite::Result<Vec<StoredXid>> {
    let mut q = conn.prepare(
        "SELECT gpu_index, gpu_uuid, code, at_ms FROM xid_events WHERE at_ms >= ?1 ORDER BY id",
    )?;
    q.query_map([since_ms as i64], |r| {
        Ok(StoredXid {
            gpu_index: r.get(0)?,
            gpu_uuid: r.get(1)?,
            event: XidEvent {
                code: r.get::<_, i64>(2)? as u64,
                at_ms: r.get::<_, i64>(3)? as u64,
            },
        })
    })?
    .collect()
}

impl Store {
    /// Records an XID error.
    pub fn xid(&self, x: StoredXid) {
        self.send(Write::Health(HealthWrite::Xid(x)));
    }

    /// Records each GPU's state at a successful launch.
    pub fn health_marks(&self, marks: Vec<HealthMark>) {
        if !marks.is_empty() {
            self.send(Write::Health(HealthWrite::Marks(marks)));
        }
    }

    /// Every GPU's last-launch mark.
    pub async fn marks(&self) -> Result<Vec<HealthMark>, StoreError> {
        self.read(marks).await
    }

    /// XID errors at or after `since_ms`, oldest first.
    pub async fn xids_since(&self, since_ms: u64) -> Result<Vec<StoredXid>, StoreError> {
        self.read(move |c| xids_since(c, since_ms)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn xids_and_marks_survive_a_reopen_and_xids_are_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (store, _) = Store::open(dir.path(), 1).expect("open");
            for i in 0..30u64 {
                store.xid(StoredXid {
                    gpu_index: 1,
                    gpu_uuid: Some("GPU-a".into()),
                    event: XidEvent {
                        code: 79,
                        at_ms: 1_000 + i,
                    },
                });
            }
            store.health_marks(vec![HealthMark {
                gpu_uuid: "GPU-a".into(),
                at_ms: 500,
                ecc_uncorrected: Some(2),
            }]);
            store.health_marks(vec![HealthMark {
                gpu_uuid: "GPU-a".into(),
                at_ms: 1_020,
                ecc_uncorrected: Some(3),
            }]);
            store.flush().await;
        }
        let (store, _) = Store::open(dir.path(), 2).expect("reopen");
        let marks = store.marks().await.expect("marks");
        assert_eq!(
            marks,
            vec![HealthMark {
                gpu_uuid: "GPU-a".into(),
                at_ms: 1_020,
                ecc_uncorrected: Some(3)
            }]
        );
        let all = store.xids_since(0).await.expect("xids");
        assert_eq!(all.len(), MAX_XID_ROWS as usize, "the oldest are dropped");
        assert_eq!(all.last().map(|x| x.event.at_ms), Some(1_029));
        let recent = store.xids_since(1_025).await.expect("xids");
        assert_eq!(recent.len(), 5);
        assert_eq!(recent[0].gpu_uuid.as_deref(), Some("GPU-a"));
    }
}
