//! The local executor: its configuration, the launch request, the events it reports, and the
//! shared state (inventory and running attempts) behind one mutex that is never held across
//! an await. Each attempt is supervised by one tokio task ([`crate::attempt`]); checkpoint
//! scanning, with the progress files, is one more task for all attempts
//! ([`crate::checkpoint`], [`crate::progress`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::checkpoint::{self, Watched};
use crate::container::Runtime;
use crate::inventory::Inventory;
use crate::isolation::{self, JobUids, UidPool};
use crate::layout::{self, JobLayout};
use crate::progress::{lock, Steps, Tail};
use crate::{ExecError, Outcome, PoolSpec};
use qm_storage::Storage;

/// How the local executor runs attempts.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The executor writes under `data_dir/jobs/<job_id>/...`.
    pub data_dir: PathBuf,
    /// Time between SIGTERM and SIGKILL when an attempt is stopped.
    pub stop_grace: Duration,
    /// The local instances.
    pub pools: Vec<PoolSpec>,
    /// GPUs to hand out, in order; `None` = 0..total GPUs of the pools.
    pub gpu_indices: Option<Vec<u32>>,
    /// How often running attempts' checkpoint directories are scanned.
    pub checkpoint_poll: Duration,
    /// Each attempt runs under a uid of its own from this range (the server must be root);
    /// `None`: attempts run as the server's user ([`crate::isolation`]).
    pub isolation: Option<JobUids>,
    /// Bytes of stdout (and of stderr) per process of an attempt before its log is rotated
    /// (`None`: unbounded).
    pub log_bytes_per_attempt: Option<u64>,
    /// Where channels, checkpoints and models are transferred (`None`: jobs with channels,
    /// `CheckpointConfig.S3Uri` or `OutputDataConfig` fail, saying so).
    pub storage: Option<Arc<Storage>>,
    /// How often a running attempt's changed checkpoints are uploaded.
    pub checkpoint_sync: Duration,
    /// Whether each attempt gets `/opt/ml` as its own directory ([`crate::namespace`]).
    pub opt_ml: OptMl,
    /// Host processes, or containers ([`crate::container`]).
    pub runtime: Runtime,
}

/// `[executor] opt_ml`: whether attempts see their job directory at `/opt/ml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptMl {
    /// Where the server can (root): a private mount namespace per process.
    Auto,
    /// Always, or the executor refuses to start.
    Required,
    /// Never: jobs find their directories through the `SM_*` variables only.
    Off,
}

impl LocalConfig {
    /// SageMaker's defaults: a 120 s stop grace, checkpoints scanned every second, GPUs 0..n.
    pub fn new(data_dir: impl Into<PathBuf>, pools: Vec<PoolSpec>) -> Self {
        LocalConfig {
            data_dir: data_dir.into(),
            stop_grace: Duration::from_secs(120),
            pools,
            gpu_indices: None,
            checkpoint_poll: Duration::from_secs(1),
            isolation: None,
            log_bytes_per_attempt: None,
            storage: None,
            checkpoint_sync: Duration::from_secs(30),
            opt_ml: OptMl::Off,
            runtime: Runtime::Host,
        }
    }
}

/// One attempt to run, as the server derives it from the job's SageMaker payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The core's attempt id: unique forever.
    pub attempt: u64,
    /// The API job id (a UUID): names the per-job directory.
    pub job_id: String,
    /// 1-based, per job; names the attempt's log directory.
    pub attempt_number: u32,
    /// `SM_TRAINING_JOB_NAME`.
    pub job_name: String,
    /// The capacity unit, e.g. `ml.g5.xlarge`.
    pub instance_type: String,
    /// Instances; one process per instance (`SM_CURRENT_HOST` algo-1..algo-N).
    pub count: u32,
    /// `AlgorithmSpecification.ContainerEntrypoint`: program and its first arguments.
    pub entrypoint: Vec<String>,
    /// `ContainerArguments`, appended.
    pub arguments: Vec<String>,
    /// `AlgorithmSpecification.TrainingImage`: what the podman runtime runs.
    pub training_image: Option<String>,
    /// The payload's `Environment`.
    pub environment: BTreeMap<String, String>,
    /// The payload's `HyperParameters`.
    pub hyperparameters: BTreeMap<String, String>,
    /// The lower of `MaxRuntimeInSeconds` and `timeoutConfig`; the attempt is stopped after it.
    pub max_runtime: Option<Duration>,
    /// The payload's `CheckpointConfig.LocalPath`, if the user set one.
    pub checkpoint_path: Option<PathBuf>,
    /// The payload's `CheckpointConfig.S3Uri`: restored before, uploaded during and after
    /// every attempt.
    pub checkpoint_uri: Option<String>,
    /// The payload's `OutputDataConfig.S3OutputPath`: `model.tar.gz` and `output.tar.gz` go
    /// under `<it>/<job_name>/output/` after a success.
    pub output_path: Option<String>,
    /// The payload's `InputDataConfig`: a directory each under `input/data/`, described in
    /// `input/config/inputdataconfig.json`.
    pub channels: Vec<InputChannel>,
}

