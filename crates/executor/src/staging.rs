//! The S3 side of SageMaker's contract around an attempt (docs/sagemaker.md): before the
//! processes start, every channel is downloaded into `input/data/<channel>/` and the
//! checkpoints are restored from `CheckpointConfig.S3Uri`; while they run, changed checkpoint
//! files are uploaded every `checkpoint_sync` ([`CheckpointSync`]); once they are gone (a
//! preempted job's last checkpoint included), the checkpoints are uploaded a last time, and
//! after a success `model/` and `output/data/` go to `<S3OutputPath>/<TrainingJobName>/output/`
//! as `model.tar.gz` and `output.tar.gz`.
//!
//! All of it is part of the attempt: its instances stay held, the job is STARTING with a
//! reason that says how far the download is, and every step and failure is a `[qm]` line in
//! host algo-1's `stderr.log`. A failed transfer fails the attempt with the storage's error in
//! the reason, before the entrypoint runs. A job's own files are read with the job's uid.

use qm_core::AttemptId;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use qm_storage::{Progress, Storage, StorageError, SyncState};
use tokio::time::Instant;

use crate::layout::{log_file_name, JobLayout};
use crate::outcome::CLIENT_ERROR;
use crate::{isolation, Exit, LaunchSpec};

/// How often a download's progress may become the job's status reason (each is a logged
/// command on the server).
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// Reports why an attempt has not started yet (`ExecEvent::Starting`), by attempt.
pub(crate) type Report = Arc<dyn Fn(AttemptId, String) + Send + Sync>;

/// One attempt's transfers.
pub(crate) struct Stage {
    report: Report,
    storage: Arc<Storage>,
    attempt: AttemptId,
    uid: Option<u32>,
    /// Host algo-1's `stderr.log`, opened at the first line said: most attempts (nothing in
    /// `model/`, no channels) never say one, and a drain of trivial jobs pays no open for it.
    log_path: PathBuf,
    log: Option<File>,
}

