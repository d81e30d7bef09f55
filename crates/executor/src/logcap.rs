//! A bound on an attempt's logs (`[limits] log_bytes_per_attempt`, local executor): a log that
//! grows past it is rotated as logrotate's `copytruncate` does, since the job holds the file
//! open. Its content moves to `<name>.1` (replacing the previous one), the log is emptied and
//! starts again with a line that says so. The job writes with `O_APPEND`, so its next write
//! lands at the new end. At most about twice the limit stays on disk per stream; what the
//! job wrote between the copy and the truncation (microseconds) is lost.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Rotates each log of `attempt_dir` that is longer than `limit` bytes.
pub(crate) fn cap(attempt_dir: &Path, limit: u64) {
    let Ok(entries) = fs::read_dir(attempt_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_log = path.extension().is_some_and(|e| e == "log");
        // symlink_metadata: the executor's own files are regular; anything else is left alone.
        let len = match fs::symlink_metadata(&path) {
            Ok(m) if is_log && m.file_type().is_file() => m.len(),
            _ => continue,
        };
        if len > limit {
            if let Err(e) = rotate(&path, limit) {
                tracing::warn!(path = %path.display(), error = %e, "cannot rotate an attempt's log");
            }
        }
    }
}

fn rotate(path: &Path, limit: u64) -> io::Result<()> {
    let mut old = PathBuf::from(path).into_os_string();
    old.push(".1");
    let old = PathBuf::from(old);
    let _ = fs::remove_file(&old);
    let mut copy = OpenOptions::new().write(true).create_new(true).open(&old)?;
    let moved = io::copy(
        &mut File::open(path)?.take(limit.saturating_mul(2)),
        &mut copy,
    )?;
    let log = OpenOptions::new().append(true).open(path)?;
    log.set_len(0)?;
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    writeln!(
        &log,
        "[qm] this log reached {limit} bytes ([limits] log_bytes_per_attempt): its last {moved} bytes are in {}, older output was dropped",
        name(&old)
    )?;
    tracing::info!(path = %path.display(), bytes = moved, "rotated an attempt's log");
    Ok(())
}

/// Opens a new log for a job's stdout or stderr, emptied: appending, so that [`cap`] can
/// empty it under the job. (`O_TRUNC` by hand: the standard library refuses truncate with
/// append, and a separate `ftruncate` is one system call more on every attempt.)
pub(crate) fn create(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(nix::libc::O_TRUNC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_past_the_limit_moves_aside_and_the_writer_goes_on_at_the_new_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        let mut writer = create(&path).unwrap();
        writer.write_all(&[b'a'; 5000]).unwrap();
        cap(dir.path(), 4096);
        writer.write_all(b"after\n").unwrap();
        let now = fs::read_to_string(&path).unwrap();
        assert!(now.starts_with("[qm] this log reached 4096 bytes"), "{now}");
        assert!(
            now.ends_with("stdout.log.1, older output was dropped\nafter\n"),
            "{now}"
        );
        assert_eq!(
            fs::metadata(dir.path().join("stdout.log.1")).unwrap().len(),
            5000
        );
        // Under the limit nothing moves.
        cap(dir.path(), 4096);
        assert!(fs::read_to_string(&path).unwrap().ends_with("after\n"));
    }
}
