//! The executor the driver drives: local processes or a Slurm cluster. Both take the same
//! launches and stops and report the same events, and both outlive the server: local attempts
//! under their supervisors, Slurm jobs in Slurm; a restarted server adopts them.
//!
//! The driver sees them through [`Execute`], so that its order of work (commit, then act) and
//! its recovery can be tested with a fake that records what it was asked.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use qm_executor::slurm::SlurmExecutor;
use qm_executor::{ExecError, LaunchSpec, LocalExecutor, Outcome};

use crate::command::Command;
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
    fn release(&self, _attempt: u64) {}
    /// Stops an attempt; it reports `Exited` once its processes are gone.
    fn stop(&self, attempt: u64);
    /// How an attempt ended, as the executor recorded it before reporting it.
    fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Outcome>;
    /// The directory that holds every attempt of `job_id`.
    fn job_dir(&self, job_id: &str) -> PathBuf;
    /// After a restart: the commands that say what became of the attempts `state` holds as
    /// live (adopted and still running, ended as recorded, or lost).
    fn reconcile(&self, state: &State) -> impl Future<Output = Result<Vec<Command>, ServerError>>;
    /// The log holds the exits of `attempts` (their supervisors may go).
    fn acknowledge(&self, _attempts: &[u64]) {}
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
    pub fn stop(&self, attempt: u64) {
        match self {
            Executor::Local(e) => e.stop(attempt),
            Executor::Slurm(e) => e.stop(attempt),
        }
    }

    /// How an attempt ended, as the executor recorded it before reporting it.
    pub fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Outcome> {
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

    fn release(&self, attempt: u64) {
        if let Executor::Local(local) = self {
            local.release(attempt);
        }
    }

    fn stop(&self, attempt: u64) {
        Executor::stop(self, attempt)
    }

    fn recorded_outcome(&self, job_id: &str, attempt_number: u32) -> Option<Outcome> {
        Executor::recorded_outcome(self, job_id, attempt_number)
    }

    fn job_dir(&self, job_id: &str) -> PathBuf {
        Executor::job_dir(self, job_id)
    }

    async fn reconcile(&self, state: &State) -> Result<Vec<Command>, ServerError> {
        match self {
            Executor::Local(local) => Ok(crate::driver::reconcile_local(state, local).await),
            Executor::Slurm(slurm) => crate::driver::reconcile_slurm(state, slurm).await,
        }
    }

    fn acknowledge(&self, attempts: &[u64]) {
        if let Executor::Local(local) = self {
            local.acknowledge(attempts);
        }
    }
}
