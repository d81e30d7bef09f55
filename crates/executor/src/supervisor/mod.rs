//! A supervisor per local attempt, so that running jobs outlive the server (issue 38).
//!
//! Each attempt runs under its own supervisor process (`qm supervise`, [`process`]), not
//! under the server: restarting, upgrading or killing the server leaves the job running. The
//! server and the supervisor talk over the attempt's Unix socket ([`protocol`]); the server
//! records each supervisor's [`Identity`] (boot id, pid, start time) with the attempt, and
//! after a restart it connects to each supervisor again (`link`): an attempt whose
//! supervisor answers is adopted as it is, one that ended while no server watched is recorded
//! as it ended (its outcome file), and only one whose machine rebooted or whose supervisor
//! died is lost.
//!
//! On disk, under the data directory: `supervisors/<attempt>.sock` (the socket, removed when
//! the supervisor exits; `free-<pid>.sock` while a supervisor waits for its next attempt, with
//! its spare job directory `jobs/.spare-<pid>` beside the jobs') and
//! the attempt's `outcome.json` ([`OUTCOME_FILE`]), written while the end is reported —
//! durably unless a server's log holds the end by then — and the supervisor lets the attempt
//! go only once the file is written and a server's log holds the end. The supervisor's own
//! messages go to the server's standard error.
//!
//! Supervisors are forked from a [`zygote`] the server starts once (an exec per attempt costs
//! milliseconds on the path from a reclaim to the owner's job running); without one they are
//! executed. A supervisor whose attempt is acknowledged waits free on its server's connection
//! and runs the next attempt the server starts ([`process`]): most starts fork nothing.

use qm_core::AttemptId;
pub(crate) mod attempt;
pub(crate) mod identity;
pub(crate) mod link;
pub mod process;
pub mod protocol;
pub(crate) mod reap;
pub(crate) mod spawn;
pub(crate) mod wire;
pub mod zygote;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use identity::{boot_id, Identity};
pub use process::main;
pub use protocol::{
    Placement, Running, Settings, Status, DEFAULT_ORPHAN_CHECK, OLDEST_ADOPTED, PROTOCOL,
};

use crate::layout::JobLayout;
use crate::{Exit, Usage};

/// The directory of the supervisors' sockets and logs, under the data directory.
pub const SUPERVISORS_DIR: &str = "supervisors";

/// The file in an attempt's directory that keeps how it ended.
pub const OUTCOME_FILE: &str = "outcome.json";

/// The version of the outcome file this build writes; it reads this one and the bare
/// outcomes that releases before it wrote.
pub const OUTCOME_VERSION: u32 = 1;

/// The socket of attempt `attempt`'s supervisor.
pub fn socket_path(data_dir: &Path, attempt: AttemptId) -> PathBuf {
    data_dir.join(SUPERVISORS_DIR).join(socket_name(attempt))
}

/// The socket of a free supervisor (its attempt acknowledged, waiting for the next one).
pub fn free_socket_path(data_dir: &Path, pid: u32) -> PathBuf {
    data_dir.join(SUPERVISORS_DIR).join(free_socket_name(pid))
}

/// The name of attempt `attempt`'s socket in [`SUPERVISORS_DIR`].
pub(crate) fn socket_name(attempt: AttemptId) -> String {
    format!("{attempt}.sock")
}

/// The name of free supervisor `pid`'s socket in [`SUPERVISORS_DIR`].
pub(crate) fn free_socket_name(pid: u32) -> String {
    format!("{FREE_PREFIX}{pid}.sock")
}

/// How the sockets of free supervisors are named (`free-<pid>.sock`); a server that starts
/// removes the ones a previous server's free supervisors left.
pub const FREE_PREFIX: &str = "free-";

/// The outcome file of attempt number `attempt_number` of job `job_id`.
pub fn outcome_file(data_dir: &Path, job_id: &str, attempt_number: u32) -> PathBuf {
    JobLayout::new(data_dir, job_id, attempt_number)
        .attempt_dir
        .join(OUTCOME_FILE)
}

#[derive(Serialize, Deserialize)]
struct OutcomeFile {
    version: u32,
    outcome: Exit,
    /// What the attempt used (absent in files of earlier releases, and of Slurm attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

/// Writes how an attempt ended so that it survives the server, the supervisor and the machine:
/// a temporary file (created anew, never through a link), fsynced, renamed over the outcome
/// file, and the directory fsynced.
pub(crate) fn write_outcome(path: &Path, outcome: &Exit) -> std::io::Result<()> {
    write_outcome_as(path, outcome, None, Durability::Durable)
}

/// Whether an outcome file must survive the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// It is the attempt's only record: fsynced, file and directory.
    Durable,
    /// A server's log already holds the end durably: the file is a copy for people, and
    /// costs no fsync (two per attempt were most of a drain's time on a slow disk).
    Plain,
}