/// One input channel of an attempt (the server has checked the name: it is a plain directory
/// name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputChannel {
    /// `ChannelName`.
    pub name: String,
    /// Where its data lives (`s3://` or `file://`).
    pub uri: String,
    /// `S3DataType`: `S3Prefix` (every object under the URI) or `ManifestFile`.
    pub data_type: String,
    /// `File` or `FastFile`.
    pub input_mode: String,
    /// `S3DataDistributionType`.
    pub distribution: String,
    /// `ContentType`.
    pub content_type: Option<String>,
    /// `CompressionType`.
    pub compression: Option<String>,
    /// `RecordWrapperType`.
    pub record_wrapper: Option<String>,
}

impl LaunchSpec {
    /// Attempt number 1 of `job_id` on one instance, with no arguments, environment,
    /// hyperparameters, runtime limit or checkpoint path; the job name is the job id.
    pub fn new(
        attempt: u64,
        job_id: impl Into<String>,
        instance_type: impl Into<String>,
        entrypoint: Vec<String>,
    ) -> Self {
        let job_id = job_id.into();
        LaunchSpec {
            attempt,
            job_name: job_id.clone(),
            job_id,
            attempt_number: 1,
            instance_type: instance_type.into(),
            count: 1,
            entrypoint,
            arguments: Vec::new(),
            training_image: None,
            environment: BTreeMap::new(),
            hyperparameters: BTreeMap::new(),
            max_runtime: None,
            checkpoint_path: None,
            checkpoint_uri: None,
            output_path: None,
            channels: Vec::new(),
        }
    }
}

/// What the executor reports, in order per attempt: `Running`, any `Checkpoint`s and
/// `Progress`es, `Exited`
/// (an attempt whose processes could not all be spawned gets only `Exited`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecEvent {
    /// All processes of the attempt were spawned.
    Running {
        /// The attempt.
        attempt: u64,
        /// Process ids, one per host in host order; each is also its process group id, which
        /// is what [`LocalExecutor::reap_stale`] wants after a restart.
        pids: Vec<u32>,
        /// GPU indices of all hosts, in host order.
        gpus: Vec<u32>,
        /// The attempt's log directory (see [`crate::log_file_name`]).
        log_dir: PathBuf,
        /// Epoch milliseconds.
        at_ms: u64,
    },
    /// The attempt was accepted by the cluster and waits to start (Slurm executor only); sent
    /// again when the reason it waits for changes.
    Starting {
        /// The attempt.
        attempt: u64,
        /// Why the cluster has not started it yet, e.g. `Slurm job 12 is pending: Resources`.
        reason: Option<String>,
    },
    /// The instances the executor offers changed (Slurm executor only: nodes went down or
    /// came back, or jobs of others took or freed nodes).
    Capacity {
        /// Instances per instance type.
        capacity: BTreeMap<String, u32>,
    },
    /// The newest modification time under the checkpoint directory moved forward.
    Checkpoint {
        /// The attempt.
        attempt: u64,
        /// That modification time, in epoch milliseconds.
        at_ms: u64,
    },
    /// The steps the attempt reported in its progress file moved ([`crate::progress`]): sent
    /// at most once per scan, and once more just before `Exited` if the last lines moved them.
    Progress {
        /// The attempt.
        attempt: u64,
        /// Everything it reported so far (not only the change).
        steps: Steps,
    },
    /// Every process of the attempt is gone; its instances (and GPUs) are free again.
    Exited {
        /// The attempt.
        attempt: u64,
        /// How it ended.
        outcome: Outcome,
        /// Epoch milliseconds.
        at_ms: u64,
    },
}

