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
//!
//! Every batch knows which build of qm wrote it and in which encoding ([`Writer`]): a server
//! that changed a scheduling rule replays batches of an older build without expecting the same
//! decisions, and a later encoding of the decisions still reads the earlier ones. Schema 1
//! (releases up to 7368e83) had no writers; opening such a store migrates it in place and
//! attributes its batches to [`Writer::legacy`].
//!
//! Schema 3 added the principals table ([`Principals`]); a schema 2 store gains it on open.
//!
//! [`backup()`] copies a store, also one a running server is writing, into a checked file.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

mod backup;
mod principals;
pub use backup::{backup, BackupOptions, BackupProgress, BackupSummary};
pub use principals::{PrincipalRecord, Principals};

/// Schema version written on creation. Older schemas are migrated on open; a newer one (a
/// store written by a later qm) is refused.
pub const SCHEMA_VERSION: i64 = 3;

/// The build of qm that appended a run of batches, and the encoding of their decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    /// qm's version and commit, e.g. `0.1.0+7368e83`.
    pub version: String,
    /// Encoding of the `decisions` column (0: `Debug` strings joined by newlines, the schema 1
    /// encoding; later values are the server's to define).
    pub format: u32,
}

impl Writer {
    /// The writer of every batch of a schema 1 store, which did not record one.
    pub fn legacy() -> Self {
        Writer {
            version: "schema-1 (7368e83 or earlier)".into(),
            format: 0,
        }
    }
}

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
    /// There is no readable store where one was expected.
    #[error("no qm store at {path} ({detail}): point --data-dir at the directory `qm serve` uses, the one holding qm.sqlite3")]
    NoStore {
        /// Database file.
        path: String,
        /// Why it is not one.
        detail: String,
    },
    /// A file operation outside SQLite failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// A backup cannot be written where it was asked to go.
    #[error("will not write the backup to {path}: {problem}")]
    BackupTarget {
        /// The target file.
        path: String,
        /// What is wrong and what to do.
        problem: String,
    },
    /// A finished copy failed its check; nothing was written under the target's name.
    #[error("the copy of {store} failed its check ({detail}); no backup was written. Run `sqlite3 {store} 'PRAGMA integrity_check'` to see whether the store itself is damaged")]
    BadCopy {
        /// Database file that was copied.
        store: String,
        /// What the check found.
        detail: String,
    },
    /// The store stayed locked.
    #[error(
        "the store at {path} stayed locked for {waited_s} s: try again, or stop what holds it"
    )]
    Busy {
        /// Database file.
        path: String,
        /// How long it waited.
        waited_s: u64,
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
    /// Who wrote it.
    pub writer: Writer,
}

/// The state as of a batch, written so that a restart replays only what came after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The last batch it covers.
    pub seq: u64,
    /// The server's clock when it was taken (epoch milliseconds).
    pub at_ms: i64,
    /// The build that wrote it; `format` is the encoding of `state`.
    pub writer: Writer,
    /// The state, in the server's own encoding.
    pub state: String,
}

/// An append-only log of batches, compacted by snapshots.
pub trait Log {
    /// Declares who writes the batches appended from now on (a no-op when it already is).
    fn set_writer(&mut self, writer: &Writer) -> Result<(), StoreError>;
    /// Appends one batch durably; returns its sequence number.
    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError>;
    /// Calls `f` for every batch in order.
    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError>;
    /// Number of batches (after the latest snapshot).
    fn len(&self) -> Result<u64, StoreError>;
    /// The sequence number of the last batch appended (0 for none), snapshots included.
    fn last_seq(&self) -> u64;
    /// The latest snapshot, if any.
    fn snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.snapshots()?.into_iter().next())
    }
    /// The snapshots kept, newest first: the latest and the one before it, whose batches are
    /// kept too, so that a latest snapshot that cannot be loaded is not the end of the data.
    fn snapshots(&self) -> Result<Vec<Snapshot>, StoreError>;
    /// Durably records `state` as the state after batch `seq` (by the current writer;
    /// `state_format` is the encoding of `state`), and drops what the snapshot before it
    /// covered (older snapshots and the batches up to that one), in one transaction.
    fn write_snapshot(
        &mut self,
        seq: u64,
        at_ms: i64,
        state_format: u32,
        state: &str,
    ) -> Result<(), StoreError>;
    /// Whether the log is empty.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }
}

