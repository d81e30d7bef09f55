//! Where an attempt's files live. Everything of a job sits under `data_dir/jobs/<job_id>/`, so
//! checkpoints, model and output survive from one attempt to the next, while logs are kept
//! per attempt:
//!
//! ```text
//! data_dir/jobs/<job_id>/
//!   checkpoints/            SM_CHECKPOINT_DIR (unless the payload's LocalPath is usable)
//!   model/                  SM_MODEL_DIR
//!   output/                 SM_OUTPUT_DIR; output/failure is the job's failure message
//!   output/data/            SM_OUTPUT_DATA_DIR
//!   work/                   the processes' working directory
//!   attempts/<n>/           the log directory of attempt number n
//!     stdout.log stderr.log                 algo-1
//!     stdout-algo-<i>.log stderr-algo-<i>.log   algo-i, i >= 2
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Which output stream a log file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// The log file name of `stream` for host `algo-<host>` (1-based): `stdout.log` for algo-1,
/// `stdout-algo-2.log` for algo-2, and so on.
pub fn log_file_name(stream: LogStream, host: u32) -> String {
    let stem = match stream {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    };
    if host <= 1 {
        format!("{stem}.log")
    } else {
        format!("{stem}-algo-{host}.log")
    }
}

/// Creates `root/jobs` and returns `root` made absolute and canonical.
pub(crate) fn prepare_root(root: &Path) -> Result<PathBuf, crate::ExecError> {
    let jobs = root.join("jobs");
    fs::create_dir_all(&jobs)
        .map_err(|source| crate::ExecError::CreateDir { path: jobs, source })?;
    fs::canonicalize(root).map_err(|source| crate::ExecError::CreateDir {
        path: root.to_path_buf(),
        source,
    })
}

/// The per-job directory.
pub(crate) fn job_dir(data_dir: &Path, job_id: &str) -> PathBuf {
    data_dir.join("jobs").join(job_id)
}

/// Whether a job id can name a directory without escaping `data_dir/jobs` (ids are UUIDs, but
/// the id reaches the file system, so it is checked rather than trusted).
pub(crate) fn valid_job_id(job_id: &str) -> bool {
    !job_id.is_empty()
        && job_id.len() <= 128
        && job_id != "."
        && job_id != ".."
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The paths of one attempt of one job.
#[derive(Debug, Clone)]
pub(crate) struct JobLayout {
    pub(crate) checkpoints: PathBuf,
    pub(crate) model: PathBuf,
    pub(crate) output: PathBuf,
    pub(crate) output_data: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) attempt_dir: PathBuf,
    /// Where absolute paths of the payload (CheckpointConfig.LocalPath) are re-rooted.
    pub(crate) root: PathBuf,
}

impl JobLayout {
    pub(crate) fn new(data_dir: &Path, job_id: &str, attempt_number: u32) -> Self {
        let job = job_dir(data_dir, job_id);
        JobLayout {
            checkpoints: job.join("checkpoints"),
            model: job.join("model"),
            output: job.join("output"),
            output_data: job.join("output").join("data"),
            work: job.join("work"),
            attempt_dir: job.join("attempts").join(attempt_number.to_string()),
            root: job.join("root"),
        }
    }

    /// The file a failing job writes its reason to (SageMaker's /opt/ml/output/failure).
    pub(crate) fn failure_file(&self) -> PathBuf {
        self.output.join("failure")
    }

    /// Creates the directories and removes the previous attempt's failure file, so a stale
    /// message never explains this attempt's failure. Returns the path that failed.
    pub(crate) fn prepare(&self) -> Result<(), (PathBuf, io::Error)> {
        for dir in [
            &self.attempt_dir,
            &self.checkpoints,
            &self.model,
            &self.output_data,
            &self.work,
        ] {
            fs::create_dir_all(dir).map_err(|e| (dir.clone(), e))?;
        }
        let failure = self.failure_file();
        match fs::remove_file(&failure) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err((failure, e)),
            _ => Ok(()),
        }
    }

    /// The checkpoint directory of this attempt: the payload's `CheckpointConfig.LocalPath`
    /// when it can be created and written (relative paths count from `work/`, absolute ones
    /// from the job's `root/`), else the job's
    /// own `checkpoints/`. Either way the choice is logged, since a job that looks for its
    /// checkpoints in the wrong place silently starts over.
    pub(crate) fn checkpoint_dir(&self, requested: Option<&Path>, attempt: u64) -> PathBuf {
        let Some(requested) = requested else {
            return self.checkpoints.clone();
        };
        // An absolute path (SageMaker's default is /opt/ml/checkpoints/) is re-rooted under the
        // job's directory, as a container's file system would be: jobs must never share one.
        let path = if requested.is_absolute() {
            let relative: PathBuf = requested
                .components()
                .filter(|c| matches!(c, std::path::Component::Normal(_)))
                .collect();
            self.root.join(relative)
        } else {
            self.work.join(requested)
        };
        match probe_writable(&path, attempt) {
            Ok(()) => {
                tracing::info!(attempt, path = %path.display(), "checkpoints go to the payload's CheckpointConfig.LocalPath");
                path
            }
            Err(e) => {
                tracing::warn!(
                    attempt,
                    requested = %path.display(),
                    using = %self.checkpoints.display(),
                    error = %e,
                    "CheckpointConfig.LocalPath cannot be created or written; using the job's checkpoint directory"
                );
                self.checkpoints.clone()
            }
        }
    }
}

/// Creates `dir` and writes and removes a probe file in it.
fn probe_writable(dir: &Path, attempt: u64) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".qm-write-check-{attempt}"));
    fs::File::create(&probe)?;
    fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_host_has_plain_log_names_and_the_others_carry_their_host() {
        assert_eq!(log_file_name(LogStream::Stdout, 1), "stdout.log");
        assert_eq!(log_file_name(LogStream::Stderr, 2), "stderr-algo-2.log");
    }

    #[test]
    fn job_ids_that_could_escape_the_jobs_directory_are_invalid() {
        assert!(valid_job_id("0b9d7c1e-3f3a-4c55-9a57-2f0f1d3c6a11"));
        for bad in ["", ".", "..", "a/b", "../x", "a b"] {
            assert!(!valid_job_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_unwritable_local_path_falls_back_to_the_job_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare().unwrap();
        // A file where the relative path needs a directory.
        fs::write(layout.work.join("file"), "").unwrap();
        assert_eq!(
            layout.checkpoint_dir(Some(Path::new("file/sub")), 1),
            layout.checkpoints
        );
        let wanted = layout.work.join("mine");
        assert_eq!(layout.checkpoint_dir(Some(Path::new("mine")), 1), wanted);
        assert_eq!(
            fs::read_dir(&wanted).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }
}