/// Runs attempts as local process groups. Cheap to clone; all clones share one state.
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    inner: Arc<Inner>,
}

/// State shared by the executor handle, the attempt supervisors and the checkpoint scanner.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) cfg: LocalConfig,
    /// Whether attempts get `/opt/ml` ([`crate::namespace`]), as found at start-up.
    pub(crate) opt_ml: bool,
    events: mpsc::UnboundedSender<ExecEvent>,
    state: Mutex<State>,
    scanner_started: AtomicBool,
}

#[derive(Debug)]
struct State {
    inventory: Inventory,
    attempts: BTreeMap<u64, Slot>,
    /// The uids of running attempts, when attempts run apart from the server.
    uids: Option<UidPool>,
}

/// A started attempt, until its `Exited` event.
#[derive(Debug)]
struct Slot {
    instances: Vec<usize>,
    /// Where the outcome is written before `Exited` is sent.
    outcome_file: PathBuf,
    stop: watch::Sender<bool>,
    /// Set once every process is spawned.
    pgids: Vec<u32>,
    /// The uid the attempt runs as, when isolated.
    uid: Option<u32>,
    /// Set once every process is spawned; the scanner skips the attempt before.
    checkpoints: Option<Watched>,
    /// The reader of its progress file, set with `checkpoints`; shared with the scanner,
    /// which reads outside the state lock.
    progress: Option<Arc<Mutex<Tail>>>,
}

/// The file in an attempt's directory that keeps how it ended.
pub const OUTCOME_FILE: &str = "outcome.json";

/// Writes how an attempt ended next to its logs, before the server hears of it: a server that
/// dies before logging the exit finds it there at its next start, so that an attempt that
/// finished is not run again. Written to a temporary name and renamed, so a reader never sees
/// half a file; not fsynced, since it only has to survive the server process, not the machine.
pub(crate) fn record_outcome(path: &Path, outcome: &Outcome) {
    let result = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("json.tmp");
        // Created anew and never through a link: the directory is the server's, but a
        // mistake that handed it to a job must not make root write where the job points.
        let _ = std::fs::remove_file(&tmp);
        let mut f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&tmp)?
        };
        std::io::Write::write_all(
            &mut f,
            &serde_json::to_vec(outcome).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot record the attempt's outcome");
    }
}