/// The embedded default: one SQLite database file.
pub struct SqliteLog {
    conn: Connection,
    /// The last sequence number used, by a batch or a snapshot: after a compaction the batches
    /// table may be empty, and sequence numbers must still only grow.
    last_seq: u64,
    /// Who appends.
    writer: Writer,
}

impl SqliteLog {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = Connection::open(path)?;
        // WAL lets readers run beside the writer; FULL syncs the WAL at every commit, so an
        // acknowledged batch survives a power cut as well as a kill -9.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // The server writes snapshots through a second connection: each waits for the
        // other's transaction instead of failing with SQLITE_BUSY.
        conn.busy_timeout(std::time::Duration::from_secs(60))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        )?;
        let version: Option<String> = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let found = match version {
            None => 0,
            Some(v) => v.parse::<i64>().unwrap_or(i64::MAX),
        };
        if found > SCHEMA_VERSION {
            return Err(StoreError::Version {
                path: path.display().to_string(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        // Idempotent at the current version too: a table added without a version bump (as
        // during development) is created rather than missed.
        migrate(&mut conn, found)?;
        let last_seq: i64 = conn.query_row(
            "SELECT MAX(COALESCE((SELECT MAX(seq) FROM batches), 0),
                        COALESCE((SELECT MAX(seq) FROM snapshots), 0))",
            [],
            |r| r.get(0),
        )?;
        let writer = Writer::legacy();
        Ok(SqliteLog {
            conn,
            last_seq: last_seq as u64,
            writer,
        })
    }

    /// Extends the write-ahead log with zeros to `bytes`, so that commits overwrite blocks it
    /// already has instead of growing it: a commit's sync then writes no inode (the size is
    /// unchanged), one disk write fewer on every commit. SQLite reads the zeros as the end of
    /// the log (frames whose salt and checksum do not match), as it reads the old frames past
    /// the end after it restarts the log.
    ///
    /// Only while no other connection writes: the zeros start at the file's current end, and a
    /// writer appending meanwhile would lose its frames. The server calls it once, under its
    /// data directory's lock, before its first append.
    pub fn reserve_wal(&self, bytes: u64) -> Result<(), StoreError> {
        let Some(path) = self.conn.path().filter(|p| !p.is_empty()) else {
            return Ok(());
        };
        let wal = format!("{path}-wal");
        extend_with_zeros(Path::new(&wal), bytes).map_err(|source| StoreError::Io {
            context: format!("reserving {bytes} bytes for the write-ahead log {wal}"),
            source,
        })
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

/// Writes zeros from the end of the file at `path` up to `bytes`, and syncs it; nothing when
/// it is that long already or does not exist (a store not in WAL mode).
fn extend_with_zeros(path: &Path, bytes: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut at = file.metadata()?.len();
    if at >= bytes {
        return Ok(());
    }
    let zeros = vec![0u8; 1 << 20];
    while at < bytes {
        let n = (bytes - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_all()
}

/// Brings a store of schema `from` (0: new and empty) to [`SCHEMA_VERSION`] in one
/// transaction, so that a crash half-way leaves the old schema, which the next open migrates.
fn migrate(conn: &mut Connection, from: i64) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS batches (
             seq INTEGER PRIMARY KEY,
             at_ms INTEGER NOT NULL,
             commands TEXT NOT NULL,
             decisions TEXT NOT NULL
         );
         -- Batches from first_seq up to the next row's first_seq were written by this build.
         CREATE TABLE IF NOT EXISTS writers (
             first_seq INTEGER PRIMARY KEY,
             version TEXT NOT NULL,
             format INTEGER NOT NULL
         );
         -- The state after batch seq; the batches up to seq are gone once it is written.
         CREATE TABLE IF NOT EXISTS snapshots (
             seq INTEGER PRIMARY KEY,
             at_ms INTEGER NOT NULL,
             version TEXT NOT NULL,
             format INTEGER NOT NULL,
             state TEXT NOT NULL
         );
         -- A snapshot's state in pieces, each written in a transaction of its own, so that
         -- the server's appends never wait for a whole large state to be written.
         CREATE TABLE IF NOT EXISTS snapshot_chunks (
             seq INTEGER NOT NULL,
             idx INTEGER NOT NULL,
             data TEXT NOT NULL,
             PRIMARY KEY (seq, idx)
         );",
    )?;
    let has_chunks: bool = tx
        .prepare("SELECT 1 FROM pragma_table_info('snapshots') WHERE name = 'chunks'")?
        .exists([])?;
    if !has_chunks {
        tx.execute_batch("ALTER TABLE snapshots ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0")?;
    }
    // Schema 3: principals and their keys, outside the log (see `principals`).
    tx.execute_batch(principals::TABLE)?;
    if from == 1 {
        let legacy = Writer::legacy();
        tx.execute(
            "INSERT OR IGNORE INTO writers (first_seq, version, format) VALUES (1, ?1, ?2)",
            params![legacy.version, legacy.format],
        )?;
    }
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![SCHEMA_VERSION.to_string()],
    )?;
    tx.commit()?;
    Ok(())
}

impl SqliteLog {
    /// Every writer with the first batch it wrote, in order.
    pub fn writers(&self) -> Result<Vec<(u64, Writer)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT first_seq, version, format FROM writers ORDER BY first_seq")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                Writer {
                    version: r.get(1)?,
                    format: r.get::<_, i64>(2)? as u32,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Bytes of snapshot state per row: small enough that writing one never holds the database
/// long, large enough that a big state is a few hundred rows.
const SNAPSHOT_CHUNK: usize = 4 << 20;

/// `text` in pieces of at most about `size` bytes, cut at character boundaries.
fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(size);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

impl SqliteLog {
    /// The state of snapshot `seq`, from its `n` pieces.
    fn chunked_state(&self, seq: u64, n: i64) -> Result<String, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT data FROM snapshot_chunks WHERE seq = ?1 ORDER BY idx")?;
        let pieces: Vec<String> = stmt
            .query_map(params![seq as i64], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if pieces.len() as i64 != n {
            return Err(StoreError::Replay {
                seq,
                message: format!(
                    "snapshot after batch {seq} has {} of its {n} pieces",
                    pieces.len()
                ),
            });
        }
        Ok(pieces.concat())
    }
}

/// The writer of batch `seq`, given the writers in order of their first batch.
fn writer_of(writers: &[(u64, Writer)], seq: u64) -> Writer {
    writers
        .iter()
        .rev()
        .find(|(first, _)| *first <= seq)
        .map_or_else(Writer::legacy, |(_, w)| w.clone())
}

impl Log for SqliteLog {
    fn set_writer(&mut self, writer: &Writer) -> Result<(), StoreError> {
        self.writer = writer.clone();
        if self.writers()?.last().map(|(_, w)| w) == Some(writer) {
            return Ok(());
        }
        // A writer that appended nothing yet is replaced rather than followed.
        self.conn.execute(
            "INSERT INTO writers (first_seq, version, format) VALUES (?1, ?2, ?3)
             ON CONFLICT(first_seq) DO UPDATE SET version = excluded.version, format = excluded.format",
            params![(self.last_seq + 1) as i64, writer.version, writer.format],
        )?;
        Ok(())
    }

    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError> {
        let seq = self.last_seq + 1;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO batches (seq, at_ms, commands, decisions) VALUES (?1, ?2, ?3, ?4)",
            params![seq as i64, at_ms, commands, decisions],
        )?;
        tx.commit()?;
        self.last_seq = seq;
        Ok(seq)
    }

    fn last_seq(&self) -> u64 {
        self.last_seq
    }

    fn snapshots(&self) -> Result<Vec<Snapshot>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, at_ms, version, format, state, chunks FROM snapshots ORDER BY seq DESC LIMIT 2",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                Snapshot {
                    seq: r.get::<_, i64>(0)? as u64,
                    at_ms: r.get(1)?,
                    writer: Writer {
                        version: r.get(2)?,
                        format: r.get::<_, i64>(3)? as u32,
                    },
                    state: r.get(4)?,
                },
                r.get::<_, i64>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut snap, chunks) = row?;
            if chunks > 0 {
                snap.state = self.chunked_state(snap.seq, chunks)?;
            }
            out.push(snap);
        }
        Ok(out)
    }

    fn write_snapshot(
        &mut self,
        seq: u64,
        at_ms: i64,
        state_format: u32,
        state: &str,
    ) -> Result<(), StoreError> {
        // The state after a batch is one state: a second snapshot of it changes nothing.
        let exists = self
            .conn
            .prepare("SELECT 1 FROM snapshots WHERE seq = ?1")?
            .exists(params![seq as i64])?;
        if exists {
            return Ok(());
        }
        // Pieces left by a snapshot of the same batch that a crash interrupted.
        self.conn.execute(
            "DELETE FROM snapshot_chunks WHERE seq = ?1",
            params![seq as i64],
        )?;
        let pieces = chunks(state, SNAPSHOT_CHUNK);
        for (idx, piece) in pieces.iter().enumerate() {
            self.conn.execute(
                "INSERT INTO snapshot_chunks (seq, idx, data) VALUES (?1, ?2, ?3)",
                params![seq as i64, idx as i64, piece],
            )?;
        }
        // The snapshot exists once this row does: a crash before it leaves only pieces,
        // which the next snapshot clears.
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT OR REPLACE INTO snapshots (seq, at_ms, version, format, state, chunks) VALUES (?1, ?2, ?3, ?4, '', ?5)",
            params![seq as i64, at_ms, self.writer.version, state_format, pieces.len() as i64],
        )?;
        let previous: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM snapshots WHERE seq < ?1",
            params![seq as i64],
            |r| r.get(0),
        )?;
        tx.execute("DELETE FROM snapshots WHERE seq < ?1", params![previous])?;
        tx.execute(
            "DELETE FROM snapshot_chunks WHERE seq NOT IN (SELECT seq FROM snapshots)",
            [],
        )?;
        tx.execute("DELETE FROM batches WHERE seq <= ?1", params![previous])?;
        tx.commit()?;
        self.last_seq = self.last_seq.max(seq);
        Ok(())
    }

    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT seq, at_ms, commands, decisions FROM batches ORDER BY seq")?;
        let writers = self.writers()?;
        let mut rows = stmt.query([])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let seq = row.get::<_, i64>(0)? as u64;
            let batch = Batch {
                seq,
                at_ms: row.get(1)?,
                commands: row.get(2)?,
                decisions: row.get(3)?,
                writer: writer_of(&writers, seq),
            };
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
    writer: Option<Writer>,
    /// Oldest first.
    snapshots: Vec<Snapshot>,
    last_seq: u64,
}

