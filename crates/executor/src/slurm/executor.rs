//! The Slurm executor's handle, its shared state, the submit tasks and the poller.
//!
//! The state is one mutex, never held across an await or a Slurm command: the poller reads
//! Slurm, then decides under the lock, then acts (scancel) outside it.

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
use crate::executor::{now_ms, record_outcome};
use crate::layout::{self, JobLayout};
use crate::outcome::{self, ALGORITHM_ERROR, CLIENT_ERROR, TIMEOUT_REASON};
use crate::{environment, ExecError, ExecEvent, LaunchSpec, Outcome, OUTCOME_FILE};

/// At most this many `sbatch` run at once: each is a process and an RPC to slurmctld.
const SUBMIT_CONCURRENCY: usize = 4;

/// The poller never runs more often than this, however often it is woken.
const MIN_POLL_GAP: Duration = Duration::from_millis(100);

/// How long a cancelled job may stay before `scancel` is sent again.
const CANCEL_RETRY: Duration = Duration::from_secs(30);

/// The name of an attempt's batch script in its log directory.
const SCRIPT_FILE: &str = "slurm.sh";

/// What became of an attempt the previous server left running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// Its Slurm job still runs (or waits); the executor follows it from now on.
    Running,
    /// Its Slurm job ended while no server watched it.
    Ended(Outcome),
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
    cfg: SlurmConfig,
    events: mpsc::UnboundedSender<ExecEvent>,
    state: Mutex<State>,
    submits: Semaphore,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    slots: BTreeMap<u64, Slot>,
    capacity: BTreeMap<String, u32>,
    poller_started: bool,
    /// The last poll failure reported, so a broken cluster logs once, not every poll.
    last_error: Option<String>,
}

#[derive(Debug)]
struct Slot {
    /// The entrypoint's program, for a start failure's reason.
    program: String,
    log_dir: PathBuf,
    checkpoint_dir: PathBuf,
    failure_file: PathBuf,
    max_runtime: Option<Duration>,
    /// Set once `sbatch` returned the job id.
    slurm_id: Option<u64>,
    /// When `sbatch` returned: a poll that began before cannot prove the job missing.
    submitted_at: Option<Instant>,
    starting_reported: bool,
    running_since: Option<Instant>,
    stop: Option<StopCause>,
    term_sent: Option<Instant>,
    /// When `scancel` was last sent; sent again every [`CANCEL_RETRY`] until the job is gone.
    cancel_sent: Option<Instant>,
    checkpoint_seen_ns: u64,
    nodes: Vec<String>,
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
    scans: Vec<(u64, PathBuf)>,
}

/// The comment that marks attempt `attempt` (number `n` of `job_id`) as this server's.
fn marker(tag: &str, job_id: &str, n: u32, attempt: u64) -> String {
    format!("qm/{tag}/{job_id}/{n}/{attempt}")
}

