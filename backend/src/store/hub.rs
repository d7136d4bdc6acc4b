//! The hub's coordinated operations, kept in SQLite (`<data>/hub.db`): each
//! record is written whole at every step, so a crash of the hub loses at most
//! the step in flight, and a record the hub was writing when it stopped is
//! handed to the recovery when it starts again (`recover.rs`), which ends it
//! interrupted. The hub keeps no other state: fleet history is Prometheus's
//! (`deploy/prometheus/`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use shared::fleet::CoordRecord;
use shared::restart::Outcome;

use super::StoreError;

/// The newest records a listing returns at most.
pub const MAX_LIST: u32 = 200;
/// Records kept: the oldest go as new ones come (a few KiB each).
const KEEP: i64 = 10_000;

#[derive(Debug, Clone)]
pub struct Records {
    db: Arc<Mutex<Connection>>,
}

impl Records {
    /// Opens (or creates) `dir/hub.db`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Folder {
            path: dir.to_owned(),
            source,
        })?;
        let path = dir.join("hub.db");
        let open = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let db = Connection::open(&path).map_err(open)?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS coordinated (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 target TEXT NOT NULL,
                 started_at_ms INTEGER NOT NULL,
                 record TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS coordinated_counts (
                 target TEXT NOT NULL,
                 outcome TEXT NOT NULL,
                 n INTEGER NOT NULL,
                 PRIMARY KEY (target, outcome)
             );",
        )
        .map_err(open)?;
        Ok(Self {
            db: Arc::new(Mutex::new(db)),
        })
    }

    /// The records a hub that stopped left running, oldest first.
    pub fn unfinished(&self) -> Result<Vec<CoordRecord>, StoreError> {
        let mut out: Vec<CoordRecord> = self
            .list(MAX_LIST)?
            .into_iter()
            .filter(|r| r.outcome == Outcome::Running)
            .collect();
        out.reverse();
        Ok(out)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new record: its id is filled in.
    pub fn begin(&self, rec: &mut CoordRecord) -> Result<(), StoreError> {
        let db = self.conn();
        db.execute(
            "INSERT INTO coordinated (target, started_at_ms, record) VALUES (?1, ?2, '{}')",
            params![rec.target, rec.started_at_ms as i64],
        )?;
        rec.id = db.last_insert_rowid();
        db.execute(
            "DELETE FROM coordinated WHERE id <= ?1",
            params![rec.id - KEEP],
        )?;
        drop(db);
        self.save(rec)
    }

    /// Writes the record whole.
    pub fn save(&self, rec: &CoordRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(rec)?;
        self.conn()
            .execute(
                "UPDATE coordinated SET record = ?1 WHERE id = ?2",
                params![text, rec.id],
            )
            .map(|_| ())
            .map_err(StoreError::from)
    }

    pub fn get(&self, id: i64) -> Result<Option<CoordRecord>, StoreError> {
        let text: Option<String> = self
            .conn()
            .query_row(
                "SELECT record FROM coordinated WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(text.map(|t| serde_json::from_str(&t)).transpose()?)
    }

    /// The newest `n` records, newest first.
    pub fn list(&self, n: u32) -> Result<Vec<CoordRecord>, StoreError> {
        let db = self.conn();
        let mut q = db.prepare("SELECT record FROM coordinated ORDER BY id DESC LIMIT ?1")?;
        let rows = q.query_map(params![n.min(MAX_LIST)], |r| r.get::<_, String>(0))?;
        rows.filter_map(Result::ok)
            .map(|t| serde_json::from_str(&t).map_err(StoreError::from))
            .collect()
    }

    /// Counts one finished record of `target` with `outcome`: counts that
    /// only grow (pruning old records leaves them), for the hub's `/metrics`.
    pub fn count(&self, target: &str, outcome: Outcome) -> Result<(), StoreError> {
        if outcome == Outcome::Running {
            return Ok(());
        }
        let outcome = crate::store::name(&outcome);
        self.conn()
            .execute(
                "INSERT INTO coordinated_counts (target, outcome, n) VALUES (?1, ?2, 1)
                 ON CONFLICT (target, outcome) DO UPDATE SET n = n + 1",
                params![target, outcome],
            )
            .map(drop)
            .map_err(StoreError::from)
    }

    /// Finished records by target and outcome (`succeeded`, `failed`,
    /// `interrupted`), since the hub's records began.
    pub fn outcomes(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        let db = self.conn();
        let mut q = db.prepare("SELECT target, outcome, n FROM coordinated_counts")?;
        let rows = q.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        rows.map(|r| {
            r.map(|(t, o, n)| (t, o, n.max(0) as u64))
                .map_err(StoreError::from)
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::fleet::CoordKind;

    #[test]
    fn records_survive_the_hub_and_an_unfinished_one_is_handed_back() {
        let dir = tempfile::tempdir().expect("dir");
        let r = Records::open(dir.path()).expect("open");
        let mut rec = CoordRecord {
            id: 0,
            target: "dsv3".into(),
            kind: CoordKind::Group,
            requested_by: "alice".into(),
            started_at_ms: 1,
            finished_at_ms: None,
            outcome: Outcome::Running,
            failure: None,
            flags: Default::default(),
            members: Vec::new(),
        };
        r.begin(&mut rec).expect("begin");
        assert_eq!(rec.id, 1);
        drop(r);
        let r = Records::open(dir.path()).expect("reopen");
        let left = r.unfinished().expect("unfinished");
        assert_eq!(left.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1]);
        let mut back = r.get(1).expect("get").expect("there");
        assert_eq!(back.outcome, Outcome::Running);
        // Ended by the recovery: no longer handed back, and counted.
        back.outcome = Outcome::Interrupted;
        r.save(&back).expect("save");
        r.count(&back.target, back.outcome).expect("count");
        assert!(r.unfinished().expect("unfinished").is_empty());
        assert_eq!(r.list(10).expect("list").len(), 1);
        assert_eq!(
            r.outcomes().expect("counted"),
            [("dsv3".to_owned(), "interrupted".to_owned(), 1)]
        );
        assert!(r.get(2).expect("get").is_none());
    }
}