impl Log for MemoryLog {
    fn set_writer(&mut self, writer: &Writer) -> Result<(), StoreError> {
        self.writer = Some(writer.clone());
        Ok(())
    }

    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError> {
        self.last_seq += 1;
        let seq = self.last_seq;
        self.batches.push(Batch {
            seq,
            at_ms,
            commands: commands.to_string(),
            decisions: decisions.to_string(),
            writer: self.writer.clone().unwrap_or_else(Writer::legacy),
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

    fn last_seq(&self) -> u64 {
        self.last_seq
    }

    fn snapshots(&self) -> Result<Vec<Snapshot>, StoreError> {
        Ok(self.snapshots.iter().rev().cloned().collect())
    }

    fn write_snapshot(
        &mut self,
        seq: u64,
        at_ms: i64,
        state_format: u32,
        state: &str,
    ) -> Result<(), StoreError> {
        let version = self.writer.clone().unwrap_or_else(Writer::legacy).version;
        self.snapshots.retain(|s| s.seq < seq);
        self.snapshots.push(Snapshot {
            seq,
            at_ms,
            writer: Writer {
                version,
                format: state_format,
            },
            state: state.to_string(),
        });
        let drop_before = self.snapshots.len().saturating_sub(2);
        self.snapshots.drain(..drop_before);
        let previous = if self.snapshots.len() == 2 {
            self.snapshots[0].seq
        } else {
            0
        };
        self.batches.retain(|b| b.seq > previous);
        self.last_seq = self.last_seq.max(seq);
        Ok(())
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

    /// A reserved write-ahead log keeps every batch: those before the zeros, those written
    /// over them, and after a crash (the files copied while the store is open, as a kill -9
    /// leaves them) as after a clean close.
    #[test]
    fn a_reserved_write_ahead_log_keeps_every_batch_through_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qm.sqlite3");
        let wal = dir.path().join("qm.sqlite3-wal");
        let mut log = SqliteLog::open(&path).unwrap();
        log.append(1, "[1]", "").unwrap();
        let before = std::fs::metadata(&wal).unwrap().len();
        log.reserve_wal(1 << 20).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 1 << 20);
        // Never shortened, nor written over.
        log.reserve_wal(1000).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 1 << 20);
        assert!(before < 1 << 20, "{before}");
        for i in 2..=50 {
            log.append(i, &format!("[{i}]"), "").unwrap();
        }
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 1 << 20, "it grew");
        let crashed = tempfile::tempdir().unwrap();
        for f in ["qm.sqlite3", "qm.sqlite3-wal"] {
            std::fs::copy(dir.path().join(f), crashed.path().join(f)).unwrap();
        }
        drop(log);
        for store in [path, crashed.path().join("qm.sqlite3")] {
            let log = SqliteLog::open(&store).unwrap();
            let commands: Vec<String> = collect(&log).into_iter().map(|b| b.commands).collect();
            let expected: Vec<String> = (1..=50).map(|i| format!("[{i}]")).collect();
            assert_eq!(commands, expected, "{}", store.display());
        }
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

    fn writer(version: &str) -> Writer {
        Writer {
            version: version.into(),
            format: 1,
        }
    }

    /// A store exactly as schema 1 (release 7368e83) created it.
    fn schema_1_store(path: &Path, batches: &[&str]) {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE batches (seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL,
                                   commands TEXT NOT NULL, decisions TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '1');",
        )
        .unwrap();
        for (i, c) in batches.iter().enumerate() {
            conn.execute(
                "INSERT INTO batches (at_ms, commands, decisions) VALUES (?1, ?2, '')",
                params![i as i64, c],
            )
            .unwrap();
        }
    }

