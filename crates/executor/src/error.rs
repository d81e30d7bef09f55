//! The crate's one error type. Errors are calls the executor refuses (a caller bug or a
//! configuration it cannot honour); what happens to a job's processes, spawn failures
//! included, is never an error but an [`crate::ExecEvent::Exited`] with a reason.

use qm_core::AttemptId;
use std::path::PathBuf;

/// A configuration or a call the executor refuses; nothing was started when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A directory the executor needs could not be created.
    #[error("cannot create directory '{}': {source}: check data_dir and its permissions", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The pools hand out more GPUs than `gpu_indices` lists.
    #[error("the pools need {needed} GPUs but gpu_indices lists only {available}: list more GPUs or lower gpus_per_instance")]
    NotEnoughGpus {
        /// GPUs the pools need (count × gpus_per_instance, summed).
        needed: usize,
        /// GPUs listed.
        available: usize,
    },
    /// A GPU index appears twice in `gpu_indices`.
    #[error("GPU index {0} is listed twice in gpu_indices: each GPU goes to one instance")]
    DuplicateGpu(u32),
    /// The attempt's instance type has no local pool.
    #[error("instance type '{0}' is not in the local inventory: add a pool for it or submit to a type that has one")]
    UnknownInstanceType(String),
    /// The attempt needs more instances than are free: the caller started beyond capacity.
    #[error("attempt {attempt} needs {requested} instance(s) of '{instance_type}' but only {free} are free: start attempts only within the free capacity")]
    InsufficientInstances {
        /// The attempt.
        attempt: AttemptId,
        /// Its instance type.
        instance_type: String,
        /// Instances it asked for.
        requested: u32,
        /// Instances of that type free at the time.
        free: u32,
    },
    /// `count` was 0: there is nothing to run.
    #[error("attempt {0} asks for 0 instances: InstanceCount must be at least 1")]
    NoInstances(AttemptId),
    /// An attempt with this id is still running.
    #[error("attempt {0} is already running: attempt ids must be unique")]
    DuplicateAttempt(AttemptId),
    /// The job id cannot safely name a directory.
    #[error("job id '{0}' cannot name a directory: use only letters, digits, '-', '_' and '.'")]
    InvalidJobId(String),
    /// Every uid of `[executor] job_uids` is in use (check_usable makes this a bug).
    #[error("attempt {0}: every uid of job_uids is in use: make the range at least as large as the instances")]
    NoJobUid(AttemptId),
    /// Attempts cannot run apart from the server as configured.
    #[error("isolation: {0}")]
    Isolation(String),
    /// `[executor] opt_ml = "required"` and attempts cannot get `/opt/ml`.
    #[error("opt_ml = \"required\" but attempts cannot get their own /opt/ml: {0}; run the server as root or set opt_ml = \"auto\"")]
    OptMl(String),
    /// `start` was called outside a tokio runtime.
    #[error("LocalExecutor::start must be called inside a tokio runtime")]
    NoRuntime,
    /// The kernel has no `pidfd_open` (or it is forbidden): supervisors cannot be verified.
    #[error("this kernel cannot open a pidfd ({0}): the local executor needs Linux 5.3 or later (and pidfd_open allowed) to tell its supervisors from processes that reused their pids")]
    NoPidfd(String),
    /// A reload asks for a change that takes a restart.
    #[error("{0}")]
    Reload(String),
    /// The Slurm cluster cannot be used as configured.
    #[error("slurm: {0}")]
    Slurm(String),
}
