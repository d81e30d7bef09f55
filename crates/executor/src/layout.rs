//! Where an attempt's files live. Everything of a job sits under `data_dir/jobs/<job_id>/`, so
//! checkpoints, model and output survive from one attempt to the next, while logs are kept
//! per attempt:
//!
//! ```text
//! data_dir/jobs/<job_id>/
//!   checkpoints/            SM_CHECKPOINT_DIR (unless the payload's LocalPath is usable)
//!   model/                  SM_MODEL_DIR
//!   output/                 SM_OUTPUT_DIR; output/failure is the job's failure message,
//!                           output/progress.json its steps (QM_PROGRESS_FILE), both
//!                           removed when an attempt starts
//!   output/data/            SM_OUTPUT_DATA_DIR
//!   input/config/           SM_INPUT_CONFIG_DIR: hyperparameters.json, inputdataconfig.json,
//!                           resourceconfig.json (local executor), made afresh every attempt
//!   input/config-algo-<i>/  the same for host algo-i, i >= 2 (local executor)
//!   input/data/<channel>/   SM_CHANNEL_<CHANNEL>, one per InputDataConfig channel
//!   work/                   the processes' working directory
//!   attempts/<n>/           the log directory of attempt number n
//!     stdout.log stderr.log                 algo-1
//!     stdout-algo-<i>.log stderr-algo-<i>.log   algo-i, i >= 2
//! data_dir/jobs/.spare-<pid>/  a free supervisor's spare: a new job's directories, made
//!                           ahead and renamed into place (spare_dir)
//! ```

use qm_core::AttemptId;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::isolation::{self, JobUids};

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

/// Writes `bytes` to a new file at `path`, readable by its owner only (0600), never through a
/// link: whatever was at `path` is removed first, and the file is created anew.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = fs::remove_file(path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)
}

/// The per-job directory.
pub(crate) fn job_dir(data_dir: &Path, job_id: &str) -> PathBuf {
    data_dir.join("jobs").join(job_id)
}

/// Makes the attempt directory `dir` ([`JobLayout`]'s `attempt_dir`,
/// `<data dir>/jobs/<job>/attempts/<n>`) and what is missing of it below `jobs` (an attempt
/// that failed before its directories were made), never `jobs` or above: a data dir removed
/// under a supervisor stays removed, and the outcome has nowhere to go. A directory of another
/// shape needs its parent.
pub(crate) fn make_attempt_dir(dir: &Path) -> io::Result<()> {
    let made = match dir.ancestors().nth(3) {
        Some(jobs) if jobs.file_name() == Some(std::ffi::OsStr::new("jobs")) => {
            fs::symlink_metadata(jobs).and_then(|_| fs::create_dir_all(dir))
        }
        _ => fs::create_dir(dir),
    };
    match made {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// The name prefix of spare job directories (`jobs/.spare-<pid>`): never a job id, which the
/// server makes a UUID.
pub(crate) const SPARE_PREFIX: &str = ".spare-";

/// The spare job directory of process `pid`: the directories every job has, made while its
/// supervisor waits free, renamed into place for its next new job. Creating a directory costs
/// the file system an inode (60 to 120 µs each on the 2-core VM the benchmarks run on, eight
/// of them a job): made ahead, they are off the path from an owner's reclaim to its job
/// running.
pub(crate) fn spare_dir(data_dir: &Path, pid: u32) -> PathBuf {
    data_dir.join("jobs").join(format!("{SPARE_PREFIX}{pid}"))
}

/// Removes every spare job directory under `data_dir`, at a server's start: a killed
/// supervisor leaves its spare behind, and one that outlived its server keeps one it no
/// longer needs. Each is first renamed out of the way, so that a supervisor taking it for a
/// new job at that moment either gets it whole or not at all, and this never empties the
/// job's directory it became. Only directories of the server are there.
pub(crate) fn remove_spares(data_dir: &Path) {
    let jobs = data_dir.join("jobs");
    let Ok(entries) = fs::read_dir(&jobs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(SPARE_PREFIX) {
            continue;
        }
        let away = jobs.join(format!(".removing{name}-{}", std::process::id()));
        if rename_new(&entry.path(), &away) {
            let _ = fs::remove_dir_all(&away);
        }
    }
}

/// Makes the spare job directory `spare` (see [`spare_dir`]), as [`JobLayout::prepare`] would
/// make a new job's directories before handing them over: the server's, 0700 at the top. A
/// spare already there is left as it is (`AlreadyExists`); one that cannot be made whole is
/// removed.
pub(crate) fn make_spare(spare: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().mode(0o700).create(spare)?;
    let layout = JobLayout::at(spare.to_path_buf(), 1);
    let attempts = layout.attempt_dir.parent().expect("attempts/<n>");
    let made = std::iter::once(attempts)
        .chain(layout.job_dirs().map(PathBuf::as_path))
        .try_for_each(|dir| {
            let rel = dir.strip_prefix(spare).expect("in the spare");
            isolation::real_dirs(spare, rel, false, None)
        });
    if made.is_err() {
        let _ = fs::remove_dir_all(spare);
    }
    made
}

/// Moves `from` to `to` unless something is there already; whether it did. Atomic: of two
/// processes renaming one spare (a supervisor taking it, a server removing it), one wins.
fn rename_new(from: &Path, to: &Path) -> bool {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).is_ok()
}

/// Whether a job id can name a directory without escaping `data_dir/jobs` (ids are UUIDs, but
/// the id reaches the file system, so it is checked rather than trusted).
pub(crate) fn valid_job_id(job_id: &str) -> bool {
    !job_id.is_empty()
        && job_id.len() <= 128
        // Nor a hidden name: the spares' (`.spare-<pid>`) among them.
        && !job_id.starts_with('.')
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// What [`JobLayout::prepare`] found of the job's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobDir {
    /// Made just now, or taken from a spare: it holds the directories `prepare` made and
    /// nothing else (no file of an earlier attempt, no config directory, no checkpoint), so
    /// nothing need be looked for in it.
    Fresh,
    /// An earlier attempt's: whatever that attempt left may be there.
    Earlier,
}

/// The paths of one attempt of one job.
#[derive(Debug, Clone)]
pub(crate) struct JobLayout {
    /// `data_dir/jobs/<job_id>`.
    pub(crate) job: PathBuf,
    pub(crate) checkpoints: PathBuf,
    pub(crate) model: PathBuf,
    pub(crate) output: PathBuf,
    pub(crate) output_data: PathBuf,
    pub(crate) input: PathBuf,
    pub(crate) input_config: PathBuf,
    pub(crate) input_data: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) attempt_dir: PathBuf,
    /// Where absolute paths of the payload (CheckpointConfig.LocalPath) are re-rooted.
    pub(crate) root: PathBuf,
}

