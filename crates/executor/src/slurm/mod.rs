//! The Slurm executor: each attempt is one Slurm job on exclusive nodes, one instance per node,
//! while quota shares, lending, reclaim and priorities stay Quartermaster's (DESIGN.md §4).
//!
//! * [`SlurmExecutor::start`] writes the attempt's batch script (`script`) into the job's
//!   directory under `shared_dir` (which every node must see at the same path) and submits it
//!   with `sbatch --exclusive --no-requeue`, at most a few `sbatch` at a time.
//! * One poller task runs `squeue --json` and `sinfo -N` every `poll` (never a call per job),
//!   turns what changed into [`crate::ExecEvent`]s (PENDING → `Starting`, RUNNING → `Running`, gone →
//!   `Exited`; NODE_FAIL and its kin → [`crate::Exit::Lost`]), carries out stops in batches
//!   (`scancel --signal=TERM` to every step task, then SIGKILL and `scancel` after the grace
//!   period), scans
//!   the running attempts' checkpoint directories and reports the capacity Slurm offers
//!   ([`crate::ExecEvent::Capacity`]): per instance type, the usable nodes of its partition/feature
//!   that no job of someone else holds.
//! * Jobs are recognised by their comment, `qm/<tag>/<job id>/<attempt number>/<attempt>`;
//!   `tag` is this server's, so several servers (and anyone else) can share a cluster. After a
//!   restart, [`SlurmExecutor::adopt`] takes the running jobs back; marked jobs of attempts the
//!   server no longer runs are cancelled.
//!
//! The capacity of an attempt counts as used until Slurm reports its job gone (a completing
//! job still holds its nodes).

mod executor;
pub mod report;
mod script;

pub use executor::{AdoptSpec, Adopted, SlurmExecutor};

use std::path::PathBuf;
use std::time::Duration;

/// How one instance type maps onto the cluster: one instance is one node of `partition` (if
/// set) having `feature` (if set). Also the server's `[[executor.slurm.instance]]` table,
/// read as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmInstance {
    /// SageMaker instance type, e.g. `ml.g5.xlarge`.
    pub instance_type: String,
    /// Slurm partition (`--partition`).
    pub partition: Option<String>,
    /// Node feature (`--constraint`).
    pub feature: Option<String>,
    /// GPUs per node requested with `--gres=gpu:N`; 0 asks for none.
    #[serde(default)]
    pub gpus_per_instance: u32,
}

/// How the Slurm executor reaches the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    /// Job directories (scripts, logs, checkpoints) go under `shared_dir/jobs/`; every node
    /// must see it at the same path.
    pub shared_dir: PathBuf,
    /// Time between SIGTERM and cancellation when an attempt is stopped.
    pub stop_grace: Duration,
    /// How often `squeue`/`sinfo` are read.
    pub poll: Duration,
    /// The instance types and where they live.
    pub instances: Vec<SlurmInstance>,
    /// Where `sbatch`, `squeue`, `sinfo`, `scancel` are; `None` = `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// `--account` for every job.
    pub account: Option<String>,
    /// More `sbatch` arguments, e.g. `--qos=...`, `--time=...`.
    pub extra_sbatch_args: Vec<String>,
    /// This server's mark in job comments.
    pub tag: String,
    /// Longest wait for one Slurm command.
    pub command_timeout: Duration,
}

impl SlurmConfig {
    /// A 120 s grace, a 1 s poll, commands from `PATH`, no account or extra arguments, a 60 s
    /// command timeout.
    pub fn new(shared_dir: impl Into<PathBuf>, instances: Vec<SlurmInstance>, tag: &str) -> Self {
        SlurmConfig {
            shared_dir: shared_dir.into(),
            stop_grace: Duration::from_secs(120),
            poll: Duration::from_secs(1),
            instances,
            bin_dir: None,
            account: None,
            extra_sbatch_args: Vec::new(),
            tag: tag.to_string(),
            command_timeout: Duration::from_secs(60),
        }
    }
}
