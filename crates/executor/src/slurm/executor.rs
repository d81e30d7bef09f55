//! The Slurm executor's handle, its shared state, the submit tasks and the poller.
//!
//! The state is one mutex, never held across an await, a Slurm command or file system work:
//! the poller reads Slurm, decides under the lock, then acts outside it (scancel, reading how
//! ended jobs ended, recording outcomes, scanning checkpoints), since a shared file system that
//! stalls must not stall `start` and `stop`, which the server's driver calls.

use qm_core::AttemptId;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::time::Instant;

use super::report::{self, SlurmJob, SlurmNode, SINFO_FORMAT};
use super::script::{self, start_error_file};
use super::{SlurmConfig, SlurmInstance};
use crate::checkpoint::{self, newest_mtime_ns};
use crate::clock::now_ms;
use crate::layout::{self, log_file_name, JobLayout, LogStream};
use crate::outcome::{self, ALGORITHM_ERROR, CLIENT_ERROR, TIMEOUT_REASON};
use crate::progress::{lock, Tail};
use crate::staging::Stage;
use crate::supervisor::{read_outcome, record_outcome};
use crate::{environment, ExecError, ExecEvent, Exit, LaunchSpec, OUTCOME_FILE};
use qm_storage::Storage;

/// At most this many `sbatch` run at once: each is a process and an RPC to slurmctld.
const SUBMIT_CONCURRENCY: usize = 4;

/// The poller never runs more often than this, however often it is woken.
const MIN_POLL_GAP: Duration = Duration::from_millis(100);

/// How long a cancelled job may stay before `scancel` is sent again.
const CANCEL_RETRY: Duration = Duration::from_secs(30);

/// The longest wait between two `sbatch` tries while Slurm cannot be reached.
const SUBMIT_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The name of an attempt's batch script in its log directory.
const SCRIPT_FILE: &str = "slurm.sh";

/// An attempt the previous server left running, as the server's log knows it.
#[derive(Debug, Clone)]
pub struct AdoptSpec {
    /// What was launched.
    pub spec: LaunchSpec,
    /// When the server saw it running (epoch ms), if it did.
    pub running_since_ms: Option<u64>,
    /// Whether the server had begun to stop it (a preemption, a termination).
    pub stopping: bool,
}

/// What became of an attempt the previous server left running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// Its Slurm job still runs (or waits); the executor follows it from now on.
    Running,
    /// Its Slurm job ended while no server watched it.
    Ended(Exit),
    /// Slurm does not know it (never submitted, or forgotten after `MinJobAge`).
    Unknown,
}

/// Runs attempts as Slurm jobs. Cheap to clone; all clones share one state.
#[derive(Debug, Clone)]
pub struct SlurmExecutor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The settings; [`SlurmExecutor::reload`] replaces them.
    cfg: std::sync::RwLock<Arc<SlurmConfig>>,
    /// Where channels, checkpoints and models are transferred (by the server, into and out
    /// of the shared directory).
    storage: Option<Arc<Storage>>,
    events: mpsc::UnboundedSender<ExecEvent>,
    state: Mutex<State>,
    submits: Semaphore,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    slots: BTreeMap<AttemptId, Slot>,
    capacity: BTreeMap<String, u32>,
    poller_started: bool,
    /// The last poll failure reported, so a broken cluster logs once, not every poll.
    last_error: Option<String>,
    /// Slurm jobs cancelled because no attempt of this server owns them, and when.
    orphans: BTreeMap<u64, Instant>,
}

#[derive(Debug)]
struct Slot {
    /// The entrypoint's program, for a start failure's reason.
    program: String,
    log_dir: PathBuf,
    /// `SM_CHECKPOINT_DIR` as the job sees it (resolved when the script is written).
    checkpoint_dir: PathBuf,
    failure_file: PathBuf,
    max_runtime: Option<Duration>,
    /// Set once `sbatch` returned the job id.
    slurm_id: Option<u64>,
    /// When `sbatch` returned: a poll that began before cannot prove the job missing.
    submitted_at: Option<Instant>,
    starting_reported: bool,
    /// The last pending reason reported.
    pending_reason: Option<String>,
    running_since: Option<Instant>,
    stop: Option<StopCause>,
    term_sent: Option<Instant>,
    /// When `scancel` was last sent; sent again every [`CANCEL_RETRY`] until the job is gone.
    cancel_sent: Option<Instant>,
    /// The newest checkpoint mtime seen (ns); the one present at submission is the baseline.
    checkpoint_seen_ns: u64,
    /// The reader of the job's progress file in the shared directory, as the checkpoints are
    /// read there; shared with the poll, which reads it on the blocking pool.
    progress: Arc<Mutex<Tail>>,
    nodes: Vec<String>,
    /// The attempt, when it has uploads to make once its Slurm job is gone.
    stage_out: Option<Box<LaunchSpec>>,
    /// What the checkpoint directory held after the restore: the last upload sends only what
    /// the job changed since.
    restored: Option<qm_storage::SyncState>,
}

impl Slot {
    /// The next step of a requested stop of Slurm job `id`: SIGTERM to its tasks, then, after
    /// `grace`, SIGKILL and cancellation (at once for a job that has not started), repeated
    /// every [`CANCEL_RETRY`] until the job is gone.
    fn plan_stop(
        &mut self,
        id: u64,
        started: bool,
        now: Instant,
        grace: Duration,
        plan: &mut Plan,
    ) {
        if self.stop.is_none() {
            return;
        }
        let cancel = match (self.cancel_sent, self.term_sent) {
            // A cancel that was lost (scancel failed, slurmctld busy) is sent again.
            (Some(t), _) => now.duration_since(t) >= CANCEL_RETRY,
            // Nothing runs yet: no grace to give.
            (None, _) if !started => true,
            (None, None) => {
                plan.term.push(id);
                self.term_sent = Some(now);
                false
            }
            (None, Some(t)) => now.duration_since(t) >= grace,
        };
        if cancel {
            plan.cancel.push(id);
            self.cancel_sent = Some(now);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
    Requested,
    Timeout,
}

/// What one poll decided to do outside the lock.
#[derive(Debug, Default)]
struct Plan {
    term: Vec<u64>,
    cancel: Vec<u64>,
    scans: Vec<(AttemptId, PathBuf)>,
    /// The progress files of the running attempts, read with the checkpoints.
    progress: Vec<Arc<Mutex<Tail>>>,
    /// Attempts whose job Slurm reports gone, already removed from the slots: their outcome
    /// is read from the file system and reported by [`Inner::conclude`].
    ended: Vec<(AttemptId, Slot, Ending)>,
}

/// Why an attempt ended.
#[derive(Debug)]
enum Ending {
    /// Slurm reports its job gone, in this final state.
    Job(SlurmJob),
    /// Slurm does not know its job any more.
    Forgotten(u64),
}

/// Plans the cancel of marked jobs of attempts this server does not run, retried every
/// `CANCEL_RETRY` while Slurm still lists them.
fn cancel_orphans(tag: &str, jobs: &[SlurmJob], state: &mut State, now: Instant, plan: &mut Plan) {
    // Marked jobs of attempts this server does not run: a submit that raced a crash, or an
    // attempt whose end was recorded while Slurm still had it.
    let live: BTreeSet<AttemptId> = state.slots.keys().copied().collect();
    let mut orphans = BTreeMap::new();
    for j in jobs {
        let Some((_, _, attempt)) = parse_marker(tag, &j.comment) else {
            continue;
        };
        if j.is_gone() || live.contains(&attempt) {
            continue;
        }
        let last = state.orphans.get(&j.id).copied();
        if last.is_none_or(|t| now.duration_since(t) >= CANCEL_RETRY) {
            tracing::warn!(
                slurm_job = j.id,
                attempt = attempt.0,
                "cancelling a Slurm job of an attempt this server no longer runs"
            );
            plan.cancel.push(j.id);
            orphans.insert(j.id, now);
        } else if let Some(t) = last {
            orphans.insert(j.id, t);
        }
    }
    state.orphans = orphans;
}

/// The comment that marks attempt `attempt` (number `n` of `job_id`) as this server's.
fn marker(tag: &str, job_id: &str, n: u32, attempt: AttemptId) -> String {
    format!("qm/{tag}/{job_id}/{n}/{attempt}")
}

/// `(job id, attempt number, attempt)` of a comment with this server's tag.
fn parse_marker<'a>(tag: &str, comment: &'a str) -> Option<(&'a str, u32, AttemptId)> {
    let rest = comment
        .strip_prefix("qm/")?
        .strip_prefix(tag)?
        .strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (job, n, attempt) = (parts.next()?, parts.next()?, parts.next()?);
    Some((job, n.parse().ok()?, AttemptId(attempt.parse().ok()?)))
}

/// The job name Slurm shows: `qm-<job name>-<attempt number>`, kept short for `squeue`.
fn job_name(spec: &LaunchSpec) -> String {
    let name: String = spec
        .job_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(100)
        .collect();
    format!("qm-{name}-{}", spec.attempt_number)
}

/// The status reason of a job Slurm has accepted and not started: its `state_reason`, unless
/// that says nothing (`None`).
fn pending_reason(job: &SlurmJob) -> Option<String> {
    let reason = job.reason.trim();
    (!reason.is_empty() && reason != "None").then(|| {
        format!(
            "Slurm job {} is {}: {reason}",
            job.id,
            job.state.to_lowercase()
        )
    })
}

/// Whether node `node` provides instance type `inst`.
fn provides(inst: &SlurmInstance, node: &SlurmNode) -> bool {
    inst.partition.as_ref().is_none_or(|p| *p == node.partition)
        && inst
            .feature
            .as_ref()
            .is_none_or(|f| node.features.contains(f))
}

/// Refuses a configuration under which one node provides two instance types: `sbatch` for
/// one type could land on a node the other type's capacity counts as free.
fn check_disjoint(instances: &[SlurmInstance], nodes: &[SlurmNode]) -> Result<(), ExecError> {
    for node in nodes {
        let matching: Vec<usize> = (0..instances.len())
            .filter(|&i| provides(&instances[i], node))
            .collect();
        if let [a, b, ..] = matching[..] {
            return Err(ExecError::Slurm(format!(
                "node {} provides both executor.slurm.instance[{a}] ({}) and executor.slurm.instance[{b}] ({}); give each instance type its own partition or node feature, so that no node counts for two types",
                node.name, instances[a].instance_type, instances[b].instance_type
            )));
        }
    }
    Ok(())
}

impl SlurmExecutor {
    /// Creates `shared_dir/jobs`, without storage: jobs with channels or a checkpoint URI
    /// fail, saying so. Slurm is first read by [`SlurmExecutor::adopt`].
    pub fn new(
        cfg: SlurmConfig,
        events: mpsc::UnboundedSender<ExecEvent>,
    ) -> Result<Self, ExecError> {
        Self::with_storage(cfg, events, None)
    }

