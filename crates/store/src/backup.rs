//! Online backup: a consistent copy of a store, taken while a server may be writing it, into one
//! self-contained SQLite file (`qm backup`; restoring is putting that file back as a data dir's
//! `qm.sqlite3`, docs/server.md).
//!
//! The copy goes through SQLite's backup API, a few pages per step with a pause between steps
//! so that a busy server keeps the disk. That API restarts from the first page whenever it sees
//! that another connection changed the source between two steps, so under a server that commits
//! a batch every few milliseconds it could copy forever. Instead the source connection holds
//! one read transaction for the whole copy: in WAL mode that is a snapshot of one committed
//! batch, which the server's later commits (appended to the WAL) do not change and which never
//! blocks them. The copy is therefore the log up to some batch, every batch whole.
//!
//! Nothing but a checked, complete copy ever carries the target's name: the pages go to a
//! temporary file beside it, which is checked (`PRAGMA integrity_check`, `meta.schema_version`),
//! fsynced and then renamed into place. The source connection is query-only: its statements
//! never write the store.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::StoreError;

/// How long the copy waits for a lock the server holds before it gives up. WAL readers are
/// only refused for moments (while a crashed server's WAL is recovered), so this is generous.
const BUSY_LIMIT: Duration = Duration::from_secs(30);

/// How a backup is taken.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// Pages copied per step (SQLite pages are 4 KiB unless the store says otherwise).
    pub pages_per_step: u32,
    /// Pause after each step, so the copy does not take the disk from the server.
    pub pause: Duration,
    /// Replace the target if it exists.
    pub overwrite: bool,
}

impl Default for BackupOptions {
    fn default() -> Self {
        // 4 MiB per step and 10 ms between steps: a 1 GiB store costs 2.5 s of pauses, and the
        // server's fsyncs find the disk free at least every 4 MiB.
        BackupOptions {
            pages_per_step: 1024,
            pause: Duration::from_millis(10),
            overwrite: false,
        }
    }
}

/// How far a backup is, after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupProgress {
    /// Pages written to the copy so far.
    pub pages_copied: u64,
    /// Pages of the snapshot being copied.
    pub pages_total: u64,
}

/// What a finished backup holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSummary {
    /// Size of the backup file.
    pub bytes: u64,
    /// Logged batches in the copy.
    pub batches: u64,
    /// The store's schema version, as the copy records it.
    pub schema_version: i64,
}

/// Copies the store at `store` into the file `target`, calling `progress` after every step.
///
/// The target is refused if it exists (unless [`BackupOptions::overwrite`]), is a directory or
/// is the store itself. On an error nothing is left under the target's name, nor beside it.
pub fn backup(
    store: &Path,
    target: &Path,
    options: &BackupOptions,
    progress: &mut dyn FnMut(BackupProgress),
) -> Result<BackupSummary, StoreError> {
    check_target(store, target, options.overwrite)?;
    let mut source = open_source(store)?;
    let partial = Partial::new(target)?;
    let mut copy = Connection::open(&partial.path)?;
    // The copy is fsynced once, by hand, before it gets its name; a crash before that leaves
    // only the temporary file, so syncing every write of it would buy nothing.
    copy.pragma_update(None, "synchronous", "OFF")?;
    {
        let snapshot = source.transaction()?;
        // Reading starts the read transaction that pins the snapshot the backup copies.
        read_schema_version(&snapshot).map_err(|e| StoreError::NoStore {
            path: store.display().to_string(),
            detail: e.to_string(),
        })?;
        copy_pages(&snapshot, &mut copy, store, options, progress)?;
        // Dropping the transaction ends the snapshot, so the server can checkpoint its WAL.
    }
    drop(source);
    // The pages came with the store's WAL flag; a backup is easier to keep, move and inspect
    // as a single file with no -wal beside it. The server turns WAL back on when it opens it.
    copy.pragma_update(None, "journal_mode", "DELETE")?;
    let Checked {
        batches,
        schema_version,
    } = check_copy(&copy, store)?;
    copy.close().map_err(|(_, e)| e)?;
    partial.commit(target, options.overwrite)?;
    let bytes = std::fs::metadata(target)
        .map_err(io(format!("reading the size of {}", target.display())))?
        .len();
    Ok(BackupSummary {
        bytes,
        batches,
        schema_version,
    })
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { context, source }
}

fn target_error(target: &Path, problem: &str) -> StoreError {
    StoreError::BackupTarget {
        path: target.display().to_string(),
        problem: problem.to_string(),
    }
}