/// `3.2 GiB`, `512 KiB`, `12 B`.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl Stage {
    /// Transfers for attempt `spec` in `layout`, logging to host algo-1's `stderr.log`.
    pub(crate) fn new(
        report: Report,
        storage: Arc<Storage>,
        spec: &LaunchSpec,
        layout: &JobLayout,
        uid: Option<u32>,
    ) -> Stage {
        Stage {
            report,
            storage,
            attempt: spec.attempt,
            uid,
            log_path: layout
                .attempt_dir
                .join(log_file_name(crate::LogStream::Stderr, 1)),
            log: None,
        }
    }

    /// A `[qm]` line in the attempt's log, and the server's log.
    fn say(&mut self, line: &str) {
        tracing::info!(attempt = self.attempt.0, "{line}");
        if self.log.is_none() {
            // Appended: the processes' own output follows (or, on Slurm, may already be there).
            self.log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)
                .ok();
        }
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "[qm] {line}");
        }
    }

    /// Downloads every channel and restores the checkpoints; `Err` is how the attempt ends
    /// (a location that names nothing, or that may not be used, is not retried: it will not
    /// change by itself). Returns what the checkpoint directory holds after the restore.
    pub(crate) async fn stage_in(
        &mut self,
        spec: &LaunchSpec,
        layout: &JobLayout,
        checkpoint_dir: &Path,
    ) -> Result<Option<SyncState>, Exit> {
        for c in &spec.channels {
            let dir = crate::input::channel_dir(layout, &c.name);
            let what = format!("channel {}", c.name);
            let manifest = c.data_type == "ManifestFile";
            if c.distribution == "ShardedByS3Key" && spec.count > 1 {
                self.say(&format!(
                    "{what}: ShardedByS3Key is served as FullyReplicated (the hosts share one job directory)"
                ));
            }
            self.download(&what, &c.uri, &dir, manifest)
                .await
                .map_err(|e| Exit::Failed {
                    reason: format!("{CLIENT_ERROR}downloading {what} from {}: {e}", c.uri),
                    retryable: !e.is_permanent(),
                })?;
        }
        let Some(uri) = &spec.checkpoint_uri else {
            return Ok(None);
        };
        self.restore(uri, layout, checkpoint_dir)
            .await
            .map_err(|reason| Exit::Failed {
                reason,
                retryable: true,
            })?;
        let dir = checkpoint_dir.to_path_buf();
        // Off the supervisor's thread: a walk of every checkpoint file.
        tokio::task::spawn_blocking(move || SyncState::of(&dir).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
            .map(Some)
            .map_err(|e| Exit::Failed {
                reason: format!("{CLIENT_ERROR}reading the restored checkpoints: {e}"),
                retryable: true,
            })
    }

    /// Storage holds the checkpoints, as on SageMaker, where each attempt starts on a fresh
    /// instance: what an earlier attempt left here is replaced by what it uploaded. The
    /// download goes to a directory of its own first, so a failed one (or an empty prefix:
    /// nothing was ever uploaded) leaves the local checkpoints as they were.
    async fn restore(&mut self, uri: &str, layout: &JobLayout, dir: &Path) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{CLIENT_ERROR}{what}: {e}");
        let mut name = dir.file_name().unwrap_or_default().to_os_string();
        name.push(".qm-restore");
        let temp = dir.with_file_name(name);
        crate::input::empty_dir(layout, &temp, self.uid)
            .map_err(|e| fail("cannot make the checkpoint restore directory", &e))?;
        let got = self.download("checkpoints", uri, &temp, false).await;
        let swap = match got {
            Ok(()) => true,
            Err(StorageError::Empty(_)) => false,
            Err(e) => {
                remove_off_thread(temp).await;
                return Err(fail(&format!("restoring checkpoints from {uri}"), &e));
            }
        };
        let old = dir.to_path_buf();
        // Off the supervisor's thread, in one hand-over: the old checkpoints may be many
        // files, and what is left of the download goes too.
        let swapped = tokio::task::spawn_blocking(move || {
            let swapped = if swap {
                replace_dir(&old, &temp)
            } else {
                Ok(())
            };
            let _ = std::fs::remove_dir_all(&temp);
            swapped
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        swapped.map_err(|e| fail("replacing the local checkpoints with the restored ones", &e))
    }

    async fn download(
        &mut self,
        what: &str,
        uri: &str,
        dest: &Path,
        manifest: bool,
    ) -> Result<(), StorageError> {
        self.say(&format!("downloading {what} from {uri}"));
        (self.report)(self.attempt, format!("downloading {what}"));
        let started = Instant::now();
        let mut last = Instant::now();
        let (report, attempt) = (self.report.clone(), self.attempt);
        let mut on_progress = |p: Progress| {
            if last.elapsed() >= REPORT_EVERY {
                last = Instant::now();
                report(
                    attempt,
                    format!(
                        "downloading {what}: {} of {} ({} of {} files)",
                        human(p.done),
                        human(p.total),
                        p.files,
                        p.of_files
                    ),
                );
            }
        };
        let storage = self.storage.clone();
        let done = if manifest {
            storage
                .download_manifest(uri, dest, self.uid, &mut on_progress)
                .await
        } else {
            storage
                .download(uri, dest, self.uid, &mut on_progress)
                .await
        };
        match &done {
            Ok(t) => self.say(&format!(
                "{what}: {} files, {} in {:.1} s",
                t.files,
                human(t.bytes),
                started.elapsed().as_secs_f64()
            )),
            Err(StorageError::Empty(_)) if what == "checkpoints" => {
                self.say("no checkpoints to restore: the job starts from the beginning")
            }
            Err(e) => self.say(&format!("{what} failed: {e}")),
        }
        done.map(|_| ())
    }

    /// After every process is gone: the checkpoints' last upload (whatever the outcome), then,
    /// after a success, the model and output archives. `Err` is a failure reason.
    pub(crate) async fn stage_out(
        &mut self,
        spec: &LaunchSpec,
        layout: &JobLayout,
        checkpoints: Option<(&Path, &mut SyncState)>,
        succeeded: bool,
    ) -> Result<(), String> {
        if let (Some((dir, state)), Some(uri)) = (checkpoints, &spec.checkpoint_uri) {
            match sync(&self.storage, dir, uri, state, self.uid).await {
                Ok(t) => self.say(&format!(
                    "checkpoints: uploaded {} changed files, {} to {uri}",
                    t.files,
                    human(t.bytes)
                )),
                // Not a reason to fail a finished job; a preempted one resumes from what the
                // last successful sync uploaded.
                Err(e) => self.say(&format!(
                    "checkpoints: the last upload to {uri} failed: {e}"
                )),
            }
        }
        let Some(out) = spec.output_path.as_deref().filter(|_| succeeded) else {
            return Ok(());
        };
        for (dir, name) in [
            (&layout.model, "model.tar.gz"),
            (&layout.output_data, "output.tar.gz"),
        ] {
            let uri = format!(
                "{}/{}/output/{name}",
                out.trim_end_matches('/'),
                spec.job_name
            );
            self.upload_archive(dir, &layout.attempt_dir.join(name), &uri)
                .await
                .map_err(|e| format!("{CLIENT_ERROR}uploading {name} to {uri}: {e}"))?;
        }
        Ok(())
    }

    async fn upload_archive(
        &mut self,
        dir: &Path,
        archive: &Path,
        uri: &str,
    ) -> Result<(), String> {
        let name = archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Nothing written there, nothing to upload: a job that keeps its results elsewhere
        // (or a trivial one) needs no S3 at all. Names only, read as the server: no link of
        // the job's is followed.
        let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
        if empty {
            tracing::debug!(attempt = self.attempt.0, dir = %dir.display(), "empty: no {name} uploaded");
            return Ok(());
        }
        let (dir_owned, archive_owned, uid) = (dir.to_path_buf(), archive.to_path_buf(), self.uid);
        let packed = tokio::task::spawn_blocking(move || pack(&dir_owned, &archive_owned, uid))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("packing {}: {e}", dir.display()))?;
        let file = File::open(archive).map_err(|e| e.to_string())?;
        let sent = self.storage.upload_file(file, uri).await;
        let _ = std::fs::remove_file(archive);
        let bytes = sent.map_err(|e| e.to_string())?;
        self.say(&format!(
            "uploaded {name} ({packed} files, {}) to {uri}",
            human(bytes)
        ));
        Ok(())
    }
}