impl JobLayout {
    pub(crate) fn new(data_dir: &Path, job_id: &str, attempt_number: u32) -> Self {
        Self::at(job_dir(data_dir, job_id), attempt_number)
    }

    /// The layout of the job directory `job`.
    fn at(job: PathBuf, attempt_number: u32) -> Self {
        JobLayout {
            checkpoints: job.join("checkpoints"),
            model: job.join("model"),
            output: job.join("output"),
            output_data: job.join("output").join("data"),
            input: job.join("input"),
            input_config: job.join("input").join("config"),
            input_data: job.join("input").join("data"),
            work: job.join("work"),
            attempt_dir: job.join("attempts").join(attempt_number.to_string()),
            root: job.join("root"),
            job,
        }
    }

    /// The directories every job has and its attempts may write, in the order they are
    /// made (the attempts' log directories aside).
    fn job_dirs(&self) -> [&PathBuf; 5] {
        [
            &self.checkpoints,
            &self.model,
            &self.output_data,
            &self.input_data,
            &self.work,
        ]
    }

    /// The file a failing job writes its reason to (SageMaker's /opt/ml/output/failure).
    pub(crate) fn failure_file(&self) -> PathBuf {
        self.output.join("failure")
    }

    /// The file the job appends its steps to ([`crate::progress`]).
    pub(crate) fn progress_file(&self) -> PathBuf {
        self.output.join(crate::progress::PROGRESS_FILE)
    }