    /// Creates `shared_dir/jobs`; attempts' channels and checkpoints are downloaded into the
    /// shared directory before `sbatch`, and checkpoints and models uploaded once the Slurm
    /// job is gone, through `storage` (docs/sagemaker.md).
    pub fn with_storage(
        cfg: SlurmConfig,
        events: mpsc::UnboundedSender<ExecEvent>,
        storage: Option<Arc<Storage>>,
    ) -> Result<Self, ExecError> {
        let mut cfg = cfg;
        cfg.shared_dir = layout::prepare_root(&cfg.shared_dir)?;
        if cfg.instances.is_empty() {
            return Err(ExecError::Slurm(
                "no instance type is configured: add [[executor.slurm.instance]] entries".into(),
            ));
        }
        Ok(SlurmExecutor {
            inner: Arc::new(Inner {
                cfg: std::sync::RwLock::new(Arc::new(cfg)),
                storage,
                events,
                state: Mutex::new(State::default()),
                submits: Semaphore::new(SUBMIT_CONCURRENCY),
                wake: Notify::new(),
            }),
        })
    }

    /// Instances per instance type Slurm offers this server, as last read.
    pub fn capacity(&self) -> BTreeMap<String, u32> {
        self.inner.state().capacity.clone()
    }

    /// Applies a reloaded configuration (SIGHUP, `qm reload`): the instance types, poll period,
    /// account, extra `sbatch` arguments and stop grace apply from the next poll and the next
    /// submit (a changed capacity is reported by that poll). The shared directory, the tag and
    /// where the Slurm commands are take a restart and are kept as they are.
    /// Refused, nothing changed, when no type is configured or one node would provide two
    /// types (Slurm is read to check, as at start).
    pub async fn reload(&self, mut cfg: SlurmConfig) -> Result<(), ExecError> {
        if cfg.instances.is_empty() {
            return Err(ExecError::Slurm(
                "no instance type is configured: add [[executor.slurm.instance]] entries".into(),
            ));
        }
        let nodes = self.inner.sinfo().await.map_err(ExecError::Slurm)?;
        check_disjoint(&cfg.instances, &nodes)?;
        let old = self.inner.cfg();
        cfg.shared_dir = old.shared_dir.clone();
        cfg.tag = old.tag.clone();
        cfg.bin_dir = old.bin_dir.clone();
        *self
            .inner
            .cfg
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(cfg);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Where attempt `attempt_number` of `job_id` keeps its logs.
    pub fn log_dir(&self, job_id: &str, attempt_number: u32) -> PathBuf {
        JobLayout::new(&self.inner.cfg().shared_dir, job_id, attempt_number).attempt_dir
    }

    /// The per-job directory (`shared_dir/jobs/<job_id>`).
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        crate::layout::job_dir(&self.inner.cfg().shared_dir, job_id)
    }

    /// How attempt `attempt_number` of `job_id` ended, as recorded before its `Exited` event.
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Exit> {
        read_outcome(&self.log_dir(job_id, attempt_number))
    }

    /// At start-up, before any `start`: reads Slurm once (an error says what to fix when Slurm
    /// cannot be reached or two instance types share a node), takes back the attempts the log
    /// says were running, and starts the poller. Returns what became of each attempt.
    pub async fn adopt(
        &self,
        attempts: Vec<AdoptSpec>,
    ) -> Result<Vec<(AttemptId, Adopted)>, ExecError> {
        let jobs = self.inner.squeue().await.map_err(ExecError::Slurm)?;
        let nodes = self.inner.sinfo().await.map_err(ExecError::Slurm)?;
        let cfg = self.inner.cfg();
        check_disjoint(&cfg.instances, &nodes)?;
        let tag = cfg.tag.clone();
        let mut by_attempt: BTreeMap<AttemptId, SlurmJob> = BTreeMap::new();
        for j in &jobs {
            if let Some((_, _, attempt)) = parse_marker(&tag, &j.comment) {
                // Two jobs of one attempt (a submit retried after a timeout): the live one wins.
                let keep = by_attempt.get(&attempt).is_some_and(|old| !old.is_gone());
                if !keep {
                    by_attempt.insert(attempt, j.clone());
                }
            }
        }
        // Directories, baselines and recorded outcomes are file system work: done here, at
        // start-up, before the slots are published.
        let inner = self.inner.clone();
        let decided = tokio::task::spawn_blocking(move || {
            attempts
                .into_iter()
                .map(|a| inner.adopt_one(a, &by_attempt))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ExecError::Slurm(format!("adopting the previous server's jobs: {e}")))?;
        let mut out = Vec::new();
        {
            let mut state = self.inner.state();
            for (attempt, what, slot) in decided {
                if let Some(slot) = slot {
                    state.slots.insert(attempt, slot);
                }
                out.push((attempt, what));
            }
            self.inner.refresh_capacity(&mut state, &nodes, &jobs);
        }
        self.ensure_poller();
        Ok(out)
    }

    /// Starts an attempt: the job directories, the script and `sbatch` happen in a task, and
    /// a failure there arrives as `Exited`. Errors are for caller bugs: an instance type with
    /// no `[[executor.slurm.instance]]`, `count` 0, a duplicate attempt, a job id that cannot
    /// name a directory, no runtime.
    pub fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExecError::NoRuntime)?;
        if spec.count == 0 {
            return Err(ExecError::NoInstances(spec.attempt));
        }
        if !layout::valid_job_id(&spec.job_id) {
            return Err(ExecError::InvalidJobId(spec.job_id));
        }
        let instance = self
            .inner
            .cfg()
            .instances
            .iter()
            .find(|i| i.instance_type == spec.instance_type)
            .cloned()
            .ok_or_else(|| ExecError::UnknownInstanceType(spec.instance_type.clone()))?;
        {
            let mut state = self.inner.state();
            if state.slots.contains_key(&spec.attempt) {
                return Err(ExecError::DuplicateAttempt(spec.attempt));
            }
            let slot = self.inner.slot(&spec);
            state.slots.insert(spec.attempt, slot);
        }
        self.ensure_poller();
        runtime.spawn(submit(self.inner.clone(), spec, instance));
        Ok(())
    }