/// Uploads what changed in `dir`, reading the job's files as `uid`.
pub(crate) async fn sync(
    storage: &Storage,
    dir: &Path,
    uri: &str,
    state: &mut SyncState,
    uid: Option<u32>,
) -> Result<qm_storage::Transfer, StorageError> {
    let open = move |p: &Path| open_as(p, uid);
    storage.sync_up(dir, uri, state, &open).await
}

/// Opens a job's file for reading, as the job's uid when it has one, never through a link.
fn open_as(path: &Path, uid: Option<u32>) -> std::io::Result<File> {
    let open = || -> std::io::Result<File> {
        qm_storage::local::open_plain(path).map_err(|e| match e {
            StorageError::Io { source, .. } => source,
            other => std::io::Error::other(other.to_string()),
        })
    };
    match uid {
        Some(uid) => isolation::as_job(uid, open),
        None => open(),
    }
}

/// Packs the regular files under `dir` (links skipped) into a new gzip'd tar at `archive`,
/// paths relative to `dir`, reading as `uid`. Returns the number of files.
fn pack(dir: &Path, archive: &Path, uid: Option<u32>) -> std::io::Result<usize> {
    let _ = std::fs::remove_file(archive);
    // Created by the server where the job cannot write; only the reading is the job's.
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(archive)?;
    let work = move || -> std::io::Result<usize> {
        let files =
            qm_storage::local::walk(dir).map_err(|e| std::io::Error::other(e.to_string()))?;
        let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        tar.follow_symlinks(false);
        for f in &files {
            let rel: PathBuf = f.rel.iter().collect();
            let mut input = open_as(&dir.join(&rel), None)?;
            tar.append_file(&rel, &mut input)?;
        }
        tar.into_inner()?.finish()?.sync_all()?;
        Ok(files.len())
    };
    match uid {
        Some(uid) => isolation::as_job(uid, work),
        None => work(),
    }
}