    /// Creates the directories and, in a job directory of an earlier attempt, removes that
    /// attempt's failure and progress files, so a stale message never explains this attempt's
    /// failure and the previous attempt's steps never count as this one's. Says whether the job
    /// directory is fresh; returns the path that failed.
    ///
    /// A link or a file the previous attempt left where a directory belongs is replaced, never
    /// followed: the server may be root, and the job must not point it elsewhere. With
    /// `owner` (the attempt's uid, [`crate::isolation`]) the job directory is made
    /// traversable but not listable and the job's directories are handed to that uid.
    pub(crate) fn prepare(
        &self,
        owner: Option<(u32, JobUids)>,
    ) -> Result<JobDir, (PathBuf, io::Error)> {
        // A job directory made now holds only what is made below, already the job's.
        // 0700 until its mode is set below: nobody else may put anything in it meanwhile,
        // whatever the process's umask.
        // This process's spare, when it has one, is such a directory made ahead: what is
        // left to do below makes no inode but the attempt's own directory.
        use std::os::unix::fs::DirBuilderExt;
        let spare = self
            .job
            .parent()
            .and_then(Path::parent)
            .map(|data_dir| spare_dir(data_dir, std::process::id()));
        let from_spare = spare.is_some_and(|spare| rename_new(&spare, &self.job));
        let made = if from_spare {
            Ok(())
        } else {
            fs::DirBuilder::new().mode(0o700).create(&self.job)
        };
        let fresh = match made {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(_) => {
                fs::create_dir_all(&self.job).map_err(|e| (self.job.clone(), e))?;
                false
            }
        };
        let uid = owner.map(|(uid, _)| uid);
        if let Err(e) = self.make_dirs(uid, from_spare) {
            if from_spare {
                // Nothing of the job is in it yet. Left, the next attempt would find the
                // spare's directories still the server's, and hand over only the top ones.
                let _ = fs::remove_dir_all(&self.job);
            }
            return Err(e);
        }
        if owner.is_some() {
            isolation::set_mode(&self.job, 0o711).map_err(|e| (self.job.clone(), e))?;
        }
        if fresh {
            // Every directory of it was made just now by `real_dirs`, or taken from a spare
            // and handed over by `make_dirs` (the job's and 0700 where it has a uid): there
            // is nothing to hand over (a walk of them all is a third of a trivial job's
            // set-up calls), and no earlier attempt's file to remove.
            return Ok(JobDir::Fresh);
        }
        if let Some((uid, range)) = owner {
            let dirs = [
                &self.checkpoints,
                &self.model,
                &self.output,
                &self.input,
                &self.work,
                &self.root,
            ];
            let dirs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
            isolation::hand_over(&dirs, uid, range).map_err(|e| (self.job.clone(), e))?;
        }
        self.remove_stale()?;
        Ok(JobDir::Earlier)
    }