/// [`write_outcome`], fsynced only when `sync` says it must be.
pub(crate) fn write_outcome_as(
    path: &Path,
    outcome: &Exit,
    usage: Option<Usage>,
    sync: Durability,
) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = outcome_dir(path)?;
    let tmp = path.with_extension("json.tmp");
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&tmp)
    };
    // Created first, and only if that fails is the directory made or a temporary file of a
    // write that never finished removed: the attempt's directory is almost always there and
    // empty of it, and looking first cost four system calls on every attempt's end.
    let mut f = match create() {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::layout::make_attempt_dir(dir)?;
            create()?
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            create()?
        }
        Err(e) => return Err(e),
    };
    let body = serde_json::to_vec(&OutcomeFile {
        version: OUTCOME_VERSION,
        outcome: outcome.clone(),
        usage,
    })
    .map_err(std::io::Error::other)?;
    f.write_all(&body)?;
    if sync == Durability::Plain {
        return std::fs::rename(&tmp, path);
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// [`write_outcome`] by the server itself (a Slurm attempt's), its directories made if they
/// are missing (the server holds its data dir); a failure logged rather than returned (the
/// outcome is reported anyway).
pub(crate) fn record_outcome(path: &Path, outcome: &Exit) {
    let written = outcome_dir(path)
        .and_then(std::fs::create_dir_all)
        .and_then(|()| write_outcome(path, outcome));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot record the attempt's outcome");
    }
}

/// Makes an outcome file [`write_outcome_as`] wrote as [`Durability::Plain`] durable: the
/// file's data, then the directory that holds its name.
pub(crate) fn sync_outcome(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()?;
    std::fs::File::open(outcome_dir(path)?)?.sync_all()
}

/// The directory that holds the outcome file `path` (its attempt's).
pub(crate) fn outcome_dir(path: &Path) -> std::io::Result<&Path> {
    path.parent()
        .ok_or_else(|| std::io::Error::other("an outcome file needs a directory"))
}

/// The outcome written in `attempt_dir`, if any (this build's files and earlier releases').
pub(crate) fn read_outcome(attempt_dir: &Path) -> Option<Exit> {
    read_ended(attempt_dir).map(|(outcome, _)| outcome)
}

/// The outcome written in `attempt_dir`, if any, with what the attempt used where the file
/// says.
pub(crate) fn read_ended(attempt_dir: &Path) -> Option<(Exit, Option<Usage>)> {
    let bytes = std::fs::read(attempt_dir.join(OUTCOME_FILE)).ok()?;
    if let Ok(file) = serde_json::from_slice::<OutcomeFile>(&bytes) {
        return Some((file.outcome, file.usage));
    }
    serde_json::from_slice(&bytes).ok().map(|o| (o, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_written_durably_and_read_in_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let failed = Exit::Failed {
            reason: "exit 3".into(),
            retryable: true,
        };
        write_outcome(&dir.path().join(OUTCOME_FILE), &failed).unwrap();
        assert_eq!(read_outcome(dir.path()), Some(failed));
        let text = std::fs::read_to_string(dir.path().join(OUTCOME_FILE)).unwrap();
        assert!(text.starts_with("{\"version\":1,"), "{text}");
        // What releases before supervisors wrote.
        std::fs::write(dir.path().join(OUTCOME_FILE), b"\"Succeeded\"").unwrap();
        assert_eq!(read_outcome(dir.path()), Some(Exit::Succeeded));
        assert!(!dir.path().join("outcome.json.tmp").exists());
    }

    /// An attempt that failed before its directories were made still gets its outcome file,
    /// under a data dir that is there; under a removed one, nothing is made again.
    #[test]
    fn an_outcome_makes_its_attempt_directory_but_never_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("jobs")).unwrap();
        let path = data.join("jobs/j-1/attempts/1").join(OUTCOME_FILE);
        write_outcome(&path, &Exit::Succeeded).unwrap();
        assert_eq!(read_outcome(path.parent().unwrap()), Some(Exit::Succeeded));
        std::fs::remove_dir_all(&data).unwrap();
        let err = write_outcome(&path, &Exit::Succeeded).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        assert!(!data.exists(), "the removed data dir was made again");
    }

    /// A temporary file a write left behind (a supervisor killed between creating and renaming
    /// it) is replaced, and never followed where it is a link.
    #[test]
    fn an_outcome_replaces_a_temporary_file_left_behind_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(OUTCOME_FILE);
        let tmp = dir.path().join("outcome.json.tmp");
        std::fs::write(&tmp, b"half").unwrap();
        write_outcome(&path, &Exit::Succeeded).unwrap();
        assert_eq!(read_outcome(dir.path()), Some(Exit::Succeeded));
        assert!(!tmp.exists());

        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, b"untouched").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &tmp).unwrap();
        write_outcome(&path, &Exit::Succeeded).unwrap();
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"untouched");
        assert!(!tmp.exists(), "the link is removed, not followed");
    }
}