    /// Stops an attempt: `scancel --signal=TERM` to its tasks at the next poll, `scancel` after
    /// the grace period (at once if it has not started). `Exited` comes when Slurm reports the
    /// job gone. Idempotent; an unknown attempt is a no-op.
    pub fn stop(&self, attempt: AttemptId) {
        let mut state = self.inner.state();
        if let Some(slot) = state.slots.get_mut(&attempt) {
            slot.stop.get_or_insert(StopCause::Requested);
            drop(state);
            self.inner.wake.notify_one();
        }
    }

    fn ensure_poller(&self) {
        let mut state = self.inner.state();
        if state.poller_started {
            return;
        }
        state.poller_started = true;
        drop(state);
        tokio::spawn(poll_loop(Arc::downgrade(&self.inner)));
    }
}

impl Inner {
    /// The settings in force now.
    fn cfg(&self) -> Arc<SlurmConfig> {
        self.cfg
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few map operations; a panic elsewhere must not wedge us.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, spec: &LaunchSpec) -> Slot {
        let layout = JobLayout::new(&self.cfg().shared_dir, &spec.job_id, spec.attempt_number);
        Slot {
            program: spec.entrypoint.first().cloned().unwrap_or_default(),
            log_dir: layout.attempt_dir.clone(),
            checkpoint_dir: layout.checkpoints.clone(),
            failure_file: layout.failure_file(),
            max_runtime: spec.max_runtime,
            slurm_id: None,
            submitted_at: None,
            starting_reported: false,
            pending_reason: None,
            running_since: None,
            stop: None,
            term_sent: None,
            cancel_sent: None,
            checkpoint_seen_ns: 0,
            // Slurm runs the job as its submitter, not a uid of the server's choosing.
            progress: Arc::new(Mutex::new(Tail::new(
                layout.progress_file(),
                layout.attempt_dir.join(log_file_name(LogStream::Stderr, 1)),
                None,
            ))),
            nodes: Vec::new(),
            stage_out: (spec.checkpoint_uri.is_some() || spec.output_path.is_some())
                .then(|| Box::new(spec.clone())),
            restored: None,
        }
    }

    /// Decides what becomes of one attempt at adoption (blocking: reads the file system).
    fn adopt_one(
        &self,
        a: AdoptSpec,
        by_attempt: &BTreeMap<AttemptId, SlurmJob>,
    ) -> (AttemptId, Adopted, Option<Slot>) {
        let spec = &a.spec;
        let found = by_attempt.get(&spec.attempt).filter(|j| {
            parse_marker(&self.cfg().tag, &j.comment)
                .is_some_and(|(job, n, _)| job == spec.job_id && n == spec.attempt_number)
        });
        let Some(job) = found else {
            return (spec.attempt, Adopted::Unknown, None);
        };
        let layout = JobLayout::new(&self.cfg().shared_dir, &spec.job_id, spec.attempt_number);
        let mut slot = self.slot(spec);
        slot.checkpoint_dir =
            layout.checkpoint_dir(spec.checkpoint_path.as_deref(), spec.attempt, None);
        slot.slurm_id = Some(job.id);
        slot.submitted_at = Some(Instant::now());
        slot.nodes = job.nodes.clone();
        if a.stopping {
            slot.stop = Some(StopCause::Requested);
        }
        if job.is_gone() {
            // What the executor recorded when it saw the end wins over what Slurm's final
            // state alone can say (a timeout it enforced, a stop it asked for).
            let outcome = read_outcome(&slot.log_dir).unwrap_or_else(|| {
                let o = slot_outcome(&slot, job);
                record_outcome(&slot.log_dir.join(OUTCOME_FILE), &o);
                o
            });
            return (spec.attempt, Adopted::Ended(outcome), None);
        }
        if let Some(ms) = a.running_since_ms {
            let ran = Duration::from_millis(now_ms().saturating_sub(ms));
            slot.starting_reported = true;
            slot.running_since = Some(Instant::now().checked_sub(ran).unwrap_or_else(Instant::now));
        }
        slot.checkpoint_seen_ns = newest_mtime_ns(&slot.checkpoint_dir).unwrap_or(0);
        tracing::info!(attempt = spec.attempt.0, slurm_job = job.id, state = %job.state, "adopted a Slurm job the previous server started");
        (spec.attempt, Adopted::Running, Some(slot))
    }