    /// Makes the attempt's directory and the job's (handed to `uid` as they are made, or, made
    /// from a spare, found there and handed over after).
    ///
    /// A spare's directories are handed over by their paths: only root ever wrote in the
    /// spare, and the job's directory is still the server's and 0700 (a process of another
    /// uid can look up nothing below it), so nothing else can have put a link or a file in
    /// it. Two system calls a directory, where [`Self::own_spare`] (through each directory,
    /// after looking at each) makes six. A spare that was not whole after all (one a process
    /// of the same pid left half-made or half-removed: `NotFound`, or `NotADirectory` below
    /// something that is not a directory) takes the careful way, which makes what is missing.
    fn make_dirs(&self, uid: Option<u32>, from_spare: bool) -> Result<(), (PathBuf, io::Error)> {
        self.real_dir(&self.attempt_dir, None)?;
        if let (Some(uid), true) = (uid, from_spare) {
            match self.spare_dirs(|dir| isolation::own_private_dir(dir, uid)) {
                Err((_, e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) => {}
                done => return done,
            }
        }
        for dir in self.job_dirs() {
            self.real_dir(dir, uid)?;
        }
        match uid {
            Some(uid) if from_spare => self.own_spare(uid),
            _ => Ok(()),
        }
    }

    /// Makes `dir`, one of the layout's, and what is missing between it and the job's
    /// directory ([`isolation::real_dirs`], handed to `owner` as they are made).
    fn real_dir(&self, dir: &Path, owner: Option<u32>) -> Result<(), (PathBuf, io::Error)> {
        let rel = dir
            .strip_prefix(&self.job)
            .expect("the layout's directories are in the job's");
        isolation::real_dirs(&self.job, rel, true, owner).map_err(|e| (dir.to_path_buf(), e))
    }

    /// Hands the job's directories, made from a spare, to `uid` (see [`Self::spare_dirs`]).
    fn own_spare(&self, uid: u32) -> Result<(), (PathBuf, io::Error)> {
        self.spare_dirs(|dir| isolation::own_dir(dir, uid))
    }

    /// Calls `own` on each of [`Self::job_dirs`] and the directories between it and the
    /// job's, once each; the first error, with its directory.
    fn spare_dirs(
        &self,
        own: impl Fn(&Path) -> io::Result<()>,
    ) -> Result<(), (PathBuf, io::Error)> {
        let mut owned: Vec<&Path> = Vec::with_capacity(8);
        for dir in self.job_dirs() {
            for sub in dir.ancestors().take_while(|a| *a != self.job) {
                if !owned.contains(&sub) {
                    own(sub).map_err(|e| (sub.to_path_buf(), e))?;
                    owned.push(sub);
                }
            }
        }
        Ok(())
    }

    /// Removes the previous attempt's failure and progress files.
    fn remove_stale(&self) -> Result<(), (PathBuf, io::Error)> {
        for stale in [self.failure_file(), self.progress_file()] {
            match fs::remove_file(&stale) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err((stale, e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// The checkpoint directory of this attempt: the payload's `CheckpointConfig.LocalPath`
    /// when it can be created and written (relative paths count from `work/`, absolute ones
    /// from the job's `root/`, and neither may leave it), else the job's own `checkpoints/`.
    /// Either way the choice is logged, since a job that looks for its checkpoints in the
    /// wrong place silently starts over. With `owner`, the server does not probe the path
    /// (it would follow the job's links as root) but makes its directories real ones of that
    /// uid, and falls back where a component is a link.
    pub(crate) fn checkpoint_dir(
        &self,
        requested: Option<&Path>,
        attempt: AttemptId,
        owner: Option<u32>,
    ) -> PathBuf {
        let Some(requested) = requested else {
            return self.checkpoints.clone();
        };
        // `/opt/ml/checkpoints[/...]` is the job's own `checkpoints/` (mounted there, and
        // SageMaker's default must be the checkpoints that are synced); any other absolute
        // path, `/opt/ml/...` included, is re-rooted under `root/` (the rest of the job's
        // directory, `attempts/` above all, stays the server's), relative ones count from
        // `work/`.
        let opt_ml_checkpoints = Path::new(crate::namespace::OPT_ML).join("checkpoints");
        let (base, requested) = match requested.strip_prefix(&opt_ml_checkpoints) {
            Ok(inside) => ("checkpoints", inside),
            Err(_) if requested.is_absolute() => ("root", requested),
            Err(_) => ("work", requested),
        };
        let confined = isolation::confine(Path::new(base), requested);
        let Some(rel) = confined else {
            tracing::warn!(attempt = attempt.0, requested = %requested.display(), using = %self.checkpoints.display(),
                "CheckpointConfig.LocalPath leaves the job's directory; using the job's checkpoint directory");
            return self.checkpoints.clone();
        };
        let path = self.job.join(&rel);
        let made = match owner {
            Some(uid) => isolation::real_dirs(&self.job, &rel, false, Some(uid)),
            None => probe_writable(&path, attempt),
        };
        match made {
            Ok(()) => {
                tracing::info!(attempt = attempt.0, path = %path.display(), "checkpoints go to the payload's CheckpointConfig.LocalPath");
                path
            }
            Err(e) => {
                tracing::warn!(
                    attempt = attempt.0,
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
fn probe_writable(dir: &Path, attempt: AttemptId) -> io::Result<()> {
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

    /// A data dir's job root with this process's spare made in it: the root (kept alive by
    /// the returned directory) and the spare.
    fn root_with_spare() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        prepare_root(dir.path()).unwrap();
        let spare = spare_dir(dir.path(), std::process::id());
        make_spare(&spare).unwrap();
        (dir, spare)
    }

    /// A new job's directory is this process's spare, renamed; a job that has one keeps it
    /// and the spare waits for the next new job. Either way the job has every directory.
    #[test]
    fn a_spare_becomes_a_new_jobs_directory_and_an_existing_job_keeps_its_own() {
        let (dir, spare) = root_with_spare();
        let has_all = |layout: &JobLayout| {
            std::iter::once(&layout.attempt_dir)
                .chain(layout.job_dirs())
                .all(|d| d.is_dir())
        };

        let new = JobLayout::new(dir.path(), "j1", 1);
        new.prepare(None).unwrap();
        assert!(has_all(&new));
        assert!(!spare.exists(), "the spare became the job's directory");

        make_spare(&spare).unwrap();
        fs::write(new.work.join("kept"), "x").unwrap();
        let again = JobLayout::new(dir.path(), "j1", 2);
        again.prepare(None).unwrap();
        assert!(has_all(&again) && again.work.join("kept").exists());
        assert!(
            spare.is_dir(),
            "a job with a directory leaves the spare alone"
        );

        remove_spares(dir.path());
        assert!(!spare.exists());
        assert!(again.job.is_dir());
    }

    /// Under isolation a job made from a spare is handed over as a job made anew: every
    /// directory the job writes is its uid's and 0700, the attempts' the server's.
    #[test]
    fn a_spare_is_handed_to_the_attempts_uid() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to hand directories over");
            return;
        }
        let (dir, _) = root_with_spare();
        let uid = JobUids::DEFAULT.first + 7;
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare(Some((uid, JobUids::DEFAULT))).unwrap();
        assert_job_writes_as(&layout, uid);
        assert_eq!(fs::metadata(&layout.attempt_dir).unwrap().uid(), 0);
        assert_eq!(fs::metadata(&layout.job).unwrap().mode() & 0o777, 0o711);
    }

    /// The same without root: handed to this process's own uid, every directory the job
    /// writes is still made 0700 (a spare's are made with the umask's mode).
    #[test]
    fn a_spare_is_handed_over_with_the_jobs_mode_by_any_user() {
        let (dir, _) = root_with_spare();
        let me = nix::unistd::geteuid().as_raw();
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare(Some((me, JobUids::DEFAULT))).unwrap();
        assert_job_writes_as(&layout, me);
    }

    /// A spare left half-made (by a process of the same pid that died making it) is made
    /// whole the careful way when it is taken: the job gets every directory, handed over.
    #[test]
    fn a_half_made_spare_is_made_whole_when_it_is_taken() {
        let (dir, spare) = root_with_spare();
        fs::remove_dir_all(spare.join("output")).unwrap();
        fs::remove_dir(spare.join("work")).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare(Some((me, JobUids::DEFAULT))).unwrap();
        assert!(!spare.exists(), "the spare became the job's directory");
        assert!(layout.attempt_dir.is_dir());
        assert_job_writes_as(&layout, me);
    }

    /// Every directory the job writes (and those above them in the job's) is `uid`'s, 0700.
    fn assert_job_writes_as(layout: &JobLayout, uid: u32) {
        use std::os::unix::fs::MetadataExt;
        for d in [&layout.output, &layout.input]
            .into_iter()
            .chain(layout.job_dirs())
        {
            let m = fs::metadata(d).unwrap();
            assert_eq!((m.uid(), m.mode() & 0o777), (uid, 0o700), "{}", d.display());
        }
    }

    #[test]
    fn job_ids_that_could_escape_the_jobs_directory_are_invalid() {
        assert!(valid_job_id("0b9d7c1e-3f3a-4c55-9a57-2f0f1d3c6a11"));
        for bad in ["", ".", "..", "a/b", "../x", "a b", ".spare-12"] {
            assert!(!valid_job_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_unwritable_local_path_falls_back_to_the_job_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare(None).unwrap();
        // A file where the relative path needs a directory.
        fs::write(layout.work.join("file"), "").unwrap();
        assert_eq!(
            layout.checkpoint_dir(Some(Path::new("file/sub")), AttemptId(1), None),
            layout.checkpoints
        );
        let wanted = layout.work.join("mine");
        assert_eq!(
            layout.checkpoint_dir(Some(Path::new("mine")), AttemptId(1), None),
            wanted
        );
        assert_eq!(
            fs::read_dir(&wanted).unwrap().count(),
            0,
            "the probe file is removed"
        );
    }

    #[test]
    fn a_local_path_that_leaves_the_job_falls_back_and_creates_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let layout = JobLayout::new(dir.path(), "j", 1);
        layout.prepare(None).unwrap();
        for escaping in ["../../../../x", "../../other/checkpoints", "/../../x"] {
            assert_eq!(
                layout.checkpoint_dir(Some(Path::new(escaping)), AttemptId(1), None),
                layout.checkpoints,
                "{escaping}"
            );
        }
        assert!(!dir.path().join("x").exists());
        assert!(!dir.path().join("jobs/other").exists());
        assert_eq!(
            layout.checkpoint_dir(Some(Path::new("/opt/ml/checkpoints")), AttemptId(1), None),
            layout.checkpoints,
            "SageMaker's default is the job's own checkpoints"
        );
        assert_eq!(
            layout.checkpoint_dir(
                Some(Path::new("/opt/ml/checkpoints/run-2")),
                AttemptId(1),
                None
            ),
            layout.checkpoints.join("run-2")
        );
        assert_eq!(
            layout.checkpoint_dir(
                Some(Path::new("/opt/ml/checkpoints/../x")),
                AttemptId(1),
                None
            ),
            layout.checkpoints,
            "'..' never climbs out of checkpoints/"
        );
        // The rest of /opt/ml is the server's (attempts/ holds logs and outcomes): re-rooted.
        for other in ["/opt/ml/attempts", "/opt/ml", "/opt/ml/input/config"] {
            assert_eq!(
                layout.checkpoint_dir(Some(Path::new(other)), AttemptId(1), None),
                layout.root.join(other.trim_start_matches('/')),
                "{other}"
            );
        }
        assert_eq!(
            layout.checkpoint_dir(Some(Path::new("/ckpt")), AttemptId(1), None),
            layout.root.join("ckpt")
        );
    }
}
