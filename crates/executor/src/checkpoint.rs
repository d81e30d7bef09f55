//! Checkpoint detection: one background task scans the checkpoint directories of running
//! attempts every `checkpoint_poll` and reports when the newest modification time moved
//! forward. The scheduler uses it to estimate how much work a preemption would lose. The same
//! task reads the attempts' progress files ([`crate::progress`]) at the same period, which is
//! what coalesces a job's many progress lines into at most one report per poll.
//!
//! A change counts only if it is newer than the newest file that existed when the attempt
//! started. That baseline, rather than the attempt's start time, keeps a previous attempt's
//! checkpoint from counting as new work while staying exact when the file system's coarse
//! timestamps lag the wall clock by a tick.
//!
//! The task itself is the executor's (`executor::background`); this module scans.

use qm_core::AttemptId;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// At most this many directory entries are looked at per scan of one directory tree, so a job
/// writing millions of small files cannot stall the scanner.
pub(crate) const SCAN_ENTRY_LIMIT: usize = 10_000;

/// The newest modification time (ns since the epoch) of any non-directory entry under `dir`,
/// looking at no more than [`SCAN_ENTRY_LIMIT`] entries; symlinks are not followed.
pub(crate) fn newest_mtime_ns(dir: &Path) -> Option<u64> {
    let mut newest: Option<u64> = None;
    let mut seen = 0usize;
    let mut pending: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SCAN_ENTRY_LIMIT {
                return newest;
            }
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                pending.push(entry.path());
                continue;
            }
            // DirEntry::metadata does not follow symlinks: a link's own time counts.
            let mtime = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            newest = newest.max(mtime);
        }
    }
    newest
}

/// The newest mtime of each attempt's checkpoint directory that has a file, walked on the
/// blocking pool since directory walks block.
pub(crate) async fn scan(targets: Vec<(AttemptId, PathBuf)>) -> Vec<(AttemptId, u64)> {
    tokio::task::spawn_blocking(move || {
        targets
            .into_iter()
            .filter_map(|(attempt, dir)| Some((attempt, newest_mtime_ns(&dir)?)))
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// What the scanner knows of one running attempt's checkpoints.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub(crate) dir: PathBuf,
    /// The newest mtime reported or present at start (ns since the epoch; 0 when empty).
    pub(crate) last_seen_ns: u64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_newest_file_anywhere_in_the_tree_counts() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(newest_mtime_ns(dir.path()), None);
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(
            newest_mtime_ns(dir.path()),
            None,
            "directories alone are not checkpoints"
        );
        let old = fs::File::create(dir.path().join("old")).unwrap();
        old.set_modified(UNIX_EPOCH + Duration::from_secs(1_000))
            .unwrap();
        let deep = fs::File::create(dir.path().join("a/b/deep")).unwrap();
        deep.set_modified(UNIX_EPOCH + Duration::from_secs(2_000))
            .unwrap();
        assert_eq!(newest_mtime_ns(dir.path()), Some(2_000_000_000_000));
    }

    #[test]
    fn a_missing_directory_has_no_checkpoint() {
        assert_eq!(
            newest_mtime_ns(Path::new("/nonexistent/qm/checkpoints")),
            None
        );
    }
}
