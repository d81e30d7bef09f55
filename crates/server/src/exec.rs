//! The executor the driver drives: local processes or a Slurm cluster. Both take the same
//! launches and stops and report the same events; they differ at start-up (the local one
//! stops what a previous server left running, the Slurm one adopts it) and at shutdown (local
//! attempts are stopped with the server, Slurm jobs keep running and are adopted next time).

use std::collections::BTreeMap;
use std::path::PathBuf;

use qm_executor::slurm::SlurmExecutor;
use qm_executor::{ExecError, LaunchSpec, LocalExecutor, Outcome};

/// One of the two executors.
#[derive(Debug, Clone)]
pub enum Executor {
    /// Processes on this machine.
    Local(LocalExecutor),
    /// Jobs of a Slurm cluster.
    Slurm(SlurmExecutor),
}

impl Executor {
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
