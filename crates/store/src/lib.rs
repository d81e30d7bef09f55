//! Durable state for Quartermaster.
//!
//! The server is event-sourced: the scheduling core is deterministic, so the state is the fold
//! of what was accepted. The store keeps that as an append-only log of *batches*: each batch is
//! the commands the server accepted together, the time it applied them at, and the decisions
//! the core took in the pass that followed (kept as an audit trail and to prove, on replay,
//! that the same inputs gave the same decisions). A batch is one SQLite transaction in WAL mode
//! with `synchronous=FULL`, committed before any reply leaves the server or any effect is
//! carried out; a `kill -9` at any moment therefore loses nothing that was acknowledged.
//!
//! The log sits behind the [`Log`] trait so that tests and the simulator can use
//! [`MemoryLog`], and another engine could be added without touching the server.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

/// Schema version written on creation; opening a store of another version is refused.
pub const SCHEMA_VERSION: i64 = 1;

/// The store's one error type.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The data directory holds a store this version cannot read.
    #[error("the store at {path} has schema version {found}, this qm understands {expected}: use a matching qm or a fresh --data-dir")]
    Version {
        /// Database file.
        path: String,
        /// Version found.
        found: i64,
        /// Version supported.
        expected: i64,
    },
    /// The callback of [`Log::replay`] failed.
    #[error("replaying batch {seq}: {message}")]
    Replay {
        /// Batch number.
        seq: u64,
        /// What went wrong.
        message: String,
    },
}

/// One committed batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Position in the log, from 1.
    pub seq: u64,
    /// The server's clock when the batch was applied (epoch milliseconds).
    pub at_ms: i64,
    /// The accepted commands, as JSON (the server's own encoding).
    pub commands: String,
    /// The decisions of the pass that followed, in the server's own encoding.
    pub decisions: String,
}

/// An append-only log of batches.
pub trait Log {
    /// Appends one batch durably; returns its sequence number.
    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError>;
    /// Calls `f` for every batch in order.
    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError>;
    /// Number of batches.
    fn len(&self) -> Result<u64, StoreError>;
    /// Whether the log is empty.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }
}

/// The embedded default: one SQLite database file.
pub struct SqliteLog {
    conn: Connection,
}

impl SqliteLog {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        // WAL lets readers run beside the writer; FULL syncs the WAL at every commit, so an
        // acknowledged batch survives a power cut as well as a kill -9.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS batches (
                 seq INTEGER PRIMARY KEY,
                 at_ms INTEGER NOT NULL,
                 commands TEXT NOT NULL,
                 decisions TEXT NOT NULL
             );",
        )?;
        let version: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        match version {
            None => {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                )?;
            }
            Some(v) => {
                let found = v.parse::<i64>().unwrap_or(-1);
                if found != SCHEMA_VERSION {
                    return Err(StoreError::Version {
                        path: path.display().to_string(),
                        found,
                        expected: SCHEMA_VERSION,
                    });
                }
            }
        }
        Ok(SqliteLog { conn })
    }

    /// A value from the `meta` table.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Sets a value in the `meta` table.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }
}

impl Log for SqliteLog {
    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO batches (at_ms, commands, decisions) VALUES (?1, ?2, ?3)",
            params![at_ms, commands, decisions],
        )?;
        let seq = tx.last_insert_rowid() as u64;
        tx.commit()?;
        Ok(seq)
    }

    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, at_ms, commands, decisions FROM batches ORDER BY seq")?;
        let mut rows = stmt.query([])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let batch = Batch {
                seq: row.get::<_, i64>(0)? as u64,
                at_ms: row.get(1)?,
                commands: row.get(2)?,
                decisions: row.get(3)?,
            };
            let seq = batch.seq;
            f(batch).map_err(|message| StoreError::Replay { seq, message })?;
            n += 1;
        }
        Ok(n)
    }

    fn len(&self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM batches", [], |r| r.get(0))?;
        Ok(n as u64)
    }
}

/// A log in memory, for tests and the simulator: same contract, no durability.
#[derive(Default)]
pub struct MemoryLog {
    batches: Vec<Batch>,
}

impl Log for MemoryLog {
    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError> {
        let seq = self.batches.len() as u64 + 1;
        self.batches.push(Batch {
            seq,
            at_ms,
            commands: commands.to_string(),
            decisions: decisions.to_string(),
        });
        Ok(seq)
    }

    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError> {
        for b in &self.batches {
            let seq = b.seq;
            f(b.clone()).map_err(|message| StoreError::Replay { seq, message })?;
        }
        Ok(self.batches.len() as u64)
    }

    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.batches.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(log: &dyn Log) -> Vec<Batch> {
        let mut out = Vec::new();
        log.replay(&mut |b| {
            out.push(b);
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn batches_come_back_in_order_after_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qm.sqlite3");
        {
            let mut log = SqliteLog::open(&path).unwrap();
            assert_eq!(log.append(10, "[1]", "a").unwrap(), 1);
            assert_eq!(log.append(20, "[2]", "b").unwrap(), 2);
        }
        let log = SqliteLog::open(&path).unwrap();
        let got = collect(&log);
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].seq, got[0].at_ms, got[0].commands.as_str()),
            (1, 10, "[1]")
        );
        assert_eq!((got[1].seq, got[1].decisions.as_str()), (2, "b"));
        assert_eq!(log.len().unwrap(), 2);
    }

    #[test]
    fn a_store_of_another_schema_version_is_refused_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qm.sqlite3");
        {
            let mut log = SqliteLog::open(&path).unwrap();
            log.set_meta("schema_version", "99").unwrap();
        }
        let err = SqliteLog::open(&path).err().expect("refused");
        assert!(err.to_string().contains("fresh --data-dir"), "{err}");
    }

    #[test]
    fn a_failing_replay_names_the_batch() {
        let mut log = MemoryLog::default();
        log.append(1, "x", "").unwrap();
        log.append(2, "y", "").unwrap();
        let err = log
            .replay(&mut |b| {
                if b.seq == 2 {
                    Err("bad".into())
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(err.to_string().contains("batch 2"), "{err}");
    }

    #[test]
    fn meta_values_can_be_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = SqliteLog::open(&dir.path().join("m.sqlite3")).unwrap();
        log.set_meta("k", "1").unwrap();
        log.set_meta("k", "2").unwrap();
        assert_eq!(log.meta("k").unwrap().as_deref(), Some("2"));
        assert_eq!(log.meta("missing").unwrap(), None);
    }
}