/// The outcome [`record_outcome`] left in an attempt's log directory, if any.
pub(crate) fn read_outcome(log_dir: &Path) -> Option<Outcome> {
    let bytes = std::fs::read(log_dir.join(OUTCOME_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LocalExecutor {
    /// Creates `data_dir/jobs` and builds the inventory (instances per type, GPU indices per
    /// instance).
    pub fn new(
        cfg: LocalConfig,
        events: mpsc::UnboundedSender<ExecEvent>,
    ) -> Result<Self, ExecError> {
        let mut cfg = cfg;
        // Absolute from here on: the paths handed to jobs must not depend on their working
        // directory, and the marker that identifies our processes must be one spelling.
        cfg.data_dir = layout::prepare_root(&cfg.data_dir)?;
        let inventory = Inventory::build(&cfg.pools, cfg.gpu_indices.as_deref())?;
        if let Some(range) = cfg.isolation {
            isolation::check_usable(range, &cfg.data_dir, inventory.capacity().values().sum())?;
        }
        let uids = cfg.isolation.map(UidPool::new);
        let opt_ml = match cfg.opt_ml {
            // A container has its own /opt/ml.
            _ if cfg.runtime.runs_images() => false,
            OptMl::Off => false,
            mode => match crate::namespace::probe(&cfg.data_dir.join("jobs")) {
                Ok(()) => true,
                Err(why) if mode == OptMl::Auto => {
                    tracing::warn!("attempts do not get /opt/ml ({why}); jobs find their directories through the SM_* variables");
                    false
                }
                Err(why) => return Err(ExecError::OptMl(why)),
            },
        };
        Ok(LocalExecutor {
            inner: Arc::new(Inner {
                opt_ml,
                cfg,
                events,
                state: Mutex::new(State {
                    inventory,
                    attempts: BTreeMap::new(),
                    uids,
                }),
                scanner_started: AtomicBool::new(false),
            }),
        })
    }

    /// Whether attempts see their job directory at `/opt/ml`.
    pub fn opt_ml(&self) -> bool {
        self.inner.opt_ml
    }

    /// Instances per instance type, free or not (what the core gets as physical capacity).
    pub fn capacity(&self) -> BTreeMap<String, u32> {
        self.inner.state().inventory.capacity()
    }

    /// Free instances of `instance_type` now.
    pub fn free(&self, instance_type: &str) -> u32 {
        self.inner.state().inventory.free(instance_type)
    }

    /// Starts an attempt; must be called inside a tokio runtime; never blocks on the process.
    ///
    /// Directories, log files and processes are created by the attempt's task, so a failure
    /// there (program not found, not executable, cannot create directories) arrives as
    /// `Exited { Failed { reason: "...ClientError: cannot start '<program>': ...", retryable: true } }`.
    /// A missing entrypoint arrives the same way, with `retryable: false`. Errors are for
    /// caller bugs: more instances than are free, an unknown type, `count` 0, a duplicate
    /// attempt id, a job id that cannot name a directory, no runtime.
    pub fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExecError::NoRuntime)?;
        if spec.count == 0 {
            return Err(ExecError::NoInstances(spec.attempt));
        }
        if !layout::valid_job_id(&spec.job_id) {
            return Err(ExecError::InvalidJobId(spec.job_id));
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let (hosts, uid) = {
            let mut state = self.inner.state();
            if state.attempts.contains_key(&spec.attempt) {
                return Err(ExecError::DuplicateAttempt(spec.attempt));
            }
            let instances = state
                .inventory
                .take(spec.attempt, &spec.instance_type, spec.count)?;
            // Never empty: check_usable made the range at least as large as the instances.
            let uid = match state.uids.as_mut() {
                Some(pool) => match pool.take() {
                    Some(uid) => Some(uid),
                    None => {
                        state.inventory.give_back(&instances);
                        return Err(ExecError::NoJobUid(spec.attempt));
                    }
                },
                None => None,
            };
            let hosts: Vec<Vec<u32>> = instances
                .iter()
                .map(|&id| state.inventory.gpus(id).to_vec())
                .collect();
            state.attempts.insert(
                spec.attempt,
                Slot {
                    instances,
                    outcome_file: JobLayout::new(
                        &self.inner.cfg.data_dir,
                        &spec.job_id,
                        spec.attempt_number,
                    )
                    .attempt_dir
                    .join(OUTCOME_FILE),
                    stop: stop_tx,
                    pgids: Vec::new(),
                    uid,
                    checkpoints: None,
                    progress: None,
                },
            );
            (hosts, uid)
        };
        if !self.inner.scanner_started.swap(true, Ordering::Relaxed) {
            runtime.spawn(checkpoint::scan_loop(
                Arc::downgrade(&self.inner),
                self.inner.cfg.checkpoint_poll,
            ));
        }
        tracing::debug!(attempt = spec.attempt, job_id = %spec.job_id, count = spec.count, "starting attempt");
        runtime.spawn(crate::attempt::supervise(
            self.inner.clone(),
            spec,
            hosts,
            uid,
            stop_rx,
        ));
        Ok(())
    }

    /// Stops an attempt: SIGTERM to each process group, SIGKILL to the groups still alive after
    /// `stop_grace`; the `Exited` event comes once every process is gone and reports the real
    /// outcome. Idempotent; an unknown attempt is a no-op.
    pub fn stop(&self, attempt: u64) {
        if let Some(slot) = self.inner.state().attempts.get(&attempt) {
            slot.stop.send_replace(true);
        }
    }

    /// The per-job directory (`data_dir/jobs/<job_id>`).
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        layout::job_dir(&self.inner.cfg.data_dir, job_id)
    }

    /// The log directory of attempt number `attempt_number` of `job_id`.
    pub fn log_dir(&self, job_id: &str, attempt_number: u32) -> PathBuf {
        JobLayout::new(&self.inner.cfg.data_dir, job_id, attempt_number).attempt_dir
    }

    /// After a server restart: process groups recorded by a previous server (pids from
    /// `Running` events) that may still be alive. SIGTERM, up to `stop_grace`, SIGKILL, and
    /// return once all are gone (or 10 s after SIGKILL, with a warning). Groups of attempts
    /// this executor runs, and pids now used by a process without this data directory's
    /// `QM_DATA_DIR` marker in its environment (a reused pid), are left alone. Meant for
    /// start-up, before any `start`.
    pub async fn reap_stale(&self, pgids: &[u32]) {
        let own = self.own_groups();
        let targets: Vec<u32> = pgids
            .iter()
            .copied()
            .filter(|pgid| !own.contains(pgid))
            .filter(|&pgid| {
                let ours = crate::group::may_be_ours(pgid, &self.inner.cfg.data_dir);
                if !ours {
                    tracing::warn!(
                        pgid,
                        "pid now belongs to a process that is not an attempt of this data dir; leaving it alone"
                    );
                }
                ours
            })
            .collect();
        crate::group::reap(targets, self.inner.cfg.stop_grace).await;
        if let Runtime::Podman(podman) = &self.inner.cfg.runtime {
            // A container outlives a SIGKILLed `podman run` (and its server).
            crate::container::remove_labelled(
                podman,
                &crate::container::label(&self.inner.cfg.data_dir),
            )
            .await;
        }
    }

    /// Process groups of live processes marked with this executor's data directory that are
    /// not attempts it runs: at start-up, whatever a previous server left behind, including
    /// attempts it spawned but did not live to record. Empty where /proc cannot be read.
    pub fn orphans(&self) -> Vec<u32> {
        let own = self.own_groups();
        crate::group::marked_groups(&self.inner.cfg.data_dir)
            .into_iter()
            .filter(|g| !own.contains(g))
            .collect()
    }

    /// How attempt `attempt_number` of `job_id` ended, as recorded before its `Exited` event;
    /// `None` when it has not ended (or never started here).
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Outcome> {
        read_outcome(&self.log_dir(job_id, attempt_number))
    }

    /// Process groups of the attempts this executor runs.
    fn own_groups(&self) -> BTreeSet<u32> {
        self.inner
            .state()
            .attempts
            .values()
            .flat_map(|slot| slot.pgids.iter().copied())
            .collect()
    }

    /// Forgets a recorded outcome (an attempt stopped because the server shuts down did not
    /// end on its own, and must be recorded as lost at the next start).
    pub fn discard_outcome(&self, job_id: &str, attempt_number: u32) {
        let _ = std::fs::remove_file(self.log_dir(job_id, attempt_number).join(OUTCOME_FILE));
    }

    /// Number of attempts started and not yet `Exited`.
    pub fn running(&self) -> usize {
        self.inner.state().attempts.len()
    }

    /// Checks that every instance is free or held by exactly one running attempt.
    pub fn check_invariants(&self) -> Result<(), String> {
        let state = self.inner.state();
        let held: Vec<usize> = state
            .attempts
            .values()
            .flat_map(|slot| slot.instances.iter().copied())
            .collect();
        state.inventory.check_invariants(&held)
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not wedge the executor: the state stays consistent because
        // every critical section is a few map operations.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the spawned processes and reports `Running`. From now on the scanner looks at
    /// the checkpoint directory, reporting only mtimes newer than the one `checkpoints` holds,
    /// and at the progress file.
    pub(crate) fn mark_running(
        &self,
        attempt: u64,
        pgids: Vec<u32>,
        gpus: Vec<u32>,
        log_dir: PathBuf,
        checkpoints: Watched,
        progress: Tail,
    ) {
        let mut state = self.state();
        if let Some(slot) = state.attempts.get_mut(&attempt) {
            slot.pgids = pgids.clone();
            slot.checkpoints = Some(checkpoints);
            slot.progress = Some(Arc::new(Mutex::new(progress)));
        }
        // Sent under the lock so that no Checkpoint or Exited of this attempt can precede it.
        let _ = self.events.send(ExecEvent::Running {
            attempt,
            pids: pgids,
            gpus,
            log_dir,
            at_ms: now_ms(),
        });
    }

    /// Reports why a started attempt has not spawned its processes yet (its downloads); only
    /// while it has not reported `Running`.
    pub(crate) fn report_starting(&self, attempt: u64, reason: String) {
        let state = self.state();
        if state
            .attempts
            .get(&attempt)
            .is_some_and(|s| s.pgids.is_empty())
        {
            let _ = self.events.send(ExecEvent::Starting {
                attempt,
                reason: Some(reason),
            });
        }
    }

    /// Frees the attempt's instances and reports `Exited`; called once every process is gone.
    /// The progress file is read a last time first (a bounded read: the lines the job wrote
    /// while it was stopping say where it stopped).
    pub(crate) fn finish(&self, attempt: u64, outcome: Outcome) {
        let tail = self
            .state()
            .attempts
            .get(&attempt)
            .and_then(|s| s.progress.clone());
        if let Some(tail) = &tail {
            lock(tail).poll_final();
        }
        let mut state = self.state();
        if let Some(slot) = state.attempts.remove(&attempt) {
            if let Some(steps) = slot.progress.as_deref().and_then(|t| lock(t).take_change()) {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
            state.inventory.give_back(&slot.instances);
            if let (Some(pool), Some(uid)) = (state.uids.as_mut(), slot.uid) {
                pool.give_back(uid);
            }
            record_outcome(&slot.outcome_file, &outcome);
        }
        tracing::debug!(attempt, ?outcome, "attempt exited");
        // Under the lock: when the server sees Exited, the capacity is already free.
        let _ = self.events.send(ExecEvent::Exited {
            attempt,
            outcome,
            at_ms: now_ms(),
        });
    }

    /// The log limit and the directories of running attempts, when logs are bounded.
    pub(crate) fn log_targets(&self) -> Option<(u64, Vec<PathBuf>)> {
        let limit = self.cfg.log_bytes_per_attempt?;
        let dirs = self
            .state()
            .attempts
            .values()
            .filter_map(|slot| slot.outcome_file.parent().map(Path::to_path_buf))
            .collect();
        Some((limit, dirs))
    }

    /// The checkpoint directories to scan: running attempts only.
    pub(crate) fn checkpoint_targets(&self) -> Vec<(u64, PathBuf)> {
        self.state()
            .attempts
            .iter()
            .filter_map(|(&attempt, slot)| Some((attempt, slot.checkpoints.as_ref()?.dir.clone())))
            .collect()
    }

    /// Reports a `Checkpoint` for each attempt, still running, whose newest mtime moved
    /// past what was last seen.
    pub(crate) fn record_checkpoints(&self, scanned: &[(u64, u64)]) {
        let mut state = self.state();
        for &(attempt, newest_ns) in scanned {
            let Some(watched) = state
                .attempts
                .get_mut(&attempt)
                .and_then(|s| s.checkpoints.as_mut())
            else {
                continue;
            };
            if newest_ns > watched.last_seen_ns {
                watched.last_seen_ns = newest_ns;
                let _ = self.events.send(ExecEvent::Checkpoint {
                    attempt,
                    at_ms: newest_ns / 1_000_000,
                });
            }
        }
    }

    /// The progress readers of running attempts.
    pub(crate) fn progress_targets(&self) -> Vec<Arc<Mutex<Tail>>> {
        self.state()
            .attempts
            .values()
            .filter_map(|slot| slot.progress.clone())
            .collect()
    }

    /// Reports a `Progress` for each attempt, still running, whose steps moved since its last
    /// report: at most one per attempt per scan, however many lines the job wrote.
    pub(crate) fn record_progress(&self) {
        let state = self.state();
        for (&attempt, slot) in &state.attempts {
            if let Some(steps) = slot.progress.as_deref().and_then(|t| lock(t).take_change()) {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
        }
    }
}