    #[test]
    fn a_schema_1_store_is_migrated_and_its_batches_keep_their_legacy_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qm.sqlite3");
        schema_1_store(&path, &["[1]", "[2]"]);
        let mut log = SqliteLog::open(&path).unwrap();
        assert_eq!(log.meta("schema_version").unwrap().as_deref(), Some("3"));
        log.set_writer(&writer("new")).unwrap();
        log.append(5, "[3]", "").unwrap();
        drop(log);
        let log = SqliteLog::open(&path).unwrap();
        let got: Vec<(String, Writer)> = collect(&log)
            .into_iter()
            .map(|b| (b.commands, b.writer))
            .collect();
        assert_eq!(
            got,
            vec![
                ("[1]".into(), Writer::legacy()),
                ("[2]".into(), Writer::legacy()),
                ("[3]".into(), writer("new")),
            ]
        );
    }

    #[test]
    fn each_batch_is_attributed_to_the_build_that_appended_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = SqliteLog::open(&dir.path().join("w.sqlite3")).unwrap();
        log.set_writer(&writer("a")).unwrap();
        log.append(1, "1", "").unwrap();
        log.set_writer(&writer("a")).unwrap();
        log.append(2, "2", "").unwrap();
        // A build that starts and appends nothing leaves no trace.
        log.set_writer(&writer("b")).unwrap();
        log.set_writer(&writer("c")).unwrap();
        log.append(3, "3", "").unwrap();
        let versions: Vec<String> = collect(&log)
            .into_iter()
            .map(|b| b.writer.version)
            .collect();
        assert_eq!(versions, ["a", "a", "c"]);
        assert_eq!(log.writers().unwrap().len(), 2);
    }

    #[test]
    fn a_snapshot_drops_what_the_one_before_it_covered_and_sequence_numbers_keep_growing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite3");
        let seqs = |log: &SqliteLog| -> Vec<u64> { collect(log).iter().map(|b| b.seq).collect() };
        {
            let mut log = SqliteLog::open(&path).unwrap();
            log.set_writer(&writer("a")).unwrap();
            for i in 0..3 {
                log.append(i, "c", "d").unwrap();
            }
            // The first snapshot drops nothing: it has no predecessor to fall back to.
            log.write_snapshot(3, 30, 7, "state@3").unwrap();
            assert_eq!(seqs(&log), [1, 2, 3]);
            assert_eq!(log.append(40, "after", "").unwrap(), 4);
            log.write_snapshot(4, 45, 7, "state@4").unwrap();
            assert_eq!(seqs(&log), [4], "what the snapshot at 3 covered is gone");
        }
        let mut log = SqliteLog::open(&path).unwrap();
        assert_eq!(log.last_seq(), 4);
        let kept: Vec<(u64, String)> = log
            .snapshots()
            .unwrap()
            .into_iter()
            .map(|s| (s.seq, s.state))
            .collect();
        assert_eq!(kept, [(4, "state@4".into()), (3, "state@3".into())]);
        let snap = log.snapshot().unwrap().expect("a snapshot");
        assert_eq!((snap.seq, snap.at_ms), (4, 45));
        assert_eq!(
            snap.writer,
            Writer {
                version: "a".into(),
                format: 7
            }
        );
        // Another drops the first and the batches up to the second; no seq is ever reused.
        log.append(60, "x", "").unwrap();
        log.write_snapshot(5, 61, 7, "state@5").unwrap();
        drop(log);
        let mut log = SqliteLog::open(&path).unwrap();
        assert_eq!((seqs(&log), log.last_seq()), (vec![5], 5));
        assert_eq!(log.snapshots().unwrap().len(), 2);
        assert_eq!(log.append(70, "y", "").unwrap(), 6);
    }

    #[test]
    fn a_large_snapshot_is_written_in_pieces_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = SqliteLog::open(&dir.path().join("c.sqlite3")).unwrap();
        log.append(1, "c", "d").unwrap();
        // Multi-byte characters across piece boundaries.
        let state: String = "é-ü-∑-".repeat(SNAPSHOT_CHUNK / 3);
        log.write_snapshot(1, 10, 1, &state).unwrap();
        let pieces: i64 = log
            .conn
            .query_row("SELECT COUNT(*) FROM snapshot_chunks", [], |r| r.get(0))
            .unwrap();
        assert!(pieces > 1, "{pieces}");
        assert_eq!(log.snapshot().unwrap().unwrap().state, state);
        assert_eq!(chunks("", 4), Vec::<&str>::new());
        assert_eq!(chunks("abcdef", 4), ["abcd", "ef"]);
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