/// Whether something, even a dangling symbolic link, already has this name.
fn occupied(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

fn check_target(store: &Path, target: &Path, overwrite: bool) -> Result<(), StoreError> {
    if target.file_name().is_none() {
        return Err(target_error(target, "it names no file: give a file name"));
    }
    let dir = parent_dir(target);
    if !dir.is_dir() {
        return Err(target_error(
            target,
            &format!(
                "its directory {} does not exist: create it first",
                dir.display()
            ),
        ));
    }
    if !occupied(target) {
        return Ok(());
    }
    if target.is_dir() {
        return Err(target_error(
            target,
            "it is a directory: name a file in it, e.g. qm-backup.sqlite3",
        ));
    }
    if same_file(store, target) {
        return Err(target_error(
            target,
            "it is the store being backed up: name another file",
        ));
    }
    if !overwrite {
        return Err(target_error(
            target,
            "it already exists: pass --force to replace it, or name another file",
        ));
    }
    Ok(())
}

/// Whether two paths name one file, also through symbolic links and `..`.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The directory a file is in, `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn open_source(store: &Path) -> Result<Connection, StoreError> {
    if !store.is_file() {
        return Err(StoreError::NoStore {
            path: store.display().to_string(),
            detail: "no such file".into(),
        });
    }
    // Read-write but query-only rather than read-only: a read-only connection cannot remove
    // the -wal and -shm files it creates beside a stopped server's store, nor checkpoint.
    // Without CREATE a store that vanished meanwhile is an error, not a new empty store.
    let source = Connection::open_with_flags(
        store,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.pragma_update(None, "query_only", true)?;
    source.busy_timeout(BUSY_LIMIT)?;
    Ok(source)
}

fn read_schema_version(conn: &Connection) -> Result<i64, String> {
    let value: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())?;
    let value = value.ok_or("its meta table has no schema_version")?;
    value
        .parse()
        .map_err(|_| format!("its schema_version {value:?} is not a number"))
}

fn copy_pages(
    source: &Connection,
    copy: &mut Connection,
    store: &Path,
    options: &BackupOptions,
    progress: &mut dyn FnMut(BackupProgress),
) -> Result<(), StoreError> {
    let pages = options.pages_per_step.clamp(1, i32::MAX as u32) as i32;
    let backup = Backup::new(source, copy)?;
    let mut busy_since: Option<Instant> = None;
    loop {
        match backup.step(pages)? {
            StepResult::Done => {
                progress(progress_of(&backup));
                return Ok(());
            }
            StepResult::More => {
                busy_since = None;
                progress(progress_of(&backup));
                std::thread::sleep(options.pause);
            }
            // Busy, Locked, or a kind a later rusqlite adds: all say "not now".
            _ => {
                let since = *busy_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= BUSY_LIMIT {
                    return Err(StoreError::Busy {
                        path: store.display().to_string(),
                        waited_s: BUSY_LIMIT.as_secs(),
                    });
                }
                std::thread::sleep(options.pause.max(Duration::from_millis(10)));
            }
        }
    }
}

fn progress_of(backup: &Backup<'_, '_>) -> BackupProgress {
    let p = backup.progress();
    let total = p.pagecount.max(0) as u64;
    BackupProgress {
        pages_copied: total.saturating_sub(p.remaining.max(0) as u64),
        pages_total: total,
    }
}

/// What the check of a copy read from it.
struct Checked {
    batches: u64,
    schema_version: i64,
}

/// The checks a restore relies on: SQLite finds the copy sound, and the store's own metadata
/// and log can be read from it.
fn check_copy(copy: &Connection, store: &Path) -> Result<Checked, StoreError> {
    let bad = |detail: String| StoreError::BadCopy {
        store: store.display().to_string(),
        detail,
    };
    let mut stmt = copy.prepare("PRAGMA integrity_check")?;
    let problems: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    if problems != ["ok"] {
        let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
        return Err(bad(format!("integrity_check: {}", shown.join("; "))));
    }
    let schema_version = read_schema_version(copy).map_err(bad)?;
    let batches: i64 = copy
        .query_row("SELECT COUNT(*) FROM batches", [], |r| r.get(0))
        .map_err(|e| bad(format!("counting its batches: {e}")))?;
    Ok(Checked {
        batches: batches as u64,
        schema_version,
    })
}

/// The temporary file a backup is written to, beside the target so that the final rename stays
/// on one filesystem. Removed, with SQLite's side files, unless committed.
struct Partial {
    path: PathBuf,
    committed: bool,
}

impl Partial {
    fn new(target: &Path) -> Result<Partial, StoreError> {
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        let path = target.with_file_name(format!("{name}.partial-{}", std::process::id()));
        let partial = Partial {
            path,
            committed: false,
        };
        // A file of this name is a leftover of a killed backup with our pid; a stale journal
        // beside it would be rolled back into the new copy, so both go first.
        partial.remove();
        File::create_new(&partial.path)
            .map_err(io(format!("creating {}", partial.path.display())))?;
        Ok(partial)
    }

    fn side_files(&self) -> impl Iterator<Item = PathBuf> + '_ {
        ["", "-journal", "-wal", "-shm"].into_iter().map(|suffix| {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        })
    }

    fn remove(&self) {
        for p in self.side_files() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Syncs the copy, gives it the target's name and syncs the directory, so that after a
    /// crash the target is either absent (or the old file, with overwrite) or the whole copy.
    fn commit(mut self, target: &Path, overwrite: bool) -> Result<(), StoreError> {
        File::open(&self.path)
            .and_then(|f| f.sync_all())
            .map_err(io(format!("syncing {}", self.path.display())))?;
        // The target was checked before the copy; look again in case it appeared meanwhile.
        if !overwrite && occupied(target) {
            return Err(target_error(
                target,
                "it appeared during the copy: pass --force to replace it, or name another file",
            ));
        }
        std::fs::rename(&self.path, target).map_err(io(format!(
            "renaming {} to {}",
            self.path.display(),
            target.display()
        )))?;
        self.committed = true;
        let dir = parent_dir(target);
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("syncing directory {}", dir.display())))?;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.committed {
            self.remove();
        }
    }
}
