//! The executor the driver drives: local processes or a Slurm cluster. Both take the same
//! launches and stops and report the same events, and both outlive the server: local attempts
//! under their supervisors, Slurm jobs in Slurm; a restarted server adopts them.
//!
//! The driver sees them through [`Execute`], so that its order of work (commit, then act) and
//! its recovery can be tested with a fake that records what it was asked.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use qm_executor::slurm::{AdoptSpec, Adopted, SlurmExecutor};
use qm_executor::{AttemptId, ExecError, Exit, LaunchSpec, LocalExecutor, Reconciled};

use crate::command::{Command, ExitRecord};
use crate::error::ServerError;
use crate::state::State;

/// What the driver asks of an executor.
pub trait Execute: Send + 'static {
    /// Instances per type it offers.
    fn capacity(&self) -> BTreeMap<String, u32>;
    /// Starts an attempt; it reports `Running`, later `Exited`, as events.
    fn start(&self, spec: LaunchSpec) -> Result<(), ExecError>;
    /// Called while the batch that decided `spec`'s start is being made durable: what can be
    /// done before the attempt may run (its instances taken, its supervisor made ready) is
    /// done now, and [`Execute::release`] starts it once the batch is durable. `Ok(Some(spec))`
    /// hands the launch back for [`Execute::start`] after the commit instead.
    fn ready(&self, spec: LaunchSpec) -> Result<Option<LaunchSpec>, ExecError> {
        Ok(Some(spec))
    }
    /// Starts an attempt [`Execute::ready`] kept.
    fn release(&self, _attempt: AttemptId) {}
    /// Stops an attempt; it reports `Exited` once its processes are gone.
    fn stop(&self, attempt: AttemptId);
    /// How an attempt ended, as the executor recorded it before reporting it.
    fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Exit>;
    /// The directory that holds every attempt of `job_id`.
    fn job_dir(&self, job_id: &str) -> PathBuf;
    /// After a restart: the commands that say what became of the attempts `state` holds as
    /// live (adopted and still running, ended as recorded, or lost).
    fn reconcile(&self, state: &State) -> impl Future<Output = Result<Vec<Command>, ServerError>>;
    /// The log holds the exits of `attempts` (their supervisors may go).
    fn acknowledge(&self, _attempts: &[AttemptId]) {}
}

/// One of the two executors.
#[derive(Debug, Clone)]
pub enum Executor {
    /// Processes on this machine.
    Local(LocalExecutor),
    /// Jobs of a Slurm cluster.
    Slurm(SlurmExecutor),
}

impl Executor {
    /// For a stopping server, after its last commit: lets the acknowledgements it decided
    /// reach their supervisors (at most `within`), so that those of attempts that ended just
    /// before the stop exit rather than wait for the next server. Slurm keeps no such line.
    pub async fn settle(&self, within: std::time::Duration) {
        if let Executor::Local(e) = self {
            e.settle(within).await;
        }
    }

    /// Instances per type the executor offers.
    pub fn capacity(&self) -> BTreeMap<String, u32> {
        match self {
            Executor::Local(e) => e.capacity(),
            Executor::Slurm(e) => e.capacity(),
        }
    }

    /// Starts an attempt.
    pub fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        match self {
            Executor::Local(e) => e.start(spec),
            Executor::Slurm(e) => e.start(spec),
        }
    }

    /// Stops an attempt (SIGTERM, grace, then SIGKILL or cancellation).
    pub fn stop(&self, attempt: AttemptId) {
        match self {
            Executor::Local(e) => e.stop(attempt),
            Executor::Slurm(e) => e.stop(attempt),
        }
    }

    /// How an attempt ended, as the executor recorded it before reporting it.
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Exit> {
        match self {
            Executor::Local(e) => e.recorded_outcome(job_id, attempt_number),
            Executor::Slurm(e) => e.recorded_outcome(job_id, attempt_number),
        }
    }

    /// The directory that holds every attempt of `job_id`.
    pub fn job_dir(&self, job_id: &str) -> PathBuf {
        match self {
            Executor::Local(e) => e.job_dir(job_id),
            Executor::Slurm(e) => e.job_dir(job_id),
        }
    }

    /// Where attempt `attempt_number` of `job_id` keeps its logs.
    pub fn log_dir(&self, job_id: &str, attempt_number: u32) -> PathBuf {
        match self {
            Executor::Local(e) => e.log_dir(job_id, attempt_number),
            Executor::Slurm(e) => e.log_dir(job_id, attempt_number),
        }
    }
}

impl Execute for Executor {
    fn capacity(&self) -> BTreeMap<String, u32> {
        Executor::capacity(self)
    }

    fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        Executor::start(self, spec)
    }

    fn ready(&self, spec: LaunchSpec) -> Result<Option<LaunchSpec>, ExecError> {
        match self {
            // Finding (or forking) and connecting the supervisor, and its preparing the job,
            // happen while the log is written: not on the path from the decision to the job
            // running.
            Executor::Local(local) => local.ready(spec).map(|()| None),
            // sbatch is the start itself: only once the decision is durable.
            Executor::Slurm(_) => Ok(Some(spec)),
        }
    }

    fn release(&self, attempt: AttemptId) {
        if let Executor::Local(local) = self {
            local.release(attempt);
        }
    }

    fn stop(&self, attempt: AttemptId) {
        Executor::stop(self, attempt)
    }

    fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Exit> {
        Executor::recorded_outcome(self, job_id, attempt_number)
    }

    fn job_dir(&self, job_id: &str) -> PathBuf {
        Executor::job_dir(self, job_id)
    }

    async fn reconcile(&self, state: &State) -> Result<Vec<Command>, ServerError> {
        match self {
            Executor::Local(local) => Ok(reconcile_local(state, local).await),
            Executor::Slurm(slurm) => reconcile_slurm(state, slurm).await,
        }
    }

    fn acknowledge(&self, attempts: &[AttemptId]) {
        if let Executor::Local(local) = self {
            local.acknowledge(attempts);
        }
    }
}

/// Local attempts outlive their server under their supervisors: each one the log says was live
/// is adopted (its supervisor answered: it goes on, as the same attempt), recorded as it ended
/// (while no server watched), or lost (its machine rebooted or its supervisor died).
pub(crate) async fn reconcile_local(state: &State, local: &LocalExecutor) -> Vec<Command> {
    reconciled_commands(local.reconcile(state.recorded_attempts()).await)
}

/// What became of the attempts the log holds as live, from either executor, as the commands
/// that record it: one rule for both. An adopted attempt goes on as it was (the log learns its
/// processes only if it did not know them); an ended one is recorded as it ended; a lost one
/// is queued again without using a retry (within `max_lost_attempts`).
fn reconciled_commands(results: Vec<(AttemptId, Reconciled)>) -> Vec<Command> {
    let mut commands = Vec::new();
    let (mut adopted, mut ended) = (0, 0);
    for (attempt, what) in results {
        match what {
            Reconciled::Adopted { running } => {
                adopted += 1;
                // Spawned just before the previous server stopped, which did not log it.
                if let Some((pids, gpus, identity)) = running {
                    commands.push(Command::AttemptRunning {
                        attempt,
                        pids,
                        gpus,
                        supervisor: Some(identity),
                        at_ms: None,
                    });
                }
            }
            Reconciled::Ended(outcome, usage) => {
                ended += 1;
                commands.push(Command::AttemptExited {
                    attempt,
                    outcome: ExitRecord::from(outcome),
                    usage,
                });
            }
            Reconciled::Lost(reason) => commands.push(Command::AttemptExited {
                attempt,
                outcome: ExitRecord::Lost {
                    reason,
                    max_in_a_row: None,
                },
                usage: None,
            }),
        }
    }
    if adopted > 0 {
        eprintln!("qm: adopted {adopted} running attempt(s); they go on as they were");
    }
    if ended > 0 {
        tracing::info!(
            ended,
            "attempts ended while no server watched; their outcomes are recorded as they were"
        );
    }
    commands
}

/// Slurm jobs outlive their server: those still running are adopted, those that ended are
/// recorded as they ended (by Slurm, else by the outcome file the job left), and attempts
/// Slurm does not know are lost (queued again); [`reconciled_commands`] records them.
pub(crate) async fn reconcile_slurm(
    state: &State,
    slurm: &qm_executor::slurm::SlurmExecutor,
) -> Result<Vec<Command>, ServerError> {
    let mut results = Vec::new();
    let mut specs = Vec::new();
    for (attempt, _) in &state.live_attempts() {
        match state.live_launch(*attempt) {
            Some((launch, running)) => specs.push(AdoptSpec {
                spec: launch,
                running_since_ms: running.map(|ms| ms.max(0) as u64),
                // A stop the previous server had begun (a preemption, a termination) is
                // carried on: the core still waits for this attempt to go.
                stopping: state.attempt_stopping(*attempt),
            }),
            // Cannot happen for a live attempt; if it did, nothing could follow it.
            None => results.push((*attempt, Reconciled::Lost(
                "Attempt lost: the server restarted and could not rebuild it; the job was queued again without using a retry".into(),
            ))),
        }
    }
    let adopted = slurm
        .adopt(specs)
        .await
        .map_err(|e| ServerError::Executor(e.to_string()))?;
    for (attempt, what) in adopted {
        let reconciled = match what {
            Adopted::Running => Reconciled::Adopted { running: None },
            Adopted::Ended(o) => Reconciled::Ended(o, None),
            Adopted::Unknown => match state
                .attempt_identity(attempt)
                .and_then(|(job, n)| slurm.recorded_outcome(&job, n))
            {
                Some(o) => Reconciled::Ended(o, None),
                None => Reconciled::Lost(
                    "Attempt lost: Slurm has no job for it (it was never submitted, or Slurm forgot it while the server was down); the job was queued again without using a retry".into(),
                ),
            },
        };
        results.push((attempt, reconciled));
    }
    Ok(reconciled_commands(results))
}