/// The running attempt's periodic checkpoint upload: one sync at a time, in a task of its own
/// so that the supervisor keeps answering exits and stops meanwhile.
pub(crate) struct CheckpointSync {
    storage: Arc<Storage>,
    dir: PathBuf,
    uri: String,
    uid: Option<u32>,
    every: Duration,
    /// `None` while a sync runs (the task holds it).
    state: Option<SyncState>,
    task: Option<tokio::task::JoinHandle<(SyncState, Result<qm_storage::Transfer, StorageError>)>>,
    next: Instant,
}

impl CheckpointSync {
    pub(crate) fn new(
        storage: Arc<Storage>,
        dir: PathBuf,
        uri: String,
        uid: Option<u32>,
        every: Duration,
        state: SyncState,
    ) -> CheckpointSync {
        CheckpointSync {
            storage,
            dir,
            uri,
            uid,
            every,
            state: Some(state),
            task: None,
            next: Instant::now() + every,
        }
    }

    /// Waits for the next thing to do and does it: starts a sync when one is due, or takes
    /// the result of the one running. Pending forever without a sync. Dropping it at an await
    /// loses nothing (the running sync goes on in its task).
    pub(crate) async fn tick(sync: &mut Option<CheckpointSync>) {
        let Some(sync) = sync.as_mut() else {
            return std::future::pending().await;
        };
        if sync.task.is_some() {
            sync.finished().await;
        } else {
            tokio::time::sleep_until(sync.next).await;
            sync.start();
        }
    }

    /// Starts a sync.
    fn start(&mut self) {
        let Some(mut state) = self.state.take() else {
            return;
        };
        let (storage, dir, uri, uid) = (
            self.storage.clone(),
            self.dir.clone(),
            self.uri.clone(),
            self.uid,
        );
        self.task = Some(tokio::spawn(async move {
            let r = sync(&storage, &dir, &uri, &mut state, uid).await;
            (state, r)
        }));
    }

    /// Waits for the running sync (pending forever when none runs).
    async fn finished(&mut self) {
        let Some(task) = self.task.as_mut() else {
            return std::future::pending().await;
        };
        let joined = task.await;
        self.task = None;
        self.next = Instant::now() + self.every;
        match joined {
            Ok((state, result)) => {
                self.state = Some(state);
                match result {
                    Ok(t) if t.files > 0 => {
                        tracing::info!(files = t.files, bytes = t.bytes, uri = %self.uri, "checkpoints uploaded")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(uri = %self.uri, error = %e, "a checkpoint upload failed; the next one tries again")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the checkpoint upload task failed; starting over");
                self.state = Some(SyncState::default());
            }
        }
    }

    /// Waits for a running sync and hands back the state for the last one.
    pub(crate) async fn into_state(mut self) -> SyncState {
        if self.task.is_some() {
            self.finished().await;
        }
        self.state.unwrap_or_default()
    }
}

/// Removes the tree at `path`, if any, on the blocking pool.
async fn remove_off_thread(path: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
}

/// Removes `old` (if it is there) and renames `new` in its place.
fn replace_dir(old: &Path, new: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(old) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::rename(new, old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(12), "12 B");
        assert_eq!(human(3_435_973_837), "3.2 GiB");
        assert_eq!(human(10 * 1024 * 1024 * 1024), "10.0 GiB");
    }
}