/// `(job id, attempt number, attempt)` of a comment with this server's tag.
fn parse_marker<'a>(tag: &str, comment: &'a str) -> Option<(&'a str, u32, u64)> {
    let rest = comment
        .strip_prefix("qm/")?
        .strip_prefix(tag)?
        .strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (job, n, attempt) = (parts.next()?, parts.next()?, parts.next()?);
    Some((job, n.parse().ok()?, attempt.parse().ok()?))
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

impl SlurmExecutor {
    /// Creates `shared_dir/jobs`. Slurm is first read by [`SlurmExecutor::adopt`].
    pub fn new(
        cfg: SlurmConfig,
        events: mpsc::UnboundedSender<ExecEvent>,
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
                cfg,
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

    /// The per-job directory (`shared_dir/jobs/<job_id>`).
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        layout::job_dir(&self.inner.cfg.shared_dir, job_id)
    }

    /// Where attempt `attempt_number` of `job_id` keeps its logs.
    pub fn log_dir(&self, job_id: &str, attempt_number: u32) -> PathBuf {
        JobLayout::new(&self.inner.cfg.shared_dir, job_id, attempt_number).attempt_dir
    }

    /// The directory under which job directories live.
    pub fn shared_dir(&self) -> &Path {
        &self.inner.cfg.shared_dir
    }

    /// How attempt `attempt_number` of `job_id` ended, as recorded before its `Exited` event.
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Outcome> {
        let bytes = std::fs::read(self.log_dir(job_id, attempt_number).join(OUTCOME_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Attempts started or adopted and not yet `Exited`.
    pub fn running(&self) -> usize {
        self.inner.state().slots.len()
    }

    /// At start-up, before any `start`: reads Slurm once (an error says what to fix when Slurm
    /// cannot be reached), takes back the attempts the log says were running, and starts the
    /// poller. `running_since_ms` is when the server last saw the attempt running, if it did.
    /// Returns what became of each.
    pub async fn adopt(
        &self,
        attempts: Vec<(LaunchSpec, Option<u64>)>,
    ) -> Result<Vec<(u64, Adopted)>, ExecError> {
        let jobs = self.inner.squeue().await.map_err(ExecError::Slurm)?;
        let nodes = self.inner.sinfo().await.map_err(ExecError::Slurm)?;
        let tag = &self.inner.cfg.tag;
        let mut by_attempt: BTreeMap<u64, &SlurmJob> = BTreeMap::new();
        for j in &jobs {
            if let Some((_, _, attempt)) = parse_marker(tag, &j.comment) {
                // A requeued or resubmitted copy may exist; the live one wins.
                let keep = by_attempt.get(&attempt).is_some_and(|old| !old.is_gone());
                if !keep {
                    by_attempt.insert(attempt, j);
                }
            }
        }
        let mut out = Vec::new();
        {
            let mut state = self.inner.state();
            state.capacity = capacity(&self.inner.cfg.instances, &nodes, &jobs, tag);
            for (spec, running_since_ms) in attempts {
                let found = by_attempt.get(&spec.attempt).filter(|j| {
                    parse_marker(tag, &j.comment)
                        .is_some_and(|(job, n, _)| job == spec.job_id && n == spec.attempt_number)
                });
                let Some(job) = found else {
                    out.push((spec.attempt, Adopted::Unknown));
                    continue;
                };
                let mut slot = self.inner.slot(&spec);
                slot.slurm_id = Some(job.id);
                slot.submitted_at = Some(Instant::now());
                slot.nodes = job.nodes.clone();
                if job.is_gone() {
                    let outcome = slot_outcome(&slot, job);
                    record_outcome(&slot.log_dir.join(OUTCOME_FILE), &outcome);
                    out.push((spec.attempt, Adopted::Ended(outcome)));
                    continue;
                }
                if let Some(ms) = running_since_ms {
                    let ran = Duration::from_millis(now_ms().saturating_sub(ms));
                    slot.starting_reported = true;
                    slot.running_since =
                        Some(Instant::now().checked_sub(ran).unwrap_or_else(Instant::now));
                    slot.checkpoint_seen_ns = newest_mtime_ns(&slot.checkpoint_dir).unwrap_or(0);
                }
                tracing::info!(attempt = spec.attempt, slurm_job = job.id, state = %job.state, "adopted a Slurm job the previous server started");
                state.slots.insert(spec.attempt, slot);
                out.push((spec.attempt, Adopted::Running));
            }
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
            .cfg
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
    pub fn stop(&self, attempt: u64) {
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
    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few map operations; a panic elsewhere must not wedge us.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, spec: &LaunchSpec) -> Slot {
        let layout = JobLayout::new(&self.cfg.shared_dir, &spec.job_id, spec.attempt_number);
        Slot {
            program: spec.entrypoint.first().cloned().unwrap_or_default(),
            log_dir: layout.attempt_dir.clone(),
            checkpoint_dir: layout.checkpoints.clone(),
            failure_file: layout.failure_file(),
            max_runtime: spec.max_runtime,
            slurm_id: None,
            submitted_at: None,
            starting_reported: false,
            running_since: None,
            stop: None,
            term_sent: None,
            cancel_sent: None,
            checkpoint_seen_ns: 0,
            nodes: Vec::new(),
        }
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.cfg.bin_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        }
    }

    /// Runs a Slurm command; its stdout, or what went wrong.
    async fn run(&self, name: &str, args: &[String]) -> Result<String, String> {
        let program = self.program(name);
        let child = Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        let out = match tokio::time::timeout(self.cfg.command_timeout, child).await {
            Err(_) => {
                return Err(format!(
                    "{name} did not answer within {:?}",
                    self.cfg.command_timeout
                ))
            }
            Ok(Err(e)) => {
                return Err(format!(
                    "cannot run {}: {e}; install the Slurm client commands or set executor.slurm.bin_dir",
                    program.display()
                ))
            }
            Ok(Ok(out)) => out,
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{name} failed ({}): {}", out.status, stderr.trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn squeue(&self) -> Result<Vec<SlurmJob>, String> {
        let text = self.run("squeue", &["--json".to_string()]).await?;
        report::parse_squeue(&text)
    }

    async fn sinfo(&self) -> Result<Vec<SlurmNode>, String> {
        let args = ["-N", "-h", "-o", SINFO_FORMAT].map(String::from);
        Ok(report::parse_sinfo(&self.run("sinfo", &args).await?))
    }

    /// Reports `Exited` and forgets the attempt; the outcome is written next to the logs
    /// first, so a server that dies before logging it finds it at its next start.
    fn finish(&self, state: &mut State, attempt: u64, outcome: Outcome) {
        if let Some(slot) = state.slots.remove(&attempt) {
            record_outcome(&slot.log_dir.join(OUTCOME_FILE), &outcome);
        }
        tracing::debug!(attempt, ?outcome, "Slurm attempt exited");
        let _ = self.events.send(ExecEvent::Exited {
            attempt,
            outcome,
            at_ms: now_ms(),
        });
    }

    /// Compares one `squeue` snapshot, taken from `polled_at`, with the attempts: reports
    /// what changed and plans the signals to send.
    fn observe(&self, jobs: &[SlurmJob], polled_at: Instant) -> Plan {
        let tag = &self.cfg.tag;
        let now = Instant::now();
        let by_id: BTreeMap<u64, &SlurmJob> = jobs.iter().map(|j| (j.id, j)).collect();
        let mut plan = Plan::default();
        let mut state = self.state();
        let attempts: Vec<u64> = state.slots.keys().copied().collect();
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
                    let reason = format!(
                        "Attempt lost: Slurm no longer knows job {id} (it was purged, or the cluster's state was reset); the job was queued again without using a retry"
                    );
                    self.finish(&mut state, attempt, Outcome::Lost { reason });
                }
                continue;
            };
            slot.nodes = job.nodes.clone();
            if job.is_gone() {
                let outcome = slot_outcome(slot, job);
                self.finish(&mut state, attempt, outcome);
                continue;
            }
            let started = matches!(
                job.state.as_str(),
                "RUNNING" | "SUSPENDED" | "COMPLETING" | "SIGNALING" | "STAGE_OUT"
            );
            if !slot.starting_reported {
                slot.starting_reported = true;
                let _ = self.events.send(ExecEvent::Starting { attempt });
            }
            if started && slot.running_since.is_none() {
                slot.running_since = Some(now);
                slot.checkpoint_seen_ns = newest_mtime_ns(&slot.checkpoint_dir).unwrap_or(0);
                let _ = self.events.send(ExecEvent::Running {
                    attempt,
                    pids: Vec::new(),
                    gpus: Vec::new(),
                    log_dir: slot.log_dir.clone(),
                    at_ms: now_ms(),
                });
            }
            if let (Some(limit), Some(since), None) =
                (slot.max_runtime, slot.running_since, slot.stop)
            {
                if now.duration_since(since) >= limit {
                    slot.stop = Some(StopCause::Timeout);
                }
            }
            if slot.stop.is_some() {
                let cancel = match (slot.cancel_sent, slot.term_sent) {
                    // A cancel that was lost (scancel failed, slurmctld busy) is sent again.
                    (Some(t), _) => now.duration_since(t) >= CANCEL_RETRY,
                    // Nothing runs yet: no grace to give.
                    (None, _) if !started => true,
                    (None, None) => {
                        plan.term.push(id);
                        slot.term_sent = Some(now);
                        false
                    }
                    (None, Some(t)) => now.duration_since(t) >= self.cfg.stop_grace,
                };
                if cancel {
                    plan.cancel.push(id);
                    slot.cancel_sent = Some(now);
                }
            }
            if slot.running_since.is_some() {
                plan.scans.push((attempt, slot.checkpoint_dir.clone()));
            }
        }
        // Marked jobs of attempts this server does not run: a submit that raced a crash, or an
        // attempt whose end was recorded while Slurm still had it.
        let live: BTreeSet<u64> = state.slots.keys().copied().collect();
        for j in jobs {
            if let Some((_, _, attempt)) = parse_marker(tag, &j.comment) {
                if !j.is_gone() && !live.contains(&attempt) {
                    tracing::warn!(
                        slurm_job = j.id,
                        attempt,
                        "cancelling a Slurm job of an attempt this server no longer runs"
                    );
                    plan.cancel.push(j.id);
                }
            }
        }
        plan
    }

    /// Reports checkpoints whose newest mtime moved forward.
    fn record_checkpoints(&self, scanned: &[(u64, u64)]) {
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
}

/// The capacity Slurm offers per instance type: usable nodes of the type's partition and
/// feature, less those held by jobs that are not this server's. A node that matches several
/// types counts for the first configured one, so that no node is offered twice.
fn capacity(
    instances: &[SlurmInstance],
    nodes: &[SlurmNode],
    jobs: &[SlurmJob],
    tag: &str,
) -> BTreeMap<String, u32> {
    let foreign: BTreeSet<&str> = jobs
        .iter()
        .filter(|j| !j.is_gone() && parse_marker(tag, &j.comment).is_none())
        .flat_map(|j| j.nodes.iter().map(String::as_str))
        .collect();
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    let mut out = BTreeMap::new();
    for inst in instances {
        let mut n = 0u32;
        for node in nodes {
            let matches = inst.partition.as_ref().is_none_or(|p| *p == node.partition)
                && inst
                    .feature
                    .as_ref()
                    .is_none_or(|f| node.features.contains(f));
            if !matches || claimed.contains(node.name.as_str()) {
                continue;
            }
            claimed.insert(node.name.as_str());
            if node.usable() && !foreign.contains(node.name.as_str()) {
                n += 1;
            }
        }
        out.insert(inst.instance_type.clone(), n);
    }
    out
}

/// How a job Slurm reports gone ended, for the attempt `slot`.
fn slot_outcome(slot: &Slot, job: &SlurmJob) -> Outcome {
    let id = job.id;
    if slot.stop == Some(StopCause::Timeout) {
        return Outcome::Failed {
            reason: TIMEOUT_REASON.to_string(),
            retryable: false,
        };
    }
    let nodes = job.nodes.join(",");
    let failed = |reason: String| Outcome::Failed {
        reason,
        retryable: true,
    };
    match job.state.as_str() {
        "COMPLETED" if job.exit.code == 0 && job.exit.signal == 0 => Outcome::Succeeded,
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
            if let Some(reason) = outcome::failure_file_reason(&slot.failure_file) {
                return failed(reason);
            }
            if job.exit.signal != 0 {
                return failed(format!(
                    "{ALGORITHM_ERROR}process killed by signal {}",
                    signal_name(job.exit.signal)
                ));
            }
            // Word for word the local executor's reason, so that one set of evaluateOnExit
            // rules serves both executors.
            failed(format!(
                "{ALGORITHM_ERROR}process exited with code {}",
                job.exit.code
            ))
        }
        "CANCELLED" if slot.stop.is_some() => failed(format!(
            "{ALGORITHM_ERROR}stopped: Slurm job {id} was cancelled after the grace period"
        )),
        "CANCELLED" => failed(format!(
            "{ALGORITHM_ERROR}Slurm job {id} was cancelled outside Quartermaster (scancel)"
        )),
        "TIMEOUT" => Outcome::Failed {
            reason: format!("{TIMEOUT_REASON} (Slurm's time limit ended job {id})"),
            retryable: false,
        },
        "OUT_OF_MEMORY" => failed(format!(
            "{ALGORITHM_ERROR}OutOfMemory: Slurm job {id} ran out of memory on {nodes}"
        )),
        "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" | "REVOKED" => Outcome::Lost {
            reason: format!(
                "Attempt lost: Slurm job {id} ended {} ({}) on {nodes}; the job was queued again without using a retry",
                job.state,
                if job.reason.is_empty() { "no reason given" } else { &job.reason }
            ),
        },
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

/// Prepares the job's directories, writes the script and submits it.
async fn submit(inner: Arc<Inner>, spec: LaunchSpec, instance: SlurmInstance) {
    let attempt = spec.attempt;
    let result = submit_inner(&inner, &spec, &instance).await;
    let mut state = inner.state();
    match result {
        Ok(id) => {
            if let Some(slot) = state.slots.get_mut(&attempt) {
                slot.slurm_id = Some(id);
                slot.submitted_at = Some(Instant::now());
                tracing::debug!(attempt, slurm_job = id, "submitted");
            }
            drop(state);
            inner.wake.notify_one();
        }
        Err(reason) => {
            tracing::warn!(attempt, %reason, "cannot submit the attempt to Slurm");
            inner.finish(
                &mut state,
                attempt,
                Outcome::Failed {
                    reason,
                    retryable: true,
                },
            );
        }
    }
}

async fn submit_inner(
    inner: &Inner,
    spec: &LaunchSpec,
    instance: &SlurmInstance,
) -> Result<u64, String> {
    let layout = JobLayout::new(&inner.cfg.shared_dir, &spec.job_id, spec.attempt_number);
    layout.prepare().map_err(|(path, e)| {
        format!(
            "{CLIENT_ERROR}cannot create '{}': {e}; check executor.slurm.shared_dir",
            path.display()
        )
    })?;
    let checkpoint_dir = layout.checkpoint_dir(spec.checkpoint_path.as_deref(), spec.attempt);
    let vars: Vec<(String, String)> = environment::common(spec, &layout, &checkpoint_dir)
        .into_iter()
        .filter(|(k, _)| k != "SM_HOSTS")
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
    let args = script::sbatch_args(
        spec,
        instance,
        &layout,
        &script_path,
        &job_name(spec),
        &marker(
            &inner.cfg.tag,
            &spec.job_id,
            spec.attempt_number,
            spec.attempt,
        ),
        inner.cfg.account.as_deref(),
        &inner.cfg.extra_sbatch_args,
    );
    let _permit = inner.submits.acquire().await.map_err(|e| e.to_string())?;
    // A stop that arrived while the attempt waited to be submitted: submit nothing.
    let stopped = inner
        .state()
        .slots
        .get(&spec.attempt)
        .is_none_or(|s| s.stop.is_some());
    if stopped {
        return Err(format!(
            "{ALGORITHM_ERROR}stopped before it was submitted to Slurm"
        ));
    }
    let out = inner.run("sbatch", &args).await.map_err(|e| {
        format!("Received status from SageMaker: InternalServerError: Slurm refused the job: {e}")
    })?;
    // --parsable prints "<id>" or "<id>;<cluster>".
    out.trim()
        .split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("Received status from SageMaker: InternalServerError: sbatch printed no job id: {out:?}"))
}

/// Reads Slurm every `poll` (sooner when woken by a start or stop), reports, signals.
async fn poll_loop(inner: std::sync::Weak<Inner>) {
    let (poll, mut last_capacity) = match inner.upgrade() {
        // What adopt() read is what the server already publishes.
        Some(i) => (i.cfg.poll, Some(i.state().capacity.clone())),
        None => return,
    };
    loop {
        let Some(inner) = inner.upgrade() else { return };
        let polled_at = Instant::now();
        let (jobs, nodes) = tokio::join!(inner.squeue(), inner.sinfo());
        match jobs {
            Err(e) => inner.report_error(e),
            Ok(jobs) => {
                inner.state().last_error = None;
                let plan = inner.observe(&jobs, polled_at);
                if !plan.term.is_empty() {
                    let mut args = vec!["--signal=TERM".to_string()];
                    args.extend(plan.term.iter().map(u64::to_string));
                    if let Err(e) = inner.run("scancel", &args).await {
                        tracing::warn!(error = %e, "scancel --signal=TERM failed");
                    }
                }
                if !plan.cancel.is_empty() {
                    let args: Vec<String> = plan.cancel.iter().map(u64::to_string).collect();
                    if let Err(e) = inner.run("scancel", &args).await {
                        tracing::warn!(error = %e, "scancel failed");
                    }
                }
                if let Ok(nodes) = nodes {
                    let cap = capacity(&inner.cfg.instances, &nodes, &jobs, &inner.cfg.tag);
                    inner.state().capacity = cap.clone();
                    if last_capacity.as_ref() != Some(&cap) {
                        let _ = inner.events.send(ExecEvent::Capacity {
                            capacity: cap.clone(),
                        });
                        last_capacity = Some(cap);
                    }
                }
                if !plan.scans.is_empty() {
                    inner.record_checkpoints(&checkpoint::scan(plan.scans).await);
                }
            }
        }
        let wake = inner.clone();
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

impl Inner {
    fn report_error(&self, e: String) {
        let mut state = self.state();
        if state.last_error.as_deref() != Some(e.as_str()) {
            tracing::error!(error = %e, "cannot read the Slurm cluster's state; attempts keep their last known state");
            state.last_error = Some(e);
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
            name: String::new(),
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
        let m = marker("t1", "job-a", 2, 9);
        assert_eq!(parse_marker("t1", &m), Some(("job-a", 2, 9)));
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
            job(1, &marker("me", "j", 1, 1), "RUNNING", &["n2"]),
            job(2, "someone else", "RUNNING", &["n5"]),
            job(3, "someone else", "COMPLETED", &["n4"]),
            job(4, &marker("other-server", "j", 1, 1), "RUNNING", &["n1"]),
        ];
        let cap = capacity(&instances, &nodes, &jobs, "me");
        assert_eq!(
            cap["ml.p4d.24xlarge"], 1,
            "n2 is ours; n1 another server's; n3 down"
        );
        assert_eq!(
            cap["ml.g5.xlarge"], 1,
            "n4 only: n1..n3 went to the first type, n5 is held"
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
            running_since: None,
            stop: None,
            term_sent: None,
            cancel_sent: None,
            checkpoint_seen_ns: 0,
            nodes: vec!["n1".into()],
        }
    }

    #[test]
    fn slurm_end_states_map_to_outcomes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = slot(dir.path());
        let mut j = job(5, "", "COMPLETED", &["n1"]);
        assert_eq!(slot_outcome(&s, &j), Outcome::Succeeded);
        j.state = "FAILED".into();
        j.exit = ExitStatus { code: 3, signal: 0 };
        assert_eq!(
            slot_outcome(&s, &j),
            Outcome::Failed {
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
            Outcome::Failed {
                reason: "Received status from SageMaker: AlgorithmError: loss is NaN".into(),
                retryable: true
            }
        );
        j.state = "NODE_FAIL".into();
        j.reason = "NodeDown".into();
        match slot_outcome(&s, &j) {
            Outcome::Lost { reason } => {
                assert!(reason.contains("NODE_FAIL (NodeDown) on n1"), "{reason}")
            }
            o => panic!("{o:?}"),
        }
        j.state = "TIMEOUT".into();
        assert!(matches!(
            slot_outcome(&s, &j),
            Outcome::Failed {
                retryable: false,
                ..
            }
        ));
        j.state = "OUT_OF_MEMORY".into();
        assert!(
            matches!(slot_outcome(&s, &j), Outcome::Failed { reason, retryable: true } if reason.contains("OutOfMemory"))
        );
        j.state = "CANCELLED".into();
        assert!(
            matches!(slot_outcome(&s, &j), Outcome::Failed { reason, .. } if reason.contains("outside Quartermaster"))
        );
        s.stop = Some(StopCause::Timeout);
        assert_eq!(
            slot_outcome(&s, &j),
            Outcome::Failed {
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
            matches!(slot_outcome(&s, &j), Outcome::Failed { reason, .. } if reason.starts_with(CLIENT_ERROR) && reason.contains("'train.py': not found"))
        );
    }

    fn inner(dir: &Path, grace: Duration) -> (Inner, mpsc::UnboundedReceiver<ExecEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut cfg = SlurmConfig::new(dir, vec![], "me");
        cfg.stop_grace = grace;
        let inner = Inner {
            cfg,
            events: tx,
            state: Mutex::new(State::default()),
            submits: Semaphore::new(1),
            wake: Notify::new(),
        };
        (inner, rx)
    }

    /// Attempt `attempt` as submitted: Slurm job `id`, sbatch returned at `at`.
    fn submitted(inner: &Inner, attempt: u64, id: u64, at: Instant) {
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

    fn ours(attempt: u64, id: u64, state: &str) -> SlurmJob {
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
                ExecEvent::Starting { attempt } => format!("starting {attempt}"),
                ExecEvent::Running { attempt, .. } => format!("running {attempt}"),
                ExecEvent::Exited {
                    attempt, outcome, ..
                } => format!("exited {attempt} {outcome:?}"),
                ExecEvent::Checkpoint { attempt, .. } => format!("checkpoint {attempt}"),
                ExecEvent::Capacity { .. } => "capacity".into(),
            });
        }
        out
    }

    #[test]
    fn a_job_is_reported_starting_then_running_then_exited_once() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, mut rx) = inner(dir.path(), Duration::from_secs(1));
        let t0 = Instant::now();
        submitted(&inner, 1, 10, t0);
        inner.observe(&[ours(1, 10, "PENDING")], t0);
        assert_eq!(drain(&mut rx), ["starting 1"]);
        inner.observe(&[ours(1, 10, "RUNNING")], t0);
        inner.observe(&[ours(1, 10, "RUNNING")], t0);
        assert_eq!(drain(&mut rx), ["running 1"]);
        inner.observe(&[ours(1, 10, "COMPLETING")], t0);
        assert!(
            drain(&mut rx).is_empty(),
            "a completing job still holds its nodes"
        );
        inner.observe(&[ours(1, 10, "COMPLETED")], t0);
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
    fn a_running_job_is_signalled_then_cancelled_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, _rx) = inner(dir.path(), Duration::from_millis(50));
        let t0 = Instant::now();
        submitted(&inner, 1, 10, t0);
        let running = [ours(1, 10, "RUNNING")];
        inner.observe(&running, t0);
        inner.state().slots.get_mut(&1).unwrap().stop = Some(StopCause::Requested);
        let plan = inner.observe(&running, t0);
        assert_eq!((plan.term.clone(), plan.cancel.clone()), (vec![10], vec![]));
        let plan = inner.observe(&running, t0);
        assert!(
            plan.term.is_empty() && plan.cancel.is_empty(),
            "the grace period runs"
        );
        std::thread::sleep(Duration::from_millis(60));
        let plan = inner.observe(&running, t0);
        assert_eq!((plan.term.clone(), plan.cancel.clone()), (vec![], vec![10]));
        let plan = inner.observe(&running, t0);
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
        submitted(&inner, 1, 10, t0);
        inner.state().slots.get_mut(&1).unwrap().stop = Some(StopCause::Requested);
        let plan = inner.observe(&[ours(1, 10, "PENDING")], t0);
        assert_eq!((plan.term, plan.cancel), (vec![], vec![10]));

        submitted(&inner, 2, 11, t0);
        inner.state().slots.get_mut(&2).unwrap().max_runtime = Some(Duration::ZERO);
        let plan = inner.observe(&[ours(2, 11, "RUNNING"), ours(1, 10, "PENDING")], t0);
        assert_eq!(plan.term, vec![11], "the runtime limit stops the attempt");
        drain(&mut rx);
        inner.observe(&[ours(2, 11, "CANCELLED")], t0);
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
        submitted(&inner, 1, 10, Instant::now());
        inner.observe(&[], before);
        assert!(
            drain(&mut rx).is_empty(),
            "the snapshot predates the submission"
        );
        inner.observe(&[], Instant::now());
        let events = drain(&mut rx);
        assert!(
            events[0].starts_with("exited 1 Lost") && events[0].contains("no longer knows job 10"),
            "{events:?}"
        );
        // A job id reused by a reset cluster, under another comment, is not this attempt.
        submitted(&inner, 2, 12, before);
        inner.observe(&[job(12, "someone's", "RUNNING", &["n1"])], Instant::now());
        assert!(drain(&mut rx)[0].starts_with("exited 2 Lost"));
    }

    #[test]
    fn marked_jobs_of_attempts_not_run_here_are_cancelled_and_others_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, _rx) = inner(dir.path(), Duration::from_secs(1));
        let plan = inner.observe(
            &[
                ours(7, 20, "RUNNING"),
                ours(8, 21, "COMPLETED"),
                job(22, &marker("other", "job-9", 1, 9), "RUNNING", &["n2"]),
                job(23, "", "RUNNING", &["n3"]),
            ],
            Instant::now(),
        );
        assert_eq!(plan.cancel, vec![20]);
    }
}