    /// Recomputes the capacity from a `sinfo` and a `squeue` snapshot, with the attempts live
    /// now, and keeps it as the one [`SlurmExecutor::capacity`] answers with.
    fn refresh_capacity(
        &self,
        state: &mut State,
        nodes: &[SlurmNode],
        jobs: &[SlurmJob],
    ) -> BTreeMap<String, u32> {
        let live: BTreeSet<AttemptId> = state.slots.keys().copied().collect();
        let cfg = self.cfg();
        state.capacity = capacity(&cfg.instances, nodes, jobs, &cfg.tag, &live);
        state.capacity.clone()
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.cfg().bin_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        }
    }

    /// Runs a Slurm command; its stdout, or what went wrong.
    async fn run(&self, name: &str, args: &[String]) -> Result<String, CommandError> {
        let program = self.program(name);
        let child = Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = match tokio::time::timeout(self.cfg().command_timeout, child).await {
            Err(_) => {
                return Err(CommandError::Unreachable(format!(
                    "{name} did not answer within {:?}",
                    self.cfg().command_timeout
                )))
            }
            Ok(Err(e)) => {
                return Err(CommandError::Failed(format!(
                    "cannot run {}: {e}; install the Slurm client commands or set executor.slurm.bin_dir",
                    program.display()
                )))
            }
            Ok(Ok(out)) => out,
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let text = format!("{name} failed ({}): {stderr}", out.status);
            return Err(if unreachable(&stderr) {
                CommandError::Unreachable(text)
            } else {
                CommandError::Failed(text)
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn squeue(&self) -> Result<Vec<SlurmJob>, String> {
        let text = self
            .run("squeue", &["--json".to_string()])
            .await
            .map_err(CommandError::into_message)?;
        report::parse_squeue(&text)
    }

    async fn sinfo(&self) -> Result<Vec<SlurmNode>, String> {
        // --all: nodes of hidden partitions too, or their types would have no capacity.
        let args = ["--all", "-N", "-h", "-o", SINFO_FORMAT].map(String::from);
        Ok(report::parse_sinfo(
            &self
                .run("sinfo", &args)
                .await
                .map_err(CommandError::into_message)?,
        ))
    }

    /// Reports `Exited` for an attempt no longer in the slots; the outcome is written next to
    /// the logs first, so a server that dies before logging it finds it at its next start.
    /// Blocking (file system).
    fn report_exit(&self, attempt: AttemptId, log_dir: &Path, outcome: Exit) {
        record_outcome(&log_dir.join(OUTCOME_FILE), &outcome);
        tracing::debug!(attempt = attempt.0, ?outcome, "Slurm attempt exited");
        let _ = self.events.send(ExecEvent::Exited {
            attempt,
            outcome,
            at_ms: now_ms(),
            usage: None,
        });
    }

    /// Reports how the ended attempts of a poll ended; an attempt with uploads to make
    /// reports once they are done, from a task of its own. Blocking (file system).
    fn conclude(self: &Arc<Self>, ended: Vec<(AttemptId, Slot, Ending)>) {
        for (attempt, mut slot, ending) in ended {
            // The lines the job wrote while it was stopping, before `Exited`.
            let mut progress = lock(&slot.progress);
            progress.poll_final();
            if let Some(steps) = progress.take_change() {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
            drop(progress);
            let outcome = match &ending {
                Ending::Job(job) => slot_outcome(&slot, job),
                Ending::Forgotten(id) => Exit::lost(format!(
                        "Attempt lost: Slurm no longer knows job {id} (it was purged, or the cluster's state was reset); the job was queued again without using a retry"
                    )),
            };
            match (slot.stage_out.take(), self.storage.clone()) {
                (Some(spec), Some(storage)) => {
                    let inner = self.clone();
                    tokio::runtime::Handle::current().spawn(async move {
                        let outcome = inner.stage_out(storage, &spec, &mut slot, outcome).await;
                        let _ = tokio::task::spawn_blocking(move || {
                            inner.report_exit(attempt, &slot.log_dir, outcome)
                        })
                        .await;
                    });
                }
                _ => self.report_exit(attempt, &slot.log_dir, outcome),
            }
        }
    }

    /// The checkpoints' last upload and, after a success, the model's: the job's Slurm job is
    /// gone, so what it left in the shared directory is final.
    async fn stage_out(
        self: &Arc<Self>,
        storage: Arc<Storage>,
        spec: &LaunchSpec,
        slot: &mut Slot,
        outcome: Exit,
    ) -> Exit {
        let layout = JobLayout::new(&self.cfg().shared_dir, &spec.job_id, spec.attempt_number);
        let mut stage = self.stage(storage, spec, &layout);
        let mut state = slot.restored.take().unwrap_or_default();
        let ckpt = spec
            .checkpoint_uri
            .is_some()
            .then_some((slot.checkpoint_dir.as_path(), &mut state));
        let succeeded = outcome == Exit::Succeeded;
        match stage.stage_out(spec, &layout, ckpt, succeeded).await {
            Err(reason) if succeeded => Exit::Failed {
                reason,
                retryable: true,
            },
            _ => outcome,
        }
    }

    /// The transfers of attempt `spec`, reporting as `Starting` and logging to algo-1's
    /// stderr in the shared directory.
    fn stage(
        self: &Arc<Self>,
        storage: Arc<Storage>,
        spec: &LaunchSpec,
        layout: &JobLayout,
    ) -> Stage {
        let events = self.events.clone();
        let report: crate::staging::Report = Arc::new(move |attempt, reason| {
            let _ = events.send(ExecEvent::Starting {
                attempt,
                reason: Some(reason),
            });
        });
        Stage::new(report, storage, spec, layout, None)
    }

    /// Compares one `squeue` snapshot, taken from `polled_at`, with the attempts: reports
    /// starts, plans the signals to send and hands over the attempts that ended.
    fn observe(&self, jobs: &[SlurmJob], polled_at: Instant) -> Plan {
        let tag = &self.cfg().tag;
        let now = Instant::now();
        let by_id: BTreeMap<u64, &SlurmJob> = jobs.iter().map(|j| (j.id, j)).collect();
        let mut plan = Plan::default();
        let mut state = self.state();
        let attempts: Vec<AttemptId> = state.slots.keys().copied().collect();
        for attempt in attempts {
            let Some(slot) = state.slots.get_mut(&attempt) else {
                continue;
            };
            let Some(id) = slot.slurm_id else {
                // sbatch has not returned yet.
                continue;
            };
            let job = by_id
                .get(&id)
                .copied()
                .filter(|j| parse_marker(tag, &j.comment).is_some_and(|(_, _, a)| a == attempt));
            let Some(job) = job else {
                if slot.submitted_at.is_some_and(|t| t <= polled_at) {
                    // Should it still exist where this server cannot see it, it must not run
                    // beside the attempt that replaces it: cancelling an unknown id is harmless.
                    plan.cancel.push(id);
                    if let Some(slot) = state.slots.remove(&attempt) {
                        plan.ended.push((attempt, slot, Ending::Forgotten(id)));
                    }
                }
                continue;
            };
            slot.nodes = job.nodes.clone();
            if job.is_gone() {
                if let Some(slot) = state.slots.remove(&attempt) {
                    plan.ended.push((attempt, slot, Ending::Job(job.clone())));
                }
                continue;
            }
            let started = self.report_start(attempt, slot, job, now);
            if let (Some(limit), Some(since), None) =
                (slot.max_runtime, slot.running_since, slot.stop)
            {
                if now.duration_since(since) >= limit {
                    slot.stop = Some(StopCause::Timeout);
                }
            }
            slot.plan_stop(id, started, now, self.cfg().stop_grace, &mut plan);
            if slot.running_since.is_some() {
                plan.scans.push((attempt, slot.checkpoint_dir.clone()));
                plan.progress.push(slot.progress.clone());
            }
        }
        cancel_orphans(tag, jobs, &mut state, now, &mut plan);
        plan
    }

    /// Reports what Slurm says of the attempt's job when it changed: waiting (and why), or
    /// running; returns whether Slurm has started it.
    fn report_start(
        &self,
        attempt: AttemptId,
        slot: &mut Slot,
        job: &SlurmJob,
        now: Instant,
    ) -> bool {
        let started = matches!(
            job.state.as_str(),
            "RUNNING" | "SUSPENDED" | "COMPLETING" | "SIGNALING" | "STAGE_OUT"
        );
        // Why Slurm has not started it, when that changes: "why a job waits" goes on
        // inside Slurm (a node taken by someone else in the poll's window, a QOS limit).
        let waiting = (!started).then(|| pending_reason(job)).flatten();
        if !slot.starting_reported || (!started && waiting != slot.pending_reason) {
            slot.starting_reported = true;
            slot.pending_reason.clone_from(&waiting);
            let _ = self.events.send(ExecEvent::Starting {
                attempt,
                reason: waiting,
            });
        }
        if started && slot.running_since.is_none() {
            slot.running_since = Some(now);
            let _ = self.events.send(ExecEvent::Running {
                attempt,
                pids: Vec::new(),
                gpus: Vec::new(),
                log_dir: slot.log_dir.clone(),
                at_ms: now_ms(),
                supervisor: None,
            });
        }
        started
    }

    /// While Slurm's job list cannot be read, stops still go out, from what was last known of
    /// each job (a preemption must not wait for slurmctld's answers to come back).
    fn blind_stops(&self) -> Plan {
        let now = Instant::now();
        let mut plan = Plan::default();
        for slot in self.state().slots.values_mut() {
            if let Some(id) = slot.slurm_id {
                let started = slot.running_since.is_some();
                slot.plan_stop(id, started, now, self.cfg().stop_grace, &mut plan);
            }
        }
        plan
    }

    /// Reports a `Progress` for each running attempt whose steps moved since its last report.
    fn record_progress(&self) {
        let state = self.state();
        for (&attempt, slot) in &state.slots {
            if let Some(steps) = lock(&slot.progress).take_change() {
                let _ = self.events.send(ExecEvent::Progress { attempt, steps });
            }
        }
    }

    /// Reports checkpoints whose newest mtime moved forward.
    fn record_checkpoints(&self, scanned: &[(AttemptId, u64)]) {
        let mut state = self.state();
        for &(attempt, newest) in scanned {
            if let Some(slot) = state.slots.get_mut(&attempt) {
                if newest > slot.checkpoint_seen_ns {
                    slot.checkpoint_seen_ns = newest;
                    let _ = self.events.send(ExecEvent::Checkpoint {
                        attempt,
                        at_ms: newest / 1_000_000,
                    });
                }
            }
        }
    }

    /// Sends the planned signals: SIGTERM to the step tasks of `plan.term`; SIGKILL to the batch
    /// step and every task of `plan.cancel`, then their cancellation.
    async fn signal(&self, plan: &Plan) {
        if !plan.term.is_empty() {
            let mut args = vec!["--signal=TERM".to_string()];
            args.extend(plan.term.iter().map(u64::to_string));
            if let Err(e) = self.run("scancel", &args).await {
                tracing::warn!(error = %e.into_message(), "scancel --signal=TERM failed");
            }
        }
        if !plan.cancel.is_empty() {
            let ids: Vec<String> = plan.cancel.iter().map(u64::to_string).collect();
            // SIGKILL first: a plain scancel would send SIGTERM again and wait Slurm's
            // KillWait, when the grace period has already been given. It fails for jobs that
            // have not started.
            let mut kill = vec!["--full".to_string(), "--signal=KILL".to_string()];
            kill.extend(ids.iter().cloned());
            if let Err(e) = self.run("scancel", &kill).await {
                tracing::debug!(error = %e.into_message(), "scancel --signal=KILL");
            }
            if let Err(e) = self.run("scancel", &ids).await {
                tracing::warn!(error = %e.into_message(), "scancel failed");
            }
        }
    }

    fn report_error(&self, e: String) {
        let mut state = self.state();
        if state.last_error.as_deref() != Some(e.as_str()) {
            tracing::error!(error = %e, "cannot read the Slurm cluster's state; attempts keep their last known state");
            state.last_error = Some(e);
        }
    }
}

/// Why a Slurm command failed.
#[derive(Debug)]
enum CommandError {
    /// slurmctld could not be reached or did not answer: try again later.
    Unreachable(String),
    /// The command ran and refused.
    Failed(String),
}

impl CommandError {
    fn into_message(self) -> String {
        match self {
            CommandError::Unreachable(m) | CommandError::Failed(m) => m,
        }
    }
}

/// Whether a Slurm command's error says the controller could not be reached (as opposed to a
/// refusal): such a submit is tried again rather than failed.
fn unreachable(stderr: &str) -> bool {
    [
        "Unable to contact slurm controller",
        "Socket timed out",
        "Zero Bytes were transmitted",
        "Connection refused",
        "Connection reset",
        "Resource temporarily unavailable",
        "Slurm backup controller in standby mode",
        "Slurmctld is busy",
        "Communication connection failure",
    ]
    .iter()
    .any(|p| stderr.contains(p))
}

/// Whether an `sbatch` refusal comes from the configuration rather than the moment: such a
/// job fails without retries, with a message naming the keys to check.
fn misconfigured(message: &str) -> bool {
    [
        "Invalid partition",
        "invalid partition",
        "Invalid account",
        "Invalid qos",
        "Invalid generic resource",
        "Invalid feature specification",
        "Requested node configuration is not available",
        "unrecognized option",
        "invalid option",
        "Invalid --",
    ]
    .iter()
    .any(|p| message.contains(p))
}

/// The capacity Slurm offers per instance type: nodes of the type's partition and feature
/// that are usable and held by no one else's job, plus those held by this server's live
/// attempts whatever their state (a node going down under a running attempt is still held by
/// it until Slurm ends the job). Jobs with this server's tag whose attempt is not live hold
/// their nodes like anyone else's. A node counts for the first type that matches it.
fn capacity(
    instances: &[SlurmInstance],
    nodes: &[SlurmNode],
    jobs: &[SlurmJob],
    tag: &str,
    live: &BTreeSet<AttemptId>,
) -> BTreeMap<String, u32> {
    let mut ours: BTreeSet<&str> = BTreeSet::new();
    let mut foreign: BTreeSet<&str> = BTreeSet::new();
    for j in jobs.iter().filter(|j| !j.is_gone()) {
        let mine = parse_marker(tag, &j.comment).is_some_and(|(_, _, a)| live.contains(&a));
        let set = if mine { &mut ours } else { &mut foreign };
        set.extend(j.nodes.iter().map(String::as_str));
    }
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    let mut out = BTreeMap::new();
    for inst in instances {
        let mut n = 0u32;
        for node in nodes {
            if !provides(inst, node) || !claimed.insert(node.name.as_str()) {
                continue;
            }
            let name = node.name.as_str();
            if ours.contains(name) || (node.usable() && !foreign.contains(name)) {
                n += 1;
            }
        }
        out.insert(inst.instance_type.clone(), n);
    }
    out
}

/// How a job Slurm reports gone ended, for the attempt `slot`. Blocking: reads the attempt's
/// start-error and failure files.
#[expect(clippy::too_many_lines, reason = "one match over Slurm's job states")]
fn slot_outcome(slot: &Slot, job: &SlurmJob) -> Exit {
    let id = job.id;
    if slot.stop == Some(StopCause::Timeout) {
        return Exit::Failed {
            reason: TIMEOUT_REASON.to_string(),
            retryable: false,
        };
    }
    let nodes = job.nodes.join(",");
    let failed = |reason: String| Exit::Failed {
        reason,
        retryable: true,
    };
    match job.state.as_str() {
        "COMPLETED" if job.exit.code == 0 && job.exit.signal == 0 => Exit::Succeeded,
        "COMPLETED" | "FAILED" => {
            for host in 1..=slot.nodes.len().max(1) as u32 {
                let path = slot.log_dir.join(start_error_file(host));
                if let Ok(text) = std::fs::read_to_string(&path) {
                    return failed(format!(
                        "{CLIENT_ERROR}cannot start '{}': {}",
                        slot.program,
                        text.trim()
                    ));
                }
            }
            if let Some(reason) = outcome::failure_file_reason(&slot.failure_file, None) {
                return failed(reason);
            }
            // The batch step is srun, which reports a task killed by signal N as 128 + N.
            let signal = match job.exit {
                e if e.signal != 0 => Some(e.signal),
                e if (129..=128 + 64).contains(&e.code) => Some(e.code - 128),
                _ => None,
            };
            // Word for word the local executor's reasons, so that one set of evaluateOnExit
            // rules serves both executors.
            match signal {
                Some(signal) => failed(format!(
                    "{ALGORITHM_ERROR}process killed by signal {}",
                    signal_name(signal)
                )),
                None => failed(format!(
                    "{ALGORITHM_ERROR}process exited with code {}",
                    job.exit.code
                )),
            }
        }
        "CANCELLED" if slot.stop.is_some() => failed(format!(
            "{ALGORITHM_ERROR}stopped: Slurm job {id} was cancelled after the grace period"
        )),
        "CANCELLED" => failed(format!(
            "{ALGORITHM_ERROR}Slurm job {id} was cancelled outside Quartermaster (scancel)"
        )),
        "TIMEOUT" => Exit::Failed {
            reason: format!("{TIMEOUT_REASON} (Slurm's time limit ended job {id})"),
            retryable: false,
        },
        "OUT_OF_MEMORY" => failed(format!(
            "{ALGORITHM_ERROR}OutOfMemory: Slurm job {id} ran out of memory on {nodes}"
        )),
        "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" | "REVOKED" => Exit::lost(format!(
                "Attempt lost: Slurm job {id} ended {} ({}) on {nodes}; the job was queued again without using a retry",
                job.state,
                if job.reason.is_empty() {
                    "no reason given"
                } else {
                    &job.reason
                }
            )),
        other => failed(format!(
            "{ALGORITHM_ERROR}Slurm job {id} ended {other} ({})",
            job.reason
        )),
    }
}

fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

/// What the submit task prepared on the file system.
struct Prepared {
    args: Vec<String>,
    checkpoint_dir: PathBuf,
    baseline_ns: u64,
}

/// Prepares the job's directories, writes the script and submits it. While slurmctld cannot
/// be reached, `sbatch` is tried again with a growing pause (the attempt waits, STARTING is
/// not reported); before each new try the cluster is asked whether the previous one got
/// through after all, so that one attempt never becomes two Slurm jobs.
async fn submit(inner: Arc<Inner>, spec: LaunchSpec, instance: SlurmInstance) {
    let attempt = spec.attempt;
    let result = submit_inner(&inner, &spec, &instance).await;
    match result {
        Ok((id, prepared)) => {
            let mut state = inner.state();
            if let Some(slot) = state.slots.get_mut(&attempt) {
                slot.slurm_id = Some(id);
                slot.submitted_at = Some(Instant::now());
                slot.checkpoint_dir = prepared.checkpoint_dir;
                slot.checkpoint_seen_ns = prepared.baseline_ns;
                tracing::debug!(attempt = attempt.0, slurm_job = id, "submitted");
            }
            drop(state);
            inner.wake.notify_one();
        }
        Err(outcome) => {
            if let Exit::Failed { reason, .. } = &outcome {
                tracing::warn!(attempt = attempt.0, %reason, "the attempt was not submitted to Slurm");
            }
            let slot = inner.state().slots.remove(&attempt);
            if let Some(slot) = slot {
                let inner2 = inner.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    inner2.report_exit(attempt, &slot.log_dir, outcome)
                })
                .await;
            }
        }
    }
}

#[expect(clippy::too_many_lines, reason = "a submit with its retries in order")]
async fn submit_inner(
    inner: &Arc<Inner>,
    spec: &LaunchSpec,
    instance: &SlurmInstance,
) -> Result<(u64, Prepared), Exit> {
    let client_error = |reason: String| Exit::Failed {
        reason,
        retryable: true,
    };
    let prepared = {
        let (inner, spec, instance) = (inner.clone(), spec.clone(), instance.clone());
        tokio::task::spawn_blocking(move || prepare(&inner, &spec, &instance))
            .await
            .map_err(|e| client_error(format!("{CLIENT_ERROR}preparing the job: {e}")))?
            .map_err(client_error)?
    };
    let prepared = stage_in(inner, spec, prepared).await?;
    let _permit = inner
        .submits
        .acquire()
        .await
        .map_err(|e| client_error(e.to_string()))?;
    let mine = marker(
        &inner.cfg().tag,
        &spec.job_id,
        spec.attempt_number,
        spec.attempt,
    );
    let mut pause = Duration::from_secs(1);
    loop {
        // A stop that arrived while the attempt waited: submit nothing.
        let stopped = inner
            .state()
            .slots
            .get(&spec.attempt)
            .is_none_or(|s| s.stop.is_some());
        if stopped {
            return Err(client_error(format!(
                "{ALGORITHM_ERROR}stopped before it was submitted to Slurm"
            )));
        }
        match inner.run("sbatch", &prepared.args).await {
            Ok(out) => {
                // --parsable prints "<id>" or "<id>;<cluster>".
                return match out.trim().split(';').next().and_then(|s| s.parse().ok()) {
                    Some(id) => Ok((id, prepared)),
                    None => Err(client_error(format!(
                        "Received status from SageMaker: InternalServerError: sbatch printed no job id: {out:?}"
                    ))),
                };
            }
            Err(CommandError::Failed(e)) if misconfigured(&e) => {
                return Err(Exit::Failed {
                    reason: format!(
                        "{CLIENT_ERROR}Slurm refused the job: {e}; check executor.slurm.instance (partition, feature, gpus_per_instance), account and extra_sbatch_args for {}",
                        spec.instance_type
                    ),
                    retryable: false,
                })
            }
            Err(CommandError::Failed(e)) => {
                return Err(client_error(format!(
                    "Received status from SageMaker: InternalServerError: Slurm refused the job: {e}"
                )))
            }
            Err(CommandError::Unreachable(e)) => {
                tracing::warn!(attempt = spec.attempt.0, error = %e, retry_in = ?pause, "cannot reach Slurm to submit; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(SUBMIT_BACKOFF_MAX);
                // The try that timed out may have been accepted.
                if let Ok(jobs) = inner.squeue().await {
                    if let Some(j) = jobs.iter().find(|j| j.comment == mine) {
                        return Ok((j.id, prepared));
                    }
                }
            }
        }
    }
}

/// Downloads the attempt's channels and restores its checkpoints into the shared directory,
/// before `sbatch`; a stop meanwhile ends the downloads.
async fn stage_in(
    inner: &Arc<Inner>,
    spec: &LaunchSpec,
    mut prepared: Prepared,
) -> Result<Prepared, Exit> {
    if spec.channels.is_empty() && spec.checkpoint_uri.is_none() {
        return Ok(prepared);
    }
    let Some(storage) = inner.storage.clone() else {
        return Err(Exit::Failed {
            reason: format!("{CLIENT_ERROR}the job has input channels or CheckpointConfig.S3Uri but this executor has no storage configured ([storage] in the server's config)"),
            retryable: false,
        });
    };
    let layout = JobLayout::new(&inner.cfg().shared_dir, &spec.job_id, spec.attempt_number);
    let mut stage = inner.stage(storage, spec, &layout);
    let stopped = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if inner
                .state()
                .slots
                .get(&spec.attempt)
                .is_none_or(|s| s.stop.is_some())
            {
                return;
            }
        }
    };
    let staged = tokio::select! {
        staged = stage.stage_in(spec, &layout, &prepared.checkpoint_dir) => staged,
        () = stopped => Err(Exit::Failed {
            reason: format!("{CLIENT_ERROR}stopped while its inputs were downloading"),
            retryable: true,
        }),
    };
    let restored = staged?;
    if let Some(slot) = inner.state().slots.get_mut(&spec.attempt) {
        slot.restored = restored;
    }
    // Newer files than the restored ones are this attempt's checkpoints.
    prepared.baseline_ns = newest_mtime_ns(&prepared.checkpoint_dir).unwrap_or(0);
    Ok(prepared)
}

/// The job's directories, its checkpoint directory and baseline, the script, and the
/// `sbatch` arguments. Blocking (file system).
fn prepare(inner: &Inner, spec: &LaunchSpec, instance: &SlurmInstance) -> Result<Prepared, String> {
    let layout = JobLayout::new(&inner.cfg().shared_dir, &spec.job_id, spec.attempt_number);
    let job_dir = layout.prepare(None).map_err(|(path, e)| {
        format!(
            "{CLIENT_ERROR}cannot create '{}': {e}; check executor.slurm.shared_dir",
            path.display()
        )
    })?;
    // Without resourceconfig.json: the hosts are the allocation's nodes, known on the node.
    crate::input::prepare(&layout, spec, None, job_dir, None).map_err(|(path, e)| {
        format!(
            "{CLIENT_ERROR}cannot write '{}': {e}; check executor.slurm.shared_dir",
            path.display()
        )
    })?;
    let checkpoint_dir = layout.checkpoint_dir(spec.checkpoint_path.as_deref(), spec.attempt, None);
    // Newer files than these are this attempt's checkpoints.
    let baseline_ns = newest_mtime_ns(&checkpoint_dir).unwrap_or(0);
    let vars: Vec<(String, String)> = environment::common(spec, &layout, &checkpoint_dir)
        .into_iter()
        // SM_HOSTS comes from the allocation; with GPUs, Slurm's CUDA_VISIBLE_DEVICES wins
        // over the payload's, as the local executor's does.
        .filter(|(k, _)| {
            k != "SM_HOSTS" && !(instance.gpus_per_instance > 0 && k == "CUDA_VISIBLE_DEVICES")
        })
        .collect();
    let script_path = layout.attempt_dir.join(SCRIPT_FILE);
    let text = script::batch_script(
        spec,
        &layout,
        &script_path,
        &vars,
        instance.gpus_per_instance,
    );
    std::fs::write(&script_path, text).map_err(|e| {
        format!(
            "{CLIENT_ERROR}cannot write '{}': {e}",
            script_path.display()
        )
    })?;
    // One reading: a reload meanwhile gives the job the old arguments or the new, not a mix.
    let cfg = inner.cfg();
    let args = script::sbatch_args(
        spec,
        instance,
        &layout,
        &script_path,
        &job_name(spec),
        &marker(&cfg.tag, &spec.job_id, spec.attempt_number, spec.attempt),
        cfg.account.as_deref(),
        &cfg.extra_sbatch_args,
    );
    Ok(Prepared {
        args,
        checkpoint_dir,
        baseline_ns,
    })
}

/// Reads Slurm every `poll` (sooner when woken by a start or stop), reports, signals.
async fn poll_loop(inner: std::sync::Weak<Inner>) {
    let mut last_capacity = match inner.upgrade() {
        // What adopt() read is what the server already publishes.
        Some(i) => Some(i.state().capacity.clone()),
        None => return,
    };
    loop {
        let Some(inner) = inner.upgrade() else { return };
        let polled_at = Instant::now();
        let (jobs, nodes) = tokio::join!(inner.squeue(), inner.sinfo());
        match jobs {
            Err(e) => {
                inner.report_error(e);
                inner.signal(&inner.blind_stops()).await;
            }
            Ok(jobs) => {
                inner.state().last_error = None;
                let mut plan = inner.observe(&jobs, polled_at);
                // The capacity first, computed without the attempts that just ended: the
                // server applies reports in order, and an exit must not free a node that went
                // down with its job before the capacity says it is gone.
                if let Ok(nodes) = nodes {
                    let cap = inner.refresh_capacity(&mut inner.state(), &nodes, &jobs);
                    if last_capacity.as_ref() != Some(&cap) {
                        let _ = inner.events.send(ExecEvent::Capacity {
                            capacity: cap.clone(),
                        });
                        last_capacity = Some(cap);
                    }
                }
                let ended = std::mem::take(&mut plan.ended);
                if !ended.is_empty() {
                    let i = inner.clone();
                    let _ = tokio::task::spawn_blocking(move || i.conclude(ended)).await;
                }
                inner.signal(&plan).await;
                if !plan.scans.is_empty() {
                    inner.record_checkpoints(&checkpoint::scan(plan.scans).await);
                }
                if !plan.progress.is_empty() {
                    let tails = std::mem::take(&mut plan.progress);
                    let _ = tokio::task::spawn_blocking(move || {
                        tails.iter().for_each(|t| {
                            lock(t).poll();
                        })
                    })
                    .await;
                    inner.record_progress();
                }
            }
        }
        let wake = inner.clone();
        // The period in force now: a reload may change it.
        let poll = inner.cfg().poll;
        drop(inner);
        // Woken early by a start or a stop, but never more often than MIN_POLL_GAP.
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = wake.wake.notified() => {
                tokio::time::sleep_until(polled_at + MIN_POLL_GAP.min(poll)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::report::ExitStatus;

    fn job(id: u64, comment: &str, state: &str, nodes: &[&str]) -> SlurmJob {
        SlurmJob {
            id,
            comment: comment.into(),
            state: state.into(),
            reason: String::new(),
            exit: ExitStatus::default(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn node(name: &str, state: &str, partition: &str, features: &[&str]) -> SlurmNode {
        SlurmNode {
            name: name.into(),
            state: state.into(),
            partition: partition.into(),
            features: features.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn markers_round_trip_and_other_tags_are_not_ours() {
        let m = marker("t1", "job-a", 2, AttemptId(9));
        assert_eq!(parse_marker("t1", &m), Some(("job-a", 2, AttemptId(9))));
        assert_eq!(parse_marker("t2", &m), None);
        assert_eq!(parse_marker("t1", "qm/t1/job"), None);
        assert_eq!(parse_marker("t1", ""), None);
    }

    #[test]
    fn capacity_counts_usable_nodes_not_held_by_others_once_per_type() {
        let inst = |t: &str, p: Option<&str>, f: Option<&str>| SlurmInstance {
            instance_type: t.into(),
            partition: p.map(String::from),
            feature: f.map(String::from),
            gpus_per_instance: 1,
        };
        let instances = [
            inst("ml.p4d.24xlarge", Some("gpu"), Some("a100")),
            inst("ml.g5.xlarge", Some("gpu"), None),
        ];
        let nodes = [
            node("n1", "idle", "gpu", &["a100"]),
            node("n2", "alloc", "gpu", &["a100"]),
            node("n3", "down*", "gpu", &["a100"]),
            node("n4", "idle", "gpu", &[]),
            node("n5", "mix", "gpu", &[]),
            node("n6", "idle", "cpu", &[]),
            // The same node listed in a second partition: counted once.
            node("n4", "idle", "debug", &[]),
        ];
        let jobs = [
            job(1, &marker("me", "j", 1, AttemptId(1)), "RUNNING", &["n2"]),
            job(2, "someone else", "RUNNING", &["n5"]),
            job(3, "someone else", "COMPLETED", &["n4"]),
            job(
                4,
                &marker("other-server", "j", 1, AttemptId(1)),
                "RUNNING",
                &["n1"],
            ),
        ];
        let live = BTreeSet::from([AttemptId(1)]);
        let cap = capacity(&instances, &nodes, &jobs, "me", &live);
        assert_eq!(
            cap["ml.p4d.24xlarge"], 1,
            "n2 is ours; n1 another server's; n3 down"
        );
        assert_eq!(
            cap["ml.g5.xlarge"], 1,
            "n4 only: n1..n3 went to the first type, n5 is held"
        );
        // Our live attempt on a node that went down still holds it (no flapping until Slurm
        // ends the job); our job of an attempt no longer live holds its node like anyone's.
        let jobs = [
            job(1, &marker("me", "j", 1, AttemptId(1)), "RUNNING", &["n3"]),
            job(7, &marker("me", "k", 1, AttemptId(7)), "RUNNING", &["n1"]),
        ];
        let cap = capacity(&instances, &nodes, &jobs, "me", &live);
        assert_eq!(
            cap["ml.p4d.24xlarge"], 2,
            "n2 (alloc, no job seen) and n3 (ours)"
        );
    }

    #[test]
    fn a_node_that_provides_two_instance_types_is_refused() {
        let inst = |t: &str, f: Option<&str>| SlurmInstance {
            instance_type: t.into(),
            partition: Some("gpu".into()),
            feature: f.map(String::from),
            gpus_per_instance: 1,
        };
        let nodes = [
            node("n1", "idle", "gpu", &["a100"]),
            node("n2", "idle", "gpu", &["a10g"]),
        ];
        assert!(check_disjoint(
            &[inst("p4d", Some("a100")), inst("g5", Some("a10g"))],
            &nodes
        )
        .is_ok());
        let e = check_disjoint(&[inst("p4d", Some("a100")), inst("g5", None)], &nodes)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node n1") && e.contains("instance[0]") && e.contains("instance[1]"),
            "{e}"
        );
    }

    fn slot(dir: &Path) -> Slot {
        let inner_cfg = SlurmConfig::new(dir, vec![], "t");
        let layout = JobLayout::new(&inner_cfg.shared_dir, "j", 1);
        Slot {
            program: "train.py".into(),
            log_dir: layout.attempt_dir.clone(),
            checkpoint_dir: layout.checkpoints.clone(),
            failure_file: layout.failure_file(),
            max_runtime: None,
            slurm_id: Some(5),
            submitted_at: None,
            starting_reported: true,
            pending_reason: None,
            running_since: None,
            stop: None,
            term_sent: None,
            cancel_sent: None,
            checkpoint_seen_ns: 0,
            progress: Arc::new(Mutex::new(Tail::new(
                layout.progress_file(),
                layout.attempt_dir.join("stderr.log"),
                None,
            ))),
            nodes: vec!["n1".into()],
            stage_out: None,
            restored: None,
        }
    }

    #[test]
    fn slurm_end_states_map_to_outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = slot(dir.path());
        let mut j = job(5, "", "COMPLETED", &["n1"]);
        assert_eq!(slot_outcome(&s, &j), Exit::Succeeded);
        j.state = "FAILED".into();
        j.exit = ExitStatus { code: 3, signal: 0 };
        assert_eq!(
            slot_outcome(&s, &j),
            Exit::Failed {
                reason:
                    "Received status from SageMaker: AlgorithmError: process exited with code 3"
                        .into(),
                retryable: true
            }
        );
        std::fs::create_dir_all(s.failure_file.parent().unwrap()).unwrap();
        std::fs::write(&s.failure_file, "loss is NaN\n").unwrap();
        assert_eq!(
            slot_outcome(&s, &j),
            Exit::Failed {
                reason: "Received status from SageMaker: AlgorithmError: loss is NaN".into(),
                retryable: true
            }
        );
        std::fs::remove_file(&s.failure_file).unwrap();
        j.exit = ExitStatus {
            code: 137,
            signal: 0,
        };
        assert_eq!(
            slot_outcome(&s, &j),
            Exit::Failed {
                reason: "Received status from SageMaker: AlgorithmError: process killed by signal SIGKILL".into(),
                retryable: true
            },
            "srun reports a task killed by signal N as 128 + N"
        );
        j.state = "NODE_FAIL".into();
        j.reason = "NodeDown".into();
        match slot_outcome(&s, &j) {
            Exit::Lost { reason, .. } => {
                assert!(reason.contains("NODE_FAIL (NodeDown) on n1"), "{reason}")
            }
            o => panic!("{o:?}"),
        }
        j.state = "TIMEOUT".into();
        assert!(matches!(
            slot_outcome(&s, &j),
            Exit::Failed {
                retryable: false,
                ..
            }
        ));
        j.state = "OUT_OF_MEMORY".into();
        assert!(
            matches!(slot_outcome(&s, &j), Exit::Failed { reason, retryable: true } if reason.contains("OutOfMemory"))
        );
        j.state = "CANCELLED".into();
        assert!(
            matches!(slot_outcome(&s, &j), Exit::Failed { reason, .. } if reason.contains("outside Quartermaster"))
        );
        s.stop = Some(StopCause::Timeout);
        assert_eq!(
            slot_outcome(&s, &j),
            Exit::Failed {
                reason: TIMEOUT_REASON.into(),
                retryable: false
            }
        );
    }

    #[test]
    fn an_entrypoint_that_cannot_start_is_a_client_error() {
        let dir = tempfile::tempdir().unwrap();
        let s = slot(dir.path());
        std::fs::create_dir_all(&s.log_dir).unwrap();
        std::fs::write(
            s.log_dir.join(start_error_file(1)),
            "not found or not executable on n1\n",
        )
        .unwrap();
        let mut j = job(5, "", "FAILED", &["n1"]);
        j.exit = ExitStatus {
            code: 127,
            signal: 0,
        };
        assert!(
            matches!(slot_outcome(&s, &j), Exit::Failed { reason, .. } if reason.starts_with(CLIENT_ERROR) && reason.contains("'train.py': not found"))
        );
    }

    fn inner(dir: &Path, grace: Duration) -> (Arc<Inner>, mpsc::UnboundedReceiver<ExecEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut cfg = SlurmConfig::new(dir, vec![], "me");
        cfg.stop_grace = grace;
        let inner = Inner {
            cfg: std::sync::RwLock::new(Arc::new(cfg)),
            storage: None,
            events: tx,
            state: Mutex::new(State::default()),
            submits: Semaphore::new(1),
            wake: Notify::new(),
        };
        (Arc::new(inner), rx)
    }

    /// Attempt `attempt` as submitted: Slurm job `id`, sbatch returned at `at`.
    fn submitted(inner: &Inner, attempt: AttemptId, id: u64, at: Instant) {
        let spec = LaunchSpec::new(
            attempt,
            format!("job-{attempt}"),
            "ml.g5.xlarge",
            vec!["true".into()],
        );
        let mut slot = inner.slot(&spec);
        slot.slurm_id = Some(id);
        slot.submitted_at = Some(at);
        inner.state().slots.insert(attempt, slot);
    }

    fn ours(attempt: AttemptId, id: u64, state: &str) -> SlurmJob {
        job(
            id,
            &marker("me", &format!("job-{attempt}"), 1, attempt),
            state,
            &["n1"],
        )
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<ExecEvent>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            out.push(match ev {
                ExecEvent::Starting { attempt, reason } => match reason {
                    Some(r) => format!("starting {attempt} ({r})"),
                    None => format!("starting {attempt}"),
                },
                ExecEvent::Running { attempt, .. } => format!("running {attempt}"),
                ExecEvent::Exited {
                    attempt, outcome, ..
                } => format!("exited {attempt} {outcome:?}"),
                ExecEvent::Checkpoint { attempt, .. } => format!("checkpoint {attempt}"),
                ExecEvent::Progress { attempt, .. } => format!("progress {attempt}"),
                ExecEvent::Capacity { .. } => "capacity".into(),
            });
        }
        out
    }

    /// One poll's decisions, with the ended attempts concluded as the poller does.
    fn step(inner: &Arc<Inner>, jobs: &[SlurmJob], polled_at: Instant) -> Plan {
        let mut plan = inner.observe(jobs, polled_at);
        inner.conclude(std::mem::take(&mut plan.ended));
        plan
    }

    #[test]
    fn a_job_is_reported_starting_then_running_then_exited_once() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, mut rx) = inner(dir.path(), Duration::from_secs(1));
        let t0 = Instant::now();
        submitted(&inner, AttemptId(1), 10, t0);
        step(&inner, &[ours(AttemptId(1), 10, "PENDING")], t0);
        assert_eq!(drain(&mut rx), ["starting 1"]);
        step(&inner, &[ours(AttemptId(1), 10, "RUNNING")], t0);
        step(&inner, &[ours(AttemptId(1), 10, "RUNNING")], t0);
        assert_eq!(drain(&mut rx), ["running 1"]);
        step(&inner, &[ours(AttemptId(1), 10, "COMPLETING")], t0);
        assert!(
            drain(&mut rx).is_empty(),
            "a completing job still holds its nodes"
        );
        step(&inner, &[ours(AttemptId(1), 10, "COMPLETED")], t0);
        assert_eq!(drain(&mut rx), ["exited 1 Succeeded"]);
        assert_eq!(inner.state().slots.len(), 0);
        let recorded = std::fs::read_to_string(
            JobLayout::new(dir.path(), "job-1", 1)
                .attempt_dir
                .join(OUTCOME_FILE),
        )
        .unwrap();
        assert!(
            recorded.contains("Succeeded"),
            "the outcome is written before it is reported"
        );
    }

    #[test]
    fn why_slurm_has_not_started_a_job_is_reported_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, mut rx) = inner(dir.path(), Duration::from_secs(1));
        let t0 = Instant::now();
        submitted(&inner, AttemptId(1), 10, t0);
        let pending = |reason: &str| {
            let mut j = ours(AttemptId(1), 10, "PENDING");
            j.reason = reason.into();
            j
        };
        step(&inner, &[pending("None")], t0);
        step(&inner, &[pending("Resources")], t0);
        step(&inner, &[pending("Resources")], t0);
        step(&inner, &[pending("QOSMaxJobsPerUserLimit")], t0);
        step(&inner, &[ours(AttemptId(1), 10, "RUNNING")], t0);
        assert_eq!(
            drain(&mut rx),
            [
                "starting 1",
                "starting 1 (Slurm job 10 is pending: Resources)",
                "starting 1 (Slurm job 10 is pending: QOSMaxJobsPerUserLimit)",
                "running 1"
            ]
        );
    }

    #[test]
    fn a_running_job_is_signalled_then_cancelled_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, _rx) = inner(dir.path(), Duration::from_millis(50));
        let t0 = Instant::now();
        submitted(&inner, AttemptId(1), 10, t0);
        let running = [ours(AttemptId(1), 10, "RUNNING")];
        step(&inner, &running, t0);
        inner.state().slots.get_mut(&AttemptId(1)).unwrap().stop = Some(StopCause::Requested);
        let plan = step(&inner, &running, t0);
        assert_eq!((plan.term.clone(), plan.cancel.clone()), (vec![10], vec![]));
        let plan = step(&inner, &running, t0);
        assert!(
            plan.term.is_empty() && plan.cancel.is_empty(),
            "the grace period runs"
        );
        std::thread::sleep(Duration::from_millis(60));
        let plan = step(&inner, &running, t0);
        assert_eq!((plan.term.clone(), plan.cancel.clone()), (vec![], vec![10]));
        let plan = step(&inner, &running, t0);
        assert!(
            plan.cancel.is_empty(),
            "one scancel until the retry interval"
        );
    }

    #[test]
    fn a_pending_job_is_cancelled_at_once_and_a_late_one_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, mut rx) = inner(dir.path(), Duration::from_secs(60));
        let t0 = Instant::now();
        submitted(&inner, AttemptId(1), 10, t0);
        inner.state().slots.get_mut(&AttemptId(1)).unwrap().stop = Some(StopCause::Requested);
        let plan = step(&inner, &[ours(AttemptId(1), 10, "PENDING")], t0);
        assert_eq!((plan.term, plan.cancel), (vec![], vec![10]));

        submitted(&inner, AttemptId(2), 11, t0);
        inner
            .state()
            .slots
            .get_mut(&AttemptId(2))
            .unwrap()
            .max_runtime = Some(Duration::ZERO);
        let plan = step(
            &inner,
            &[
                ours(AttemptId(2), 11, "RUNNING"),
                ours(AttemptId(1), 10, "PENDING"),
            ],
            t0,
        );
        assert_eq!(plan.term, vec![11], "the runtime limit stops the attempt");
        drain(&mut rx);
        step(&inner, &[ours(AttemptId(2), 11, "CANCELLED")], t0);
        let events = drain(&mut rx);
        assert!(
            events.iter().any(|e| e.starts_with("exited 2")
                && e.contains("exceeded timeout")
                && e.contains("retryable: false")),
            "{events:?}"
        );
    }

    #[test]
    fn a_job_slurm_forgot_is_lost_but_only_after_a_snapshot_taken_after_its_submission() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, mut rx) = inner(dir.path(), Duration::from_secs(1));
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        submitted(&inner, AttemptId(1), 10, Instant::now());
        step(&inner, &[], before);
        assert!(
            drain(&mut rx).is_empty(),
            "the snapshot predates the submission"
        );
        let plan = step(&inner, &[], Instant::now());
        let events = drain(&mut rx);
        assert!(
            events[0].starts_with("exited 1 Lost") && events[0].contains("no longer knows job 10"),
            "{events:?}"
        );
        assert_eq!(
            plan.cancel,
            vec![10],
            "in case it runs where this server cannot see it"
        );
        // A job id reused by a reset cluster, under another comment, is not this attempt.
        submitted(&inner, AttemptId(2), 12, before);
        step(
            &inner,
            &[job(12, "someone's", "RUNNING", &["n1"])],
            Instant::now(),
        );
        assert!(drain(&mut rx)[0].starts_with("exited 2 Lost"));
    }

    #[test]
    fn marked_jobs_of_attempts_not_run_here_are_cancelled_and_others_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, _rx) = inner(dir.path(), Duration::from_secs(1));
        let plan = step(
            &inner,
            &[
                ours(AttemptId(7), 20, "RUNNING"),
                ours(AttemptId(8), 21, "COMPLETED"),
                job(
                    22,
                    &marker("other", "job-9", 1, AttemptId(9)),
                    "RUNNING",
                    &["n2"],
                ),
                job(23, "", "RUNNING", &["n3"]),
            ],
            Instant::now(),
        );
        assert_eq!(plan.cancel, vec![20]);
        let again = step(&inner, &[ours(AttemptId(7), 20, "RUNNING")], Instant::now());
        assert!(
            again.cancel.is_empty(),
            "not again before the retry interval"
        );
    }
}
